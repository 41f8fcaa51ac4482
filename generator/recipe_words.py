"""The site's training jobs as the recipes they are and the flags that run them: the words the page shows."""

from __future__ import annotations

from typing import Any

from .estimator.memory.recipes import RECIPES, SITE_RECIPES

# A Job field the site's recipes set, as the command's flag (job_flags.py); a boolean's pair: (on, off)
FLAGS: dict[str, str | tuple[str, str]] = {
    "method": "--method", "lora_rank": "--lora-rank", "lora_targets": "--lora-targets", "optimizer": "--optimizer",
    "grad_accum": "--grad-accum", "padded": ("--padded", "--no-padded"),
    "tower_adapters": ("--tower-adapters", "--no-tower-adapters"),
}
# What each site job changes of its recipe, and why (recipes.SITE_RECIPES's comment)
WHY = {"full": "PyTorch's foreach AdamW for its fused default (the step holds a temporary per parameter)",
       "lora": "LoRA on every linear layer and PyTorch's foreach AdamW",
       "qlora": "paged AdamW 32-bit as the QLoRA paper runs it and one micro-batch of unpadded samples"}
TOWERS = " (its vision tower and projector adapted as peft's all-linear adapts them)"  # a model that reads images


def flag(key: str, value: Any) -> str:
    """One option as the command's flag: ("optimizer", "adamw") -> "--optimizer adamw"."""
    name = FLAGS[key]
    if isinstance(name, tuple):
        return name[0] if value else name[1]
    return f"{name} {value}"


def site_recipe_flags(method: str, lora_rank: int) -> str:
    """The flags that give the site's job of a training method: "--recipe hf-trainer --optimizer adamw"."""
    recipe, options = SITE_RECIPES[method]
    given = ({} if method == "full" else {"method": method, "lora_rank": lora_rank}) | dict(options)
    return " ".join([f"--recipe {recipe}", *(flag(k, v) for k, v in given.items())])


def site_recipes(lora_rank: int, towers: bool = False) -> list[dict[str, str]]:
    """Per training method: its name, recipe, the framework the recipe runs, the flags and what they change;
    `towers`: the model reads images, whose tower QLoRA's --tower-adapters adapts."""
    names = {"full": "Full fine-tune", "lora": "LoRA", "qlora": "QLoRA"}
    # a recipe's summary opens with the framework and how it is run, before its colon
    return [{"method": names[m], "recipe": recipe, "framework": RECIPES[recipe].summary.split(":")[0],
             "flags": site_recipe_flags(m, lora_rank), "why": WHY[m] + (TOWERS if towers and m == "qlora" else "")}
            for m, (recipe, _) in SITE_RECIPES.items()]
