"""Per-layer attention windows: which layers attend to a sliding window, and how wide it is.

A config's explicit `layer_types` wins ("sliding_attention", "chunked_attention" are windowed);
otherwise each family's configuration file derives them (rules below, transformers 5.24
`configuration_<model_type>.py` __post_init__). A windowed layer caches at most `window` tokens
(its KV cache is capped at the window: hf-mem PR #61; vLLM's sliding-window KV manager).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...errors import ConfigError
from .reader import KeyUse, Reader

# rule(reader, layers, window) -> per-layer windows. `window` is sliding_window (None: no window).
Rule = Callable[[Reader, int, int], list[int]]


def _all(r: Reader, n: int, w: int) -> list[int]:
    return [w] * n  # modeling_mistral.py: every layer uses config.sliding_window


def _pattern(period_key: str | None, period: int) -> Rule:
    def rule(r: Reader, n: int, w: int) -> list[int]:
        p = r.int(period_key, period) if period_key else period
        return [w if (i + 1) % p else 0 for i in range(n)]  # every p-th layer is global
    return rule


def _qwen2(r: Reader, n: int, w: int) -> list[int]:
    if not r.flag("use_sliding_window", False):
        return [0] * n
    first = r.int("max_window_layers", 28, minimum=0)
    return [w if i >= first else 0 for i in range(n)]  # configuration_qwen2.py


def _qwen2_moe(r: Reader, n: int, w: int) -> list[int]:
    if not r.flag("use_sliding_window", False):
        return [0] * n
    last = r.int("max_window_layers", 28, minimum=0)
    return [w if (i + 1) % 2 and i < last else 0 for i in range(n)]  # configuration_qwen2_moe.py


RULES: dict[str, Rule] = {
    "mistral": _all, "mixtral": _all, "phi3": _all, "starcoder2": _all, "phimoe": _all, "ministral": _all,
    "qwen2": _qwen2, "qwen3": _qwen2, "qwen3_moe": _qwen2, "smollm3": _qwen2, "qwen2_moe": _qwen2_moe,
    "gemma2": _pattern(None, 2), "gpt_oss": _pattern(None, 2), "gemma3_text": _pattern("sliding_window_pattern", 6),
    "cohere2": _pattern("sliding_window_pattern", 4), "olmo3": _pattern(None, 4),
    "afmoe": _pattern("global_attn_every_n_layers", 4), "vaultgemma": _pattern(None, 2),
    # configuration_mimo_v2_flash.py: full attention on layer 0 and every 6th layer
    "mimo_v2_flash": lambda r, n, w: [0 if i == 0 or (i + 1) % 6 == 0 else w for i in range(n)],
}


# Families whose sliding window is off unless a config key turns it on.
SWITCHED = {"qwen2", "qwen3", "qwen3_moe", "smollm3", "qwen2_moe"}


def windows_from_types(types: list[Any], n: int, w: int, chunk: int = 0) -> list[int]:
    out = []
    for t in types[:n]:
        t = str(t)
        out.append(w if "sliding" in t else chunk if "chunk" in t else 0)
    return out


def layer_windows(cfg: Mapping[str, Any], model: str, model_type: str, n: int, uses: list[KeyUse],
                  rule: Rule | None = None, aliases: Mapping[str, tuple[str, ...]] | None = None,
                  defaults: Mapping[str, Any] | None = None) -> tuple[int, ...]:
    """Per layer, the attention window (0 = full context). `aliases` and `defaults`: the family's own (a config
    class the generated defaults do not hold yet: families/ergo.py, families/kolibri.py)."""
    r = Reader(cfg, model, model_type, aliases, defaults)
    named = any(k in cfg for k in ("sliding_window", *(aliases or {}).get("sliding_window", ())))
    w = r.int("sliding_window", required=False, minimum=0) \
        if named or model_type in RULES or "sliding_window" in (defaults or {}) else None
    chunk = r.int("attention_chunk_size", required=False, minimum=0) if "attention_chunk_size" in cfg else 0
    types = cfg.get("layer_types")
    out: list[int]
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types) or len(types) < n:
            raise ConfigError(model, "layer_types", types, f"must be a list of {n} layer type names")
        out = windows_from_types(types, n, w or 0, chunk or 0)
    elif w and (rule or RULES.get(model_type)):
        out = (rule or RULES[model_type])(r, n, w)
    else:
        out = [0] * n
    uses.extend(u for u in r.uses if all(u.name != v.name for v in uses))
    return tuple(out)
