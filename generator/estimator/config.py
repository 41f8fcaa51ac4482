"""Config reading under transformers semantics: aliases, per-family defaults, text_config, auto_map → Arch."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from ..errors import ConfigError
from .arch import Arch
from .reader import LIMITS, KeyUse

__all__ = ["Arch", "KeyUse", "LIMITS", "normalise"]

# Keys llama reads; a custom-code (`auto_map`) config with all of them is read as llama...
LLAMA_KEYS = ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size")
# ...unless a key says the architecture is not a dense llama-like decoder (experts, MLA, SSM,
# hybrid layer patterns, encoders, vision towers): reading those as llama would be silently wrong.
NOT_LLAMA_KEY = re.compile(r"expert|moe|lora_rank|ssm|mamba|conv_|vision|encoder|hybrid|block_type|layer_type|"
                           r"linear_attn|router|first_k_dense|nextn|n_group|topk|parallel_attn|n_embd|rwkv|"
                           r"attention_layers|block_configs", re.IGNORECASE)


def model_type_of(cfg: Mapping[str, Any], model: str) -> str:
    model_type = cfg.get("model_type")
    if model_type is None:
        raise ConfigError(model, "model_type", None, "required key is missing")
    if not isinstance(model_type, str):
        raise ConfigError(model, "model_type", model_type, "must be a string")
    return model_type


def normalise(cfg: Mapping[str, Any], model: str) -> Arch:
    """Read a config.json dict the way transformers' config class and modeling file would.

    In order: a dense family of families.py; a family with its own builder (registry.py); a custom-code
    model_type read as its declared or nearest known family; a wrapper whose text_config is known
    (text tower only); any config with the standard keys, read as a llama-style decoder and marked
    approximate. Anything else is UnsupportedArchitecture.
    """
    if not isinstance(cfg, Mapping):
        raise ConfigError(model, None, None, f"config must be a JSON object, not {type(cfg).__name__}")
    from . import registry  # builders import this module

    model_type = model_type_of(cfg, model)
    if model_type in registry.BUILDERS:
        arch = registry.BUILDERS[model_type](cfg, model)
    else:
        arch = registry.fallback(cfg, model, model_type)
    arch = registry.finish(cfg, model, arch)
    return arch


def architectures_of(cfg: Mapping[str, Any], model: str) -> tuple[str, ...]:
    archs = cfg.get("architectures")
    if archs is None:
        return ()
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ConfigError(model, "architectures", archs, "must be a list of class names")
    return tuple(a[:200] for a in archs)
