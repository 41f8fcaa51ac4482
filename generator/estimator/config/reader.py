"""Reading one config dict under transformers semantics: the key, else the config class's default.

Every value read is recorded with its source (config key, class default, or a derivation), and every
bad value raises a ConfigError naming the model, the key and the value.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any, NamedTuple, TypeAlias

from ...errors import ConfigError
from .transformers_defaults import ATTRIBUTE_MAPS, CLASS_DEFAULTS

# Upper bounds far above any published model, so that a hostile value (10**18) is refused with a
# clear message instead of overflowing a float later. The largest real values today are about
# hidden 25,600 / layers 126 / vocab 262,208 / context 10M / 512 experts.
LIMITS = {
    "hidden_size": 1 << 20,
    "num_hidden_layers": 100_000,
    "num_attention_heads": 1 << 16,
    "num_key_value_heads": 1 << 16,
    "head_dim": 1 << 16,
    "intermediate_size": 1 << 24,
    "vocab_size": 100_000_000,
    "max_position_embeddings": 1 << 32,
    "word_embed_proj_dim": 1 << 20,
}


DEFAULT_LIMIT = 1 << 32


def limit_of(name: str) -> int:
    """The largest value a key may take: layer counts (we build every layer) and head/expert counts are
    bounded like num_hidden_layers / num_attention_heads; other sizes by DEFAULT_LIMIT."""
    if name in LIMITS:
        return LIMITS[name]
    low = name.lower()
    counts = ("depth", "num_blocks", "n_layer", "n_layers", "num_layers")
    if ("layer" in low and "size" not in low and "dim" not in low) or low in counts:
        return LIMITS["num_hidden_layers"]
    if "expert" in low or ("head" in low and "dim" not in low):
        return 1 << 16
    return DEFAULT_LIMIT


class KeyUse(NamedTuple):
    """Where one normalised value came from: a config key, an alias, or the family default (a named tuple: a
    config makes dozens, read only by name)."""

    name: str
    value: Any
    source: str  # "config:<key>", "default:<model_type>", or "derived:<formula>"


def activation_name(r: Reader) -> str | None:
    """The MLP's activation as the config (or its class) names it, under any of its spellings; not recorded
    as a key use (the structure table shows it), and a non-string value reads as unknown."""
    keys = ("hidden_act", "activation_function", "hidden_activation", "afn")
    for value in [r.cfg.get(k) for k in keys] + [r.defaults.get(k) for k in keys]:  # the config before its class
        if isinstance(value, str):
            return value[:40]
    return None


_UNSET = object()  # Reader._memo's "not asked yet" (an answer may be None)
_new = tuple.__new__

# The builtins, for annotations inside Reader, whose methods int() and str() shadow them there.
_Int: TypeAlias = int
_Str: TypeAlias = str


class Reader:
    """Reads keys of one config dict; a missing or null key takes the config class's default."""

    def __init__(self, cfg: Mapping[str, Any], model: str, model_type: str,
                 aliases: Mapping[str, tuple[str, ...]] | None = None, defaults: Mapping[str, Any] | None = None) -> None:
        self.cfg, self.model, self.model_type = cfg, model, model_type
        # The family's own aliases, then the config class's attribute_map in both directions.
        merged: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in (aliases or {}).items()}
        for alias, field_name in ATTRIBUTE_MAPS.get(model_type, {}).items():
            merged[field_name] = (*merged.get(field_name, ()), alias)
            merged[alias] = (*merged.get(alias, ()), field_name)
        self.aliases = merged
        self.defaults = {**CLASS_DEFAULTS.get(model_type, {}), **(defaults or {})}
        self.uses: list[KeyUse] = []
        self._seen: set[str] = set()
        self._memo: dict[tuple[Any, ...], Any] = {}  # answers already given (per-layer rules ask again)

    def _record(self, name: str, value: Any, source: str) -> None:
        if name not in self._seen:
            self._seen.add(name)
            self.uses.append(_new(KeyUse, (name, value, source)))  # KeyUse(name, value, source), at C speed

    def derived(self, name: str, value: Any, formula: str) -> Any:
        self._record(name, value, f"derived:{formula}")
        return value

    def lookup(self, name: str) -> tuple[Any, str] | None:
        """(value, source) or None. An explicit null is None (transformers passes it to the class)."""
        cfg = self.cfg
        aliases = self.aliases.get(name)
        if not aliases:  # the loops below over the one key
            if name in cfg:
                value = cfg[name]
                return None if value is None else (value, "config:" + name)
            value = self.defaults.get(name)
            return None if value is None else (value, "default:" + self.model_type)
        keys = (name, *aliases)
        for key in keys:
            if key in cfg:
                value = cfg[key]
                return None if value is None else (value, f"config:{key}")
        for key in keys:
            value = self.defaults.get(key)
            if value is not None:
                return value, f"default:{self.model_type}"
        return None

    def _absent(self, name: str) -> tuple[str, None, str]:
        """A required key that lookup found no value for, as ConfigError's (key, value, why): present as null, or
        missing."""
        for key in (name, *self.aliases.get(name, ())):
            if key in self.cfg:  # lookup reads an explicit null as no value
                return key, None, "is null, where a value is required"
        return name, None, "required key is missing"

    def has(self, name: str) -> bool:
        return self.lookup(name) is not None

    def _key(self, name: str, source: str) -> str:
        return source.split(":", 1)[1] if source.startswith("config:") else name

    def int(self, name: str, default: int | None = None, *, required: bool = True, minimum: int = 1) -> Any:
        memo = ("int", name, default, required, minimum)
        value = self._memo.get(memo, _UNSET)
        if value is _UNSET:
            self._memo[memo] = value = self._int(name, default, required, minimum)
        return value

    def _int(self, name: _Str, default: _Int | None, required: bool, minimum: _Int) -> Any:
        found = self.lookup(name)
        if found is None:
            if default is not None:
                self._record(name, default, f"default:{self.model_type}")
                return default
            if required:
                raise ConfigError(self.model, *self._absent(name))
            return None
        value, source = found
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(self.model, self._key(name, source), value,
                              "must be a positive integer" if minimum > 0 else "must be an integer")
        if value < minimum:
            raise ConfigError(self.model, self._key(name, source), value, f"must be at least {minimum}")
        limit = limit_of(name)
        if value > limit:
            raise ConfigError(self.model, self._key(name, source), value,
                              f"is larger than any supported model (max {limit:,})")
        self._record(name, value, source)
        return value

    def opt_int(self, name: _Str, minimum: _Int = 1) -> _Int | None:
        return self.int(name, required=False, minimum=minimum)

    def flag(self, spec: bool | _Str | None, default: bool = False) -> bool:
        """A trait that is either fixed by the family (bool) or read from a config key (str)."""
        if spec is None:
            return default
        if isinstance(spec, bool):
            return spec
        found = self.lookup(spec)
        if found is None:
            self._record(spec, default, f"default:{self.model_type}")
            return default
        value, source = found
        if not isinstance(value, bool):
            raise ConfigError(self.model, self._key(spec, source), value, "must be true or false")
        self._record(spec, value, source)
        return value

    def on(self, name: _Str) -> bool:
        """An opt-in flag (add_cross_attention): true only where the config or its class sets it true, and recorded
        only then, so that a config leaving it off reads, and reports, exactly as one without the key."""
        found = self.lookup(name)
        return found is not None and found[0] is True and self.flag(name)

    def number(self, name: _Str, default: float, *, low: float = 0.0, high: float = 1.0) -> float:
        found = self.lookup(name)
        if found is None:
            return default
        value, source = found
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low < value <= high):
            raise ConfigError(self.model, self._key(name, source), value, f"must be a number in ({low:g}, {high:g}]")
        self._record(name, value, source)
        return float(value)

    def str(self, name: _Str, default: _Str | None = None) -> Any:
        found = self.lookup(name)
        if found is None:
            return default
        value, source = found
        if not isinstance(value, str):
            raise ConfigError(self.model, self._key(name, source), value, "must be a string")
        self._record(name, value[:40], source)
        return value

    def list(self, name: _Str, kind: Any = None, length: _Int | None = None) -> Any:
        memo = ("list", name, kind, length)
        if memo not in self._memo:
            self._memo[memo] = self._list(name, kind, length)
        return self._memo[memo]

    def _list(self, name: _Str, kind: Any, length: _Int | None) -> Any:
        kind = kind or "".__class__  # `str` in this class body is the method above
        found = self.lookup(name)
        if found is None:
            return None
        value, source = found
        key = self._key(name, source)
        ok = (lambda v: isinstance(v, bool)) if kind is True.__class__ else \
            (lambda v: isinstance(v, kind) and not isinstance(v, bool))
        if not isinstance(value, list) or not all(ok(v) for v in value):
            raise ConfigError(self.model, key, value, f"must be a list of {kind.__name__}")
        if length is not None and len(value) < length:
            raise ConfigError(self.model, key, value, f"must have at least {length} entries")
        self._record(name, f"list of {len(value)}", source)
        return value

    def once(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """What make() returns, made once for this config under `key`: a per-layer rule (a hybrid's mixer) asks
        every layer for a list of the whole stack."""
        memo = ("once", key)
        if memo not in self._memo:
            self._memo[memo] = make()
        return self._memo[memo]

    def sub(self, name: _Str) -> Mapping[_Str, Any] | None:
        """A nested config dict (text_config, vision_config, attn_config...), or None."""
        value = self.cfg.get(name)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ConfigError(self.model, name, value, "must be a JSON object")
        return value

    def child(self, cfg: Mapping[_Str, Any], model_type: _Str, aliases: Mapping[_Str, tuple[_Str, ...]] | None = None,
              prefix: _Str = "") -> Reader:
        """A reader for a nested config that records its uses into this one, under `prefix`."""
        if not isinstance(cfg, Mapping):
            raise ConfigError(self.model, prefix.rstrip(".") or model_type, cfg, "must be a JSON object")
        child = Reader(cfg, self.model, model_type, aliases)
        child.uses = _Prefixed(self.uses, prefix)
        return child


class _Prefixed(list):
    """Appends into the parent's use list, prefixing nested key names (vision_config.hidden_size)."""

    def __init__(self, target: list[KeyUse], prefix: str) -> None:
        super().__init__()
        self.target, self.prefix = target, prefix

    def append(self, use: KeyUse) -> None:
        self.target.append(KeyUse(self.prefix + use.name, use.value, use.source) if self.prefix else use)


def model_type_of(cfg: Mapping[str, Any], model: str) -> str:
    model_type = cfg.get("model_type")
    if model_type is None:
        raise ConfigError(model, "model_type", None, "is null, where a value is required" if "model_type" in cfg
                          else "required key is missing")
    if not isinstance(model_type, str):
        raise ConfigError(model, "model_type", model_type, "must be a string")
    return model_type


def architectures_of(cfg: Mapping[str, Any], model: str) -> tuple[str, ...]:
    archs = cfg.get("architectures")
    if archs is None:
        return ()
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ConfigError(model, "architectures", archs, "must be a list of class names")
    return tuple(a[:200] for a in archs)
