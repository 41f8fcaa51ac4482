"""Which builder reads which model_type, and what happens to everything else.

BUILDERS maps a model_type to a function (config dict, model id) -> Arch. Custom-code model_types
are read as their declared or nearest known family (CUSTOM); wrappers whose text_config is known are
read as that text tower; anything else with the standard keys is read as a llama-style decoder and
marked approximate. Every model_type that is not exact is listed in known_gaps.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from ..errors import UnsupportedArchitecture
from .arch import Arch
from .known_gaps import APPROXIMATE, KNOWN_GAPS
from .quant import read_quant

Builder = Callable[[Mapping[str, Any], str], Arch]

BUILDERS: dict[str, Builder] = {}


def register(*model_types: str) -> Callable[[Builder], Builder]:
    def deco(fn: Builder) -> Builder:
        for t in model_types:
            BUILDERS[t] = fn
        return fn
    return deco


def register_table(table: Mapping[str, Any], build: Callable[[Mapping[str, Any], str, str, Any], Arch],
                   only: tuple[str, ...] | None = None) -> None:
    """Register build(cfg, model, model_type, traits) for every model_type of a traits table (or `only` these)."""
    def bind(model_type: str, traits: Any) -> Builder:
        return lambda cfg, model: build(cfg, model, model_type, traits)

    for model_type in only or tuple(table):
        BUILDERS[model_type] = bind(model_type, table[model_type])


def _load() -> None:
    # Importing the builder modules fills BUILDERS (each registers its model_types).
    from . import classic, decoders, encdec, encoders, encoders2, gemma, hybrids, hybrids2  # noqa: F401
    from . import dense_traits_tmp, llama_like, misc, misc2, moe, moe2, ssm, vlm, vlm_more, zamba  # noqa: F401


# Keys every transformer config has in some spelling; with them, an unknown model_type still gets a
# best-effort estimate (read as llama, marked approximate).
STANDARD = {
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim", "model_dim"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "vocab_size": ("vocab_size", "padded_vocab_size", "n_vocab"),
}


def _flatten(src: dict[str, Any]) -> dict[str, Any]:
    """Per-layer lists (gemma3n's intermediate_size) read as their largest value, for the llama reading."""
    out = dict(src)
    for key in ("intermediate_size", "num_key_value_heads", "head_dim"):
        v = out.get(key)
        if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            out[key] = max(v)
    return out


def _declared_type(cfg: Mapping[str, Any]) -> str | None:
    from .class_defaults import ARCHITECTURE_TYPES

    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        t = ARCHITECTURE_TYPES.get(archs[0])
        if t is not None and t in BUILDERS:
            return t
    return None


def fallback(cfg: Mapping[str, Any], model: str, model_type: str) -> Arch:
    """A model_type without a builder: custom code, a known text tower, or standard keys (approximate)."""
    from .config import architectures_of
    from .decoders import build
    from .llama_like import LLAMA
    from .custom import CUSTOM, NOTES

    if model_type in CUSTOM:
        family, translate = CUSTOM[model_type]
        src = dict(translate(cfg), model_type=family)
        arch = BUILDERS[family](src, model)
        how = "custom modeling code (auto_map)" if "auto_map" in cfg else "a model_type transformers does not ship"
        why = f"{how} read as {family}" + (f"; {NOTES[model_type]}" if model_type in NOTES else "")
        return dataclasses.replace(arch, model_type=model_type, custom_code="auto_map" in cfg, approximate=why)
    text = cfg.get("text_config")
    if isinstance(text, dict) and isinstance(text.get("model_type"), str):
        inner = text["model_type"]
        archs = architectures_of(cfg, model)
        # A ForCausalLM class of a multimodal wrapper (Qwen3_5ForCausalLM, Llama4ForCausalLM) is the text tower.
        text_only_class = bool(archs) and archs[0].endswith("ForCausalLM")
        why = None if text_only_class else f"only the text tower ({inner}) is counted"
        if inner in BUILDERS:
            arch = BUILDERS[inner](text, model)
            return dataclasses.replace(arch, model_type=model_type, text_tower_only=not text_only_class,
                                       custom_code="auto_map" in cfg, approximate=why,
                                       architectures=archs)
    declared = _declared_type(cfg)
    if declared is not None:  # an unknown (custom-code) model_type whose `architectures` names a transformers class
        src = dict(cfg, model_type=declared)
        arch = BUILDERS[declared](src, model)
        how = "custom modeling code (auto_map)" if "auto_map" in cfg else "an unknown model_type"
        return dataclasses.replace(arch, model_type=model_type, custom_code="auto_map" in cfg,
                                   approximate=f"{how} read as {declared}, the family of its declared class")
    found = {k: next((a for a in names if a in cfg), None) for k, names in STANDARD.items()}
    if not all(found.values()) and isinstance(text, dict):
        inner_found = {k: next((a for a in names if a in text), None) for k, names in STANDARD.items()}
        if all(inner_found.values()):  # an unknown wrapper around a text model: its text tower, approximately
            src = _flatten({**text, **{k: text[a] for k, a in inner_found.items() if a}})  # type: ignore[index]
            why = KNOWN_GAPS.get(model_type, "architecture not known")
            arch = build(dict(src, model_type=model_type), model, "llama", LLAMA)
            return dataclasses.replace(arch, text_tower_only=True, approximate=f"{why}: its text tower read as a llama-style decoder")
    if all(found.values()):
        # A best-effort reading: a key the unknown class leaves null takes llama's default, as a missing one does.
        src = _flatten({k: v for k, v in cfg.items() if v is not None})
        for k, alias in found.items():
            if cfg[alias] is not None:  # type: ignore[index]
                src.setdefault(k, cfg[alias])  # type: ignore[index]
        why = KNOWN_GAPS.get(model_type, "architecture not known")
        if "auto_map" in cfg:
            why = f"custom modeling code (auto_map), {why}"
        arch = build(dict(src, model_type=model_type), model, "llama", LLAMA)
        return dataclasses.replace(arch, approximate=f"{why}: read as a llama-style decoder")
    raise UnsupportedArchitecture(model, model_type, tuple(sorted(BUILDERS)))


def finish(cfg: Mapping[str, Any], model: str, arch: Arch) -> Arch:
    """Common to every builder: the checkpoint's quantisation, and the known-gap reason if any."""
    quant = read_quant(cfg, model)
    why = arch.approximate
    for table in (KNOWN_GAPS, APPROXIMATE):
        if why is None and arch.family in table:
            why = table[arch.family]
    if why is None and arch.custom_code:
        why = f"custom modeling code (auto_map) read as {arch.family}"
    if quant is None and why == arch.approximate:
        return arch
    return dataclasses.replace(arch, quant=quant, approximate=why)

_load()

# Every config class whose defaults the estimator may read (class_defaults.py is generated from these).
READ_TYPES: tuple[str, ...] = tuple(sorted({*BUILDERS, "gpt-sw3"}))
