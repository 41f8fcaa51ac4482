"""Config reading under transformers semantics: aliases, per-family defaults, text_config, auto_map → Arch."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from ..errors import ConfigError
from .arch import Arch
from .class_defaults import CLASS_DEFAULTS
from .families import FAMILIES, Family
from .reader import LIMITS, KeyUse

__all__ = ["Arch", "KeyUse", "LIMITS", "normalise"]

# Keys llama reads; a custom-code (`auto_map`) config with all of them is read as llama...
LLAMA_KEYS = ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size")
# ...unless a key says the architecture is not a dense llama-like decoder (experts, MLA, SSM,
# hybrid layer patterns, encoders, vision towers): reading those as llama would be silently wrong.
NOT_LLAMA_KEY = re.compile(r"expert|moe|lora_rank|ssm|mamba|conv_|vision|encoder|hybrid|block_type|layer_type|"
                           r"linear_attn|router|first_k_dense|nextn|n_group|topk|parallel_attn|n_embd|rwkv|"
                           r"attention_layers|block_configs", re.IGNORECASE)


class _Reader:
    """Reads keys from one config dict, recording the source of every value."""

    def __init__(self, cfg: Mapping[str, Any], model: str, fam: Family) -> None:
        self.cfg, self.model, self.fam = cfg, model, fam
        self.uses: list[KeyUse] = []

    def _lookup(self, name: str) -> tuple[Any, str] | None:
        for key in (name, *self.fam.aliases.get(name, ())):
            if key in self.cfg and self.cfg[key] is not None:
                return self.cfg[key], f"config:{key}"
        if name in self.fam.defaults:
            return self.fam.defaults[name], f"default:{self.fam.model_type}"
        class_defaults = CLASS_DEFAULTS.get(self.fam.model_type, {})  # the config class's constructor defaults
        for key in (name, *self.fam.aliases.get(name, ())):
            if class_defaults.get(key) is not None:
                return class_defaults[key], f"default:{self.fam.model_type}"
        return None

    def int(self, name: str, default: int | None = None, *, required: bool = True, minimum: int = 1) -> int | None:
        found = self._lookup(name)
        if found is None:
            if default is not None:
                self.uses.append(KeyUse(name, default, f"default:{self.fam.model_type}"))
                return default
            if required:
                raise ConfigError(self.model, name, None, "required key is missing")
            return None
        value, source = found
        key = source.split(":", 1)[1] if source.startswith("config:") else name
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(self.model, key, value, "must be a positive integer")
        if value < minimum:
            raise ConfigError(self.model, key, value, f"must be at least {minimum}")
        limit = LIMITS.get(name, 1 << 40)
        if value > limit:
            raise ConfigError(self.model, key, value, f"is larger than any supported model (max {limit:,})")
        self.uses.append(KeyUse(name, value, source))
        return value

    def flag(self, spec: bool | str | None, default: bool = False) -> bool:
        """A trait that is either fixed by the family (bool) or read from a config key (str)."""
        if spec is None:
            return default
        if isinstance(spec, bool):
            return spec
        found = self._lookup(spec)
        if found is None:
            self.uses.append(KeyUse(spec, default, f"default:{self.fam.model_type}"))
            return default
        value, source = found
        if not isinstance(value, bool):
            raise ConfigError(self.model, spec, value, "must be true or false")
        self.uses.append(KeyUse(spec, value, source))
        return value

    def number(self, name: str, default: float) -> float:
        value = self.cfg.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value <= 1):
            raise ConfigError(self.model, name, value, "must be a number in (0, 1]")
        self.uses.append(KeyUse(name, value, f"config:{name}"))
        return float(value)


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
    if model_type in FAMILIES:
        arch = dense_arch(cfg, model, FAMILIES[model_type], cfg, False)
    elif model_type in registry.BUILDERS:
        arch = registry.BUILDERS[model_type](cfg, model)
    else:
        arch = registry.fallback(cfg, model, model_type)
    arch = registry.finish(cfg, model, arch)
    return arch


def dense_arch(cfg: Mapping[str, Any], model: str, fam: Family, src: Mapping[str, Any], text_only: bool,
               approximate: str | None = None) -> Arch:
    """A dense family of families.py: read its keys, then build its spec (dense.py)."""
    from .dense import dense_spec
    from .windows import layer_windows

    r = _Reader(src, model, fam)
    hidden = r.int("hidden_size")
    layers = r.int("num_hidden_layers")
    heads = r.int("num_attention_heads")
    vocab = r.int("vocab_size")
    max_context = r.int("max_position_embeddings", 2048 if fam.position == "alibi" else None)

    kv_heads = _kv_heads(r, fam, heads)
    if fam.head_dim_from_config:
        head_dim = r.int("head_dim", required=False)
    else:
        head_dim = None
    if head_dim is None:
        if hidden % heads:
            raise ConfigError(model, "num_attention_heads", heads, f"does not divide hidden_size {hidden}")
        head_dim = hidden // heads
        r.uses.append(KeyUse("head_dim", head_dim, "derived:hidden_size // num_attention_heads"))
    if fam.intermediate_default_x4:
        intermediate = 4 * hidden if fam.model_type == "bloom" else r.int("intermediate_size", 4 * hidden)
    else:
        intermediate = r.int("intermediate_size")
    embed_dim = r.int("word_embed_proj_dim", hidden) if fam.model_type == "opt" else hidden

    layer_norms, parallel = _layer_layout(r, fam)
    qk_norm = fam.qk_norm if (fam.qk_norm_key is None or r.flag(fam.qk_norm_key)) else None
    tie = r.flag("tie_word_embeddings", fam.tie_default)
    act = src.get("hidden_act") or src.get("activation_function") or fam.act_default
    final_norm = True
    if fam.model_type == "opt":
        final_norm = r.flag("do_layer_norm_before", True) and not src.get("_remove_final_layer_norm", False)
    norm = fam.norm
    if fam.model_type == "opt" and not r.flag("layer_norm_elementwise_affine", True):
        norm = "layernorm_noparams"
    windows = layer_windows(src, model, fam.model_type, layers, r.uses)
    arch = Arch(
        model_type=cfg["model_type"], family=fam.model_type,
        architectures=architectures_of(cfg, model), custom_code="auto_map" in cfg, text_tower_only=text_only,
        hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        intermediate=intermediate, vocab=vocab, max_context=max_context, tie=tie, act=str(act)[:40],
        norm=norm, layer_norms=layer_norms, parallel=parallel, mlp=fam.mlp,
        qkv_bias=r.flag(fam.qkv_bias), o_bias=r.flag(fam.o_bias), mlp_bias=r.flag(fam.mlp_bias),
        qk_norm=qk_norm, qk_norm_kind=fam.qk_norm_kind or norm, position=fam.position,
        learned_positions=(max_context + fam.learned_position_offset) if fam.position == "learned" else 0,
        embed_norm=fam.embed_norm, final_norm=final_norm, lm_head_bias=fam.lm_head_bias, embed_dim=embed_dim,
        fused_qkv=fam.fused_qkv, fused_gate_up=fam.fused_gate_up, rotary_dims=_rotary_dims(r, fam, head_dim),
        uses=tuple(r.uses), raw=src, layer_windows=windows, approximate=approximate,
    )
    return dataclasses.replace(arch, spec=dense_spec(arch))


def _kv_heads(r: _Reader, fam: Family, heads: int) -> int:
    if fam.model_type in ("gpt2", "gptj", "opt", "bloom", "gpt_neox"):
        return heads
    if fam.model_type == "falcon":
        # modeling_falcon.FalconAttention: new_decoder_architecture uses num_kv_heads; else
        # multi_query (default true) means one K/V head; else full multi-head.
        if r.flag("new_decoder_architecture"):
            return r.int("num_kv_heads", heads)
        return 1 if r.flag("multi_query", True) else heads
    return r.int("num_key_value_heads", heads)


def _layer_layout(r: _Reader, fam: Family) -> tuple[tuple[str, ...], bool]:
    if fam.model_type == "falcon":
        if r.flag("new_decoder_architecture"):
            n = r.int("num_ln_in_parallel_attn", 2)
            return (("pre_attn", "pre_mlp") if n == 2 else ("pre_attn",)), True
        if r.flag("parallel_attn", True):
            return ("pre_attn",), True
        return ("pre_attn", "pre_mlp"), False
    if fam.model_type == "gpt_neox":
        return fam.layer_norms, r.flag("use_parallel_residual", True)
    if fam.model_type == "stablelm" and r.flag("use_parallel_residual"):
        return ("pre_attn",), True
    return fam.layer_norms, fam.parallel


def _rotary_dims(r: _Reader, fam: Family, head_dim: int) -> int:
    if fam.position != "rope":
        return 0
    if fam.model_type == "gptj":
        return r.int("rotary_dim", head_dim) or head_dim
    rope = r.cfg.get("rope_parameters") if isinstance(r.cfg.get("rope_parameters"), dict) else {}
    default = {"phi": 0.5, "stablelm": 0.25, "gpt_neox": 0.25}.get(fam.model_type, 1.0)
    key = "rotary_pct" if fam.model_type == "gpt_neox" and "rotary_pct" in r.cfg else "partial_rotary_factor"
    factor = r.number(key, rope.get("partial_rotary_factor", default) if isinstance(rope, dict) else default)
    return int(head_dim * factor)


def architectures_of(cfg: Mapping[str, Any], model: str) -> tuple[str, ...]:
    archs = cfg.get("architectures")
    if archs is None:
        return ()
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ConfigError(model, "architectures", archs, "must be a list of class names")
    return tuple(a[:200] for a in archs)
