"""config.json dict -> Arch: which family reads a model_type, and what happens to every other config.

In order: a decoder whose traits the one decoder builder reads (families.DECODERS); a family with its own layout
(families.BUILDERS); a wrapper around a language model of any family (families.WRAPPERS, given this module's
reader for its text tower); a custom-code model_type read as its declared or nearest known family; a wrapper whose
text_config is known (text tower only); any config with the standard keys, read as a llama-style decoder and
marked approximate. Anything else is UnsupportedArchitecture. Every model_type that is not exact is listed in
config/known_gaps.py. This is the only module that imports families/.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError, UnsupportedArchitecture
from .config.arch import Arch
from .config.custom_code import CUSTOM, NOTES
from .config.known_gaps import APPROXIMATE, KNOWN_GAPS
from .config.quantization import quant_config, read_quant
from .config.reader import architectures_of, model_type_of
from .config.transformers_defaults import ARCHITECTURE_TYPES
from .families import BUILDERS, DECODERS, KNOWN, SUB_CONFIGS, WRAPPERS
from .families.decoder import build
from .families.llama import LLAMA

# Keys every transformer config has in some spelling; with them, an unknown model_type still gets a
# best-effort estimate (read as llama, marked approximate).
STANDARD = {
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim", "model_dim"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "vocab_size": ("vocab_size", "padded_vocab_size", "n_vocab"),
}
# Every config class whose defaults the estimator may read (tools/write_transformers_defaults.py generates
# config/transformers_defaults.py from these and their sub-configs).
READ_TYPES: tuple[str, ...] = tuple(sorted({*KNOWN, *SUB_CONFIGS, "gpt-sw3"}))


def normalise(cfg: Mapping[str, Any], model: str) -> Arch:
    """Read a config.json dict the way transformers' config class and modeling file would (see the module's
    docstring for the order), then attach the checkpoint's quantisation and the known-gap reason if any."""
    if not isinstance(cfg, Mapping):
        raise ConfigError(model, None, None, f"config must be a JSON object, not {type(cfg).__name__}")
    model_type = model_type_of(cfg, model)
    arch = read_known(cfg, model, model_type) if model_type in KNOWN else fallback(cfg, model, model_type)
    return finish(cfg, model, arch)


def read_known(cfg: Mapping[str, Any], model: str, model_type: str) -> Arch:
    """A model_type one of the families reads."""
    if model_type in DECODERS:
        return build(cfg, model, model_type, DECODERS[model_type])
    if model_type in BUILDERS:
        return BUILDERS[model_type](cfg, model)
    return WRAPPERS[model_type](cfg, model, read_text)


def read_text(cfg: Mapping[str, Any], model: str) -> Arch:
    """A wrapper's text tower (its model_type already set), by whichever family reads it."""
    model_type = model_type_of(cfg, model)
    if model_type not in KNOWN:
        raise ConfigError(model, "text_config.model_type", model_type, "is not a supported text model")
    return read_known(cfg, model, model_type)


def _flatten(src: dict[str, Any]) -> dict[str, Any]:
    """Per-layer lists (gemma3n's intermediate_size) read as their largest value, for the llama reading."""
    out = dict(src)
    for key in ("intermediate_size", "num_key_value_heads", "head_dim"):
        v = out.get(key)
        if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            out[key] = max(v)
    return out


def _declared_type(cfg: Mapping[str, Any]) -> str | None:
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        t = ARCHITECTURE_TYPES.get(archs[0])
        if t is not None and t in KNOWN:
            return t
    return None


# The reason of custom code read as a family with nothing more to say (the custom_code finding says it); what a
# reason adds after "; " (a tower not counted, a layout read as another's) is said apart (plainly_custom)
CUSTOM_READING = "custom modeling code (auto_map) read as "


def plainly_custom(a: Arch) -> bool:
    """Whether the estimate is approximate only in being custom code read as a family (CUSTOM_READING, nothing
    added after "; ")."""
    return bool(a.custom_code and a.approximate and a.approximate.startswith(CUSTOM_READING)
                and "; " not in a.approximate)


def fallback(cfg: Mapping[str, Any], model: str, model_type: str) -> Arch:
    """A model_type no family reads: custom code, a known text tower, or standard keys (approximate)."""
    if model_type in CUSTOM:
        family, translate = CUSTOM[model_type]
        arch = read_known(dict(translate(cfg), model_type=family), model, family)
        why = (f"{CUSTOM_READING}{family}" if "auto_map" in cfg else f"a model_type transformers does not ship read "
               f"as {family}") + (f"; {NOTES[model_type]}" if model_type in NOTES else "")
        return dataclasses.replace(arch, model_type=model_type, custom_code="auto_map" in cfg, approximate=why)
    text = cfg.get("text_config")
    if isinstance(text, dict) and isinstance(text.get("model_type"), str) and text["model_type"] in KNOWN:
        inner = text["model_type"]
        archs = architectures_of(cfg, model)
        # A ForCausalLM class of a multimodal wrapper (Qwen3_5ForCausalLM, Llama4ForCausalLM) is the text tower.
        text_only_class = bool(archs) and archs[0].endswith("ForCausalLM")
        text_why: str | None = None if text_only_class else f"only the text tower ({inner}) is counted"
        arch = read_known(text, model, inner)
        return dataclasses.replace(arch, model_type=model_type, text_tower_only=not text_only_class,
                                   custom_code="auto_map" in cfg, approximate=text_why, architectures=archs)
    declared = _declared_type(cfg)
    if declared is not None:  # an unknown (custom-code) model_type whose `architectures` names a transformers class
        arch = read_known(dict(cfg, model_type=declared), model, declared)
        how = "custom modeling code (auto_map)" if "auto_map" in cfg else "an unknown model_type"
        return dataclasses.replace(arch, model_type=model_type, custom_code="auto_map" in cfg,
                                   approximate=f"{how} read as {declared}, the family of its declared class")
    found = {k: next((a for a in names if a in cfg), None) for k, names in STANDARD.items()}
    if not all(found.values()) and isinstance(text, dict):
        inner_found = {k: next((a for a in names if a in text), None) for k, names in STANDARD.items()}
        if all(inner_found.values()):  # an unknown wrapper around a text model: its text tower, approximately
            src = _flatten({**text, **{k: text[a] for k, a in inner_found.items() if a}})
            why = KNOWN_GAPS.get(model_type, "architecture not known")
            arch = build(dict(src, model_type=model_type), model, "llama", LLAMA)
            return dataclasses.replace(arch, text_tower_only=True,
                                       approximate=f"{why}: its text tower read as a llama-style decoder")
    if all(found.values()):
        # A best-effort reading: a key the unknown class leaves null takes llama's default, as a missing one does.
        src = _flatten({k: v for k, v in cfg.items() if v is not None})
        for k, alias in found.items():
            if alias is not None and cfg[alias] is not None:
                src.setdefault(k, cfg[alias])
        why = KNOWN_GAPS.get(model_type, "architecture not known")
        if "auto_map" in cfg:
            why = f"custom modeling code (auto_map), {why}"
        arch = build(dict(src, model_type=model_type), model, "llama", LLAMA)
        return dataclasses.replace(arch, approximate=f"{why}: read as a llama-style decoder")
    raise UnsupportedArchitecture(model, model_type, tuple(sorted(KNOWN)))


def finish(cfg: Mapping[str, Any], model: str, arch: Arch) -> Arch:
    """Common to every family: the checkpoint's quantisation, and the known-gap reason if any."""
    quant = read_quant(cfg, model)
    q = quant_config(cfg, model) if quant is not None else None
    why = arch.approximate
    for table in (KNOWN_GAPS, APPROXIMATE):
        if why is None and arch.family in table:
            why = table[arch.family]
    if why is None and arch.custom_code:
        why = f"{CUSTOM_READING}{arch.family}"
    if quant is None and why == arch.approximate:
        return arch
    return dataclasses.replace(arch, quant=quant, quant_config=q, approximate=why)
