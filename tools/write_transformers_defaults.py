#!/usr/bin/env python3
"""Writes generator/estimator/config/transformers_defaults.py from the installed transformers (a generated file).

    .venv/bin/python tools/write_transformers_defaults.py

The estimator is pure, so it cannot ask transformers what a key missing from config.json becomes; the table holds
the constructor default of every scalar field of every config class the estimator reads, each class's
attribute_map, the model classes of those model_types, which of them hold their routed experts as tensors of
an experts module rather than nn.Linear layers (bitsandbytes leaves those unquantised), and which of them cannot
checkpoint their layers. tests/test_oracle_defaults.py fails when the table and
the installed transformers differ (after a transformers upgrade: run this, review the diff).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import transformers  # noqa: E402
from transformers import CONFIG_MAPPING  # noqa: E402
from transformers.models.auto import modeling_auto  # noqa: E402

from generator.estimator.graph.nodes import build_graph  # noqa: E402
from generator.estimator.normalise import READ_TYPES, normalise  # noqa: E402

TABLE = ROOT / "generator" / "estimator" / "config" / "transformers_defaults.py"

# Fields that never shape the model (token ids, dropout, init, bookkeeping).
SKIP = {"transformers_version", "architectures", "output_hidden_states", "return_dict", "dtype", "id2label",
        "label2id", "problem_type", "pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id",
        "decoder_start_token_id", "initializer_range", "use_cache", "tokenizer_class", "prefix",
        "task_specific_params", "finetuning_task", "output_attentions", "torchscript", "pruned_heads",
        "chunk_size_feed_forward", "is_encoder_decoder", "forced_bos_token_id", "forced_eos_token_id",
        "suppress_tokens", "begin_suppress_tokens", "attn_implementation", "cls_token_id", "mask_token_id",
        "unk_token_id", "image_token_id", "video_token_id", "image_token_index", "video_token_index"}
SKIP_PARTS = ("dropout", "eps", "init", "std", "epsilon", "_token_id")


def model_types() -> list[str]:
    """Every config class the estimator may read: its builders' model_types and their sub-configs."""

    seen: list[str] = []
    todo = [t for t in READ_TYPES if t in CONFIG_MAPPING]
    while todo:
        t = todo.pop(0)
        if t in seen:
            continue
        seen.append(t)
        for sub in getattr(CONFIG_MAPPING[t], "sub_configs", {}).values():
            st = getattr(sub, "model_type", None)
            if isinstance(st, str) and st in CONFIG_MAPPING and st not in seen:
                todo.append(st)
    return sorted(seen)


def _scalar(v):
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return False  # not a Python literal; no shape depends on it
    return isinstance(v, (int, float, str, bool)) or v is None


def field_defaults(model_type: str) -> dict:
    out = {}
    for f in dataclasses.fields(CONFIG_MAPPING[model_type]):
        if f.name in SKIP or any(p in f.name for p in SKIP_PARTS) or f.name.startswith("_"):
            continue
        v = f.default
        if v is dataclasses.MISSING:
            if f.default_factory is dataclasses.MISSING:
                continue
            try:
                v = f.default_factory()
            except Exception:  # noqa: BLE001 - a factory that needs arguments has no default
                continue
        if isinstance(v, float) and v != v:
            continue
        if _scalar(v) or (isinstance(v, (list, tuple)) and len(v) <= 128 and all(_scalar(x) for x in v)):
            out[f.name] = list(v) if isinstance(v, tuple) else v
        elif isinstance(v, dict) and all(isinstance(k, str) and _scalar(x) for k, x in v.items()):
            out[f.name] = dict(v)
    return out


def render() -> str:
    lines = ['"""Constructor defaults of every transformers config class the estimator reads (generated).',
             "",
             f"transformers {transformers.__version__}; regenerate with `python tools/write_transformers_defaults.py`.",
             "A key missing from config.json (or null) takes this value, as the config class would; a None",
             "here means the class derives the value (e.g. head_dim = hidden_size // num_attention_heads).",
             '"""', "", "from __future__ import annotations", "", "from typing import Any", "",
             "CLASS_DEFAULTS: dict[str, dict[str, Any]] = {"]
    for t in model_types():
        d = field_defaults(t)
        lines.append(f"    {t!r}: {{{', '.join(f'{k!r}: {v!r}' for k, v in sorted(d.items()))}}},")
    lines.append("}")
    lines += ["", "# Each config class's attribute_map: a key config.json may use instead of the field (alias -> field).",
              "ATTRIBUTE_MAPS: dict[str, dict[str, str]] = {"]
    for t in model_types():
        amap = {k: v for k, v in getattr(CONFIG_MAPPING[t], "attribute_map", {}).items() if isinstance(v, str)}
        if amap:
            lines.append(f"    {t!r}: {{{', '.join(f'{k!r}: {v!r}' for k, v in sorted(amap.items()))}}},")
    lines.append("}")
    lines += ["", "# Model classes (config.json `architectures`) of the model_types we read -> their model_type, for",
              "# custom-code configs whose own model_type is unknown but whose declared class is a transformers one.",
              "ARCHITECTURE_TYPES: dict[str, str] = {"]
    candidates: dict[str, list[str]] = {}
    read = set(model_types())
    for name in sorted(dir(modeling_auto)):
        table = getattr(modeling_auto, name)
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES") and isinstance(table, dict):
            for t, cls in table.items():
                if t in read and isinstance(cls, str) and t not in candidates.setdefault(cls, []):
                    candidates[cls].append(t)

    def squash(text: str) -> str:
        return text.lower().replace("_", "").replace("-", "")

    # A class shared by several model_types (LlamaForCausalLM serves exaone too) belongs to its namesake.
    classes = {cls: max(ts, key=lambda t: (squash(cls).startswith(squash(t)), len(t), t)) for cls, ts in
               candidates.items()}
    lines += [f"    {c!r}: {t!r}," for c, t in sorted(classes.items())]
    lines.append("}")
    grouped = grouped_expert_types()
    lines += _type_set("GROUPED_MM_EXPERTS", grouped,
                       "Model types whose modeling file decorates its experts class with use_experts_implementation: "
                       "by default their routed experts run through transformers' grouped_mm (integrations/moe.py "
                       "grouped_mm_experts_forward), which is no autocast op: the input is cast to the experts' "
                       "dtype, so under AMP the experts keep their tensors in fp32 and autocast caches no bf16 "
                       "copy of their weights.")
    lines += _type_set("TENSOR_EXPERTS", other_tensor_expert_types(grouped),
                       "Model types whose routed experts transformers holds as tensors of an experts module (3-D "
                       "gate_up_proj, down_proj, ...), not as nn.Linear layers: bitsandbytes' 4-bit and 8-bit "
                       "conversion (integrations/bitsandbytes.py replace_with_bnb_linear: Conv1D or nn.Linear only) "
                       "leaves them in the dtype the model loads in. The grouped ones, and these:",
                       base="GROUPED_MM_EXPERTS")
    lines += _type_set("NO_GRADIENT_CHECKPOINTING", no_checkpointing_types(),
                       "Model types none of whose model classes supports gradient checkpointing (PreTrainedModel."
                       "supports_gradient_checkpointing False: gradient_checkpointing_enable raises ValueError, so "
                       "neither the Trainer's gradient_checkpointing=True nor peft's prepare_model_for_kbit_training "
                       "runs on them).")
    return "\n".join(lines) + "\n"


def auto_classes() -> dict[str, list[type]]:
    """Per model_type, the model classes transformers' auto mappings build for it (AutoModelForCausalLM's, Seq2Seq's,
    ImageTextToText's, an encoder's heads...) that import here."""
    out: dict[str, list[type]] = {}
    for name in sorted(dir(modeling_auto)):
        table = getattr(modeling_auto, name)
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES") and isinstance(table, dict):
            for t, cls_name in table.items():
                cls = getattr(transformers, cls_name, None) if isinstance(cls_name, str) else None
                if cls is not None:
                    out.setdefault(t, []).append(cls)
    return out


def no_checkpointing_types() -> list[str]:
    """The model_types we read whose every model class (auto_classes) has supports_gradient_checkpointing False; a
    type none of whose classes imports here is left out."""
    classes = auto_classes()
    return [t for t in model_types() if classes.get(t)
            and not any(getattr(c, "supports_gradient_checkpointing", False) for c in classes[t])]


def _type_set(name: str, types: list[str], comment: str, base: str = "") -> list[str]:
    """A frozenset literal of model types, after its comment wrapped to 116 characters a line; `base`: another
    set's name, the literal holding what it adds to it."""
    lines, words = [""], comment.split()
    line = "#"
    for word in words:
        if len(line) + 1 + len(word) > 116:
            lines.append(line)
            line = "#"
        line += " " + word
    union = f"{base} | " if base else ""
    return [*lines, line, f"{name}: frozenset[str] = {union}frozenset({{", *(f"    {t!r}," for t in types), "})"]


# Class defaults transformers cannot build a model from as they stand (the oracle tests repair them alike).
BUILD_REPAIRS = {"dbrx": {"attn_config": {"rope_theta": 10000.0}}}


def grouped_expert_types() -> list[str]:
    """The model_types we read whose modeling file decorates an experts class with use_experts_implementation: the
    type's own modeling file, and the files of the classes the auto mappings build for it (auto_classes: sarvam_mla
    builds DeepseekV3ForCausalLM, sarvam_moe Glm4MoeForCausalLM, neither with a modeling file of its own)."""
    import importlib
    import inspect

    from transformers.models.auto.configuration_auto import model_type_to_module_name

    classes = auto_classes()
    out = []
    for t in model_types():
        module = model_type_to_module_name(t)
        modules = {f"transformers.models.{module}.modeling_{module}"} | {c.__module__ for c in classes.get(t, ())}
        sources = []
        for m in sorted(modules):
            try:
                sources.append(inspect.getsource(importlib.import_module(m)))
            except (ImportError, OSError, TypeError):
                continue
        if any("@use_experts_implementation" in s for s in sources):
            out.append(t)
    return out


def other_tensor_expert_types(grouped: list[str]) -> list[str]:
    """Beside the `grouped` types (use_experts_implementation: transformers 5's fused experts), the model_types we
    read whose routed experts transformers holds as parameters outside nn.Linear / Conv1D: those whose class, built
    from its defaults on the meta device, has parameters under an `experts` module that no nn.Linear or Conv1D owns
    (dbrx, jetmoe, llama4, ...). nllb-moe and switch_transformers keep nn.Linear experts: bitsandbytes quantises
    theirs."""
    import warnings

    import torch
    from torch import nn
    from transformers.pytorch_utils import Conv1D

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    out = []
    for t in model_types():
        if t in grouped:
            continue
        try:
            config = CONFIG_MAPPING[t](**BUILD_REPAIRS.get(t, {}))
            graph = build_graph(normalise(config.to_dict(), t))
            if not any(p.top_k for b, _ in graph.spec.distinct_layers for p in b.parts):
                continue
            auto = (transformers.AutoModelForCausalLM if t in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
                    else transformers.AutoModel)
            with torch.device("meta"):
                model = auto.from_config(config)
        except Exception:  # noqa: BLE001 - a class neither the estimator nor transformers builds from its defaults
            continue
        linear = {name for name, m in model.named_modules() if isinstance(m, (nn.Linear, Conv1D))}
        if any(".experts." in f".{name}" and "shared" not in name and name.rsplit(".", 1)[0] not in linear
               for name, _ in model.named_parameters()):
            out.append(t)
    return out


def main() -> int:
    TABLE.write_text(render(), encoding="utf-8")
    print(f"wrote {TABLE.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
