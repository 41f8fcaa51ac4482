"""site_config.yaml → Assumptions, cards, GPUs and site settings (the only reader of that file).

The defaults ship inside the package (generator/site_config.yaml, a link to the repository's
site_config.yaml); a site_config.yaml in the working directory, or --config FILE, overrides them key by
key (mappings merge, any other value replaces the default)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .estimator import Assumptions, Card, Gpu

DEFAULT_CONFIG = Path(__file__).resolve().parent / "site_config.yaml"  # the packaged defaults
LOCAL_CONFIG = Path("site_config.yaml")  # in the working directory, when there is one

# site.repository goes into the pages' `pip install git+<url>` line: a plain https URL, nothing a shell reads.
REPOSITORY_RE = re.compile(r"^https://[A-Za-z0-9.-]+(/[A-Za-z0-9._~-]+)*/?$")

# A citation in a source note: "[SILY]", "[AWS-SKY]". Every key cited must be listed under sources:.
CITATION_RE = re.compile(r"\[([A-Z0-9][A-Z0-9-]*)\]")

# site_config.yaml job keys → Assumptions fields, where the names differ.
_JOB_FIELDS = {"epochs": "job_epochs", "batch": "job_batch", "tokens": "job_tokens", "samples": "job_samples"}


@dataclass(frozen=True)
class Source:
    """One citation key of site_config.yaml: what the source is, and its address (None: none to give)."""

    key: str
    title: str
    url: str | None


@dataclass(frozen=True)
class Settings:
    assumptions: Assumptions
    cards: tuple[Card, ...]
    gpus: Mapping[str, Gpu]
    site: Mapping[str, str]
    crawl: Mapping[str, Any]
    sources: Mapping[str, Source] = field(default_factory=dict)  # by key, in the file's order


def cited(text: str) -> list[str]:
    """The citation keys a source note cites, in order: "RunPod [SILY] [X]" -> ["SILY", "X"]."""
    return CITATION_RE.findall(text)


def _sources(data: Any, where: str, cards: list[Card], gpus: Mapping[str, Gpu]) -> dict[str, Source]:
    """sources: read and checked against every key the cards and GPUs cite, so that no page shows a
    citation the sources page does not explain."""
    raw = data.get("sources") if isinstance(data, dict) else None
    if not isinstance(raw, dict):
        raise ConfigError(where, "sources", raw, "must list every citation key the cards and prices use")
    out = {}
    for key, entry in raw.items():
        w = f"{where}: sources.{key}"
        if not isinstance(key, str) or not CITATION_RE.fullmatch(f"[{key}]"):
            raise ConfigError(where, "sources", key, "a key is capitals, digits and dashes")
        url = entry.get("url") if isinstance(entry, dict) else None
        if url is not None and not (isinstance(url, str) and url.startswith("https://")):
            raise ConfigError(w, "url", url, "must be an https:// address or null")
        out[key] = Source(key, _need(entry, "title", w, str), url)
    notes = [(f"cards: {c.name}", c.usable_source) for c in cards]
    notes += [(f"gpus.{k}", text) for k, g in gpus.items() for text in (g.price_source, g.spec_source)]
    for owner, text in notes:
        for key in cited(text):
            if key not in out:
                raise ConfigError(where, owner, f"[{key}]", "cites a key that sources: does not list")
    return out


def _need(mapping: Any, key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(mapping, dict) or key not in mapping:
        raise ConfigError(where, key, None, "required key is missing")
    value = mapping[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ConfigError(where, key, value, f"must be {getattr(kind, '__name__', kind)}")
    return value


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(str(path), None, None, f"cannot read settings ({exc})") from None


def _merge(base: Any, override: Any) -> Any:
    """override over base: mappings merge key by key, anything else replaces."""
    if not isinstance(base, dict) or not isinstance(override, dict):
        return override
    return {**base, **{k: _merge(base.get(k), v) for k, v in override.items()}}


def settings_file(given: Path | None = None) -> Path | None:
    """The file that overrides the packaged defaults: --config FILE, else ./site_config.yaml, else None."""
    if given is not None:
        return Path(given)
    return LOCAL_CONFIG if LOCAL_CONFIG.is_file() else None


def load_settings(path: Path | None = None, **job_overrides: Any) -> Settings:
    """The packaged defaults, overridden by `path` (or ./site_config.yaml when path is None), validated;
    job_overrides (e.g. train_tokens=4096) win over both."""
    data = _read_yaml(DEFAULT_CONFIG)
    override = settings_file(path)
    where = str(DEFAULT_CONFIG)
    if override is not None and not _same_file(override, DEFAULT_CONFIG):
        where = str(override)
        extra = _read_yaml(override)
        if extra is not None and not isinstance(extra, dict):
            raise ConfigError(where, None, None, "cannot read settings (not a mapping of keys)")
        data = _merge(data, extra or {})
    job = dict(_need(data, "job", where, dict))
    fields = {f.name: f.type for f in dataclasses.fields(Assumptions)}
    values: dict[str, Any] = {}
    for key, value in job.items():
        name = _JOB_FIELDS.get(key, key)
        if name not in fields:
            raise ConfigError(where, f"job.{key}", value, "unknown job setting")
        values[name] = value
    values.update({k: v for k, v in job_overrides.items() if v is not None})
    for name, value in values.items():
        default = getattr(Assumptions(), name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or value >= 2**63 \
                or (isinstance(value, float) and not math.isfinite(value)) \
                or (isinstance(default, int) and not isinstance(value, int)):
            raise ConfigError(where, name, value, "must be a positive finite " + type(default).__name__)
    if values.get("headroom", 1) < 1:  # under 1 a budget would exceed the card: "fits" past its memory
        raise ConfigError(where, "headroom", values["headroom"], "must be 1 or more (the room kept on every card)")
    for name in ("mfu_full", "mfu_lora"):  # a share of the GPU's peak FLOPs
        if values.get(name, 0) > 1:
            raise ConfigError(where, name, values[name], "must be at most 1 (a share of the GPU's peak FLOPs)")
    assumptions = Assumptions(**values)

    gpus: dict[str, Gpu] = {}
    for key, g in _need(data, "gpus", where, dict).items():
        w = f"{where}: gpus.{key}"
        bf16 = g.get("bf16_tflops") if isinstance(g, dict) else None
        price = g.get("price_usd_per_hour") if isinstance(g, dict) else None
        link = g.get("host_link_gb_per_s", 0.0) if isinstance(g, dict) else 0.0
        if isinstance(link, bool) or not isinstance(link, (int, float)) or link < 0:
            raise ConfigError(w, "host_link_gb_per_s", link, "must be a number of GB per second (0: not known)")
        cc = g.get("compute_capability") if isinstance(g, dict) else None
        if cc is not None and (isinstance(cc, bool) or not isinstance(cc, (int, float)) or not 1 <= cc < 100):
            raise ConfigError(w, "compute_capability", cc, "must be CUDA's major.minor, as 8.9 (or absent)")
        gpus[key] = Gpu(key=key, name=_need(g, "name", w, str), bf16_tflops=None if bf16 is None else float(bf16),
                        fp16_tflops=float(_need(g, "fp16_tflops", w, (int, float))),
                        bandwidth_gb_per_s=float(_need(g, "bandwidth_gb_per_s", w, (int, float))),
                        price_usd_per_hour=None if price is None else float(price),
                        price_source=str(g.get("price_source", "")), price_date=str(g.get("price_date", "")),
                        spec_source=str(g.get("spec_source", "")), host_link_gb_per_s=float(link),
                        compute_capability=None if cc is None else float(cc))
    cards = []
    for i, c in enumerate(_need(data, "cards", where, list)):
        w = f"{where}: cards[{i}]"
        names = tuple(_need(c, "gpus", w, list))
        for key in names:
            if key not in gpus:
                raise ConfigError(w, "gpus", key, "names no entry of gpus:")
        cards.append(Card(name=_need(c, "name", w, str),
                          memory_marketed_bytes=int(_need(c, "memory_marketed_gb", w, (int, float)) * 10**9),
                          memory_usable_bytes=_need(c, "memory_usable_bytes", w, int),
                          usable_source=str(c.get("usable_source", "")), gpus=names))
    for card in cards:  # a context as large as a card's memory leaves it no budget
        if assumptions.cuda_context_bytes >= card.memory_usable_bytes:
            raise ConfigError(where, "cuda_context_bytes", assumptions.cuda_context_bytes,
                              f"must be under every card's usable memory ({card.name}: {card.memory_usable_bytes:,})")
    site = dict(_need(data, "site", where, dict))
    if not REPOSITORY_RE.fullmatch(str(_need(site, "repository", f"{where}: site", str))):
        raise ConfigError(f"{where}: site", "repository", site["repository"], "must be an https:// URL")
    return Settings(assumptions, tuple(cards), gpus, site, dict(data.get("crawl") or {}),
                    _sources(data, where, cards, gpus))


def _same_file(a: Path, b: Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False
