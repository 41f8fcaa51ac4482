"""Shared by the oracle tests (meta-device counts, config forms, repairs); checks that each repair is needed."""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

from generator.errors import TraceError
from generator.estimator.normalise import normalise
from generator.estimator.graph.nodes import build_graph

# Configs transformers 5.24 cannot build from its own class defaults, and the smallest repair that makes
# them build: each names the default that is missing or inconsistent (the repaired value is a realistic one).
REPAIRS: dict[str, dict[str, Any]] = {
    "ministral": {"head_dim": 128},  # head_dim None: MinistralAttention computes head_dim ** -0.5
    "hunyuan_v1_dense": {"head_dim": 128},  # same
    "hunyuan_v1_moe": {"head_dim": 128},  # same
    "nemotron": {"num_key_value_heads": 8},  # None: num_heads // num_key_value_heads
    "dbrx": {"attn_config": {"rope_theta": 10000.0}},  # DbrxAttentionConfig has no rope_theta default
    "dots1": {"n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 8},  # all None
    "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    "lfm2_moe": {"layer_types": (["conv", "conv", "full_attention"] * 11)[:32]},  # layer_types None
    "reformer": {"is_decoder": True},  # ReformerModelWithLMHead refuses is_decoder=False
    # its default text_config has Per-Layer Embeddings, which validate_architecture refuses for an assistant
    "gemma4_assistant": {"text_config": {"hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0}},
}


def quiet() -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")


def config_forms(model_type: str, arch_class: str | None) -> dict[str, dict[str, Any] | Exception]:
    """The class's default config (to_dict) and its sparse form (to_diff_dict), repaired where listed.

    `architectures` names the class being counted when the default config has none (a Hub file always
    does); it selects the head, it does not change a shape.
    """
    from transformers import CONFIG_MAPPING

    repair = REPAIRS.get(model_type, {})
    try:
        config = CONFIG_MAPPING[model_type](**repair)
    except Exception as exc:  # noqa: BLE001 - transformers itself refuses: reported as the case's outcome
        return {"defaults": exc, "sparse": exc}
    forms: dict[str, dict[str, Any] | Exception] = {
        "defaults": {**config.to_dict(), **repair},
        "sparse": {"model_type": model_type, **config.to_diff_dict(), **repair},
    }
    for form in forms.values():
        if isinstance(form, dict) and not form.get("architectures") and arch_class:
            form["architectures"] = [arch_class]
    return forms


def meta_params(build: Callable[[], Any]) -> int:
    """Parameters of what build() makes under torch.device("meta"), tied (shared) tensors once."""
    import torch

    with torch.device("meta"):
        model = build()
    return sum(p.numel() for p in model.parameters())


def config_object(cfg: dict[str, Any]) -> Any:
    """The transformers config class of cfg's model_type, built from the dict (as from_pretrained would)."""
    from transformers import CONFIG_MAPPING

    kwargs = {k: v for k, v in cfg.items() if k not in ("model_type", "auto_map")}
    return CONFIG_MAPPING[cfg["model_type"]](**kwargs)


def meta_count(cfg: dict[str, Any], auto: Callable[..., Any]) -> int:
    """What transformers counts: Auto*.from_config under torch.device("meta"), tied tensors once."""
    config = config_object(cfg)
    return meta_params(lambda: auto.from_config(config))


def our_count(cfg: dict[str, Any], name: str) -> int:
    return build_graph(normalise(cfg, name)).params_total


@functools.lru_cache(maxsize=None)
def outcome(model_type: str, form: str, auto_name: str, arch_class: str | None) -> tuple[str, str]:
    """("exact" | "mismatch" | "no-oracle" | "refused", detail) for one case."""
    import transformers

    quiet()
    cfg = config_forms(model_type, arch_class)[form]
    if isinstance(cfg, Exception):
        return "no-oracle", f"transformers refuses the default config: {type(cfg).__name__}: {str(cfg)[:120]}"
    try:
        meta = meta_count(cfg, getattr(transformers, auto_name))
    except Exception as exc:  # noqa: BLE001
        return "no-oracle", f"transformers cannot build it: {type(exc).__name__}: {str(exc)[:120]}"
    try:
        ours = our_count(cfg, f"{model_type}:{form}")
    except TraceError as exc:
        return "refused", str(exc)[:200]
    if ours == meta:
        return "exact", f"{ours:,}"
    return "mismatch", f"ours {ours:,} vs transformers {meta:,} ({ours - meta:+,})"


def test_every_repair_is_still_needed():
    """A repair stays only while transformers cannot build the untouched default config."""
    import pytest

    pytest.importorskip("torch")
    import transformers
    from transformers import CONFIG_MAPPING

    quiet()
    still_needed = []
    for model_type in REPAIRS:
        try:
            meta_count(CONFIG_MAPPING[model_type]().to_dict(), transformers.AutoModelForCausalLM)
        except Exception:  # noqa: BLE001 - the failure is the point
            still_needed.append(model_type)
    assert sorted(still_needed) == sorted(REPAIRS)
