"""Index pages: one small Entry per model (estimated or not), sorted and filtered for the home, family,
card and size pages.

An Entry is all an index page needs of a model: a few numbers, never the Report, so a build of
100,000 models keeps one small row per model in memory (and in the build manifest, from which an
incremental build takes the rows of the models it did not re-render). Sorting is done here, in a
fixed order with the repo id as the last key, so the pages are deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from .. import format as f
from ..errors import TraceError, UnsupportedArchitecture
from ..estimator import Report
from ..records import ModelRecord
from .pages import card_dir, card_slug, display_name, family_dir, family_slug, model_dir

METHODS = (("full", "full fine-tune"), ("lora", "LoRA"), ("qlora", "QLoRA"), ("serve", "serving"))
# The "fits on" filter's GPU counts: one card alone (its largest-batch table), up to one node of 8, up to the
# plans' 512 (64 nodes of 8). A row carries per card and method one token: the slug (one card), slug-8 (2 to 8)
# or slug-n (9 to 512); a count accepts its own token and the smaller counts' (SUFFIXES).
GPU_LEVELS = (("1", "one GPU"), ("8", "up to 8 GPUs"), ("n", "up to 512 GPUs"))
SUFFIXES = {"1": ("",), "8": ("", "-8"), "n": ("", "-8", "-n")}
# Size bands of the home page's filter: graph parameters in [low, high).
SIZE_BANDS = ((0, 10**9), (10**9, 3 * 10**9), (3 * 10**9, 10 * 10**9), (10 * 10**9, 30 * 10**9),
              (30 * 10**9, 100 * 10**9), (100 * 10**9, None))


@dataclass(frozen=True)
class Entry:
    """One model as the index pages see it. `batches` holds, per card of site_config.yaml in order,
    the largest batch for (full fine-tune, LoRA, serving); 0 where batch 1 does not fit."""

    id: str
    model_type: str | None  # as config.json writes it, for display (escaped by the template)
    slug: str | None  # the family folder, None when model_type is missing or not a plain name
    params: int | None
    downloads: int | None
    smallest_full: str | None
    smallest_lora: str | None
    reason: str | None  # set when the model is not estimated yet
    smallest_serve: str | None = None
    serve_float32: bool = False  # serve_bytes is in float32, as vLLM serves the model on that card (serve_dtype)
    full_bytes: int | None = None  # batch 1 at the job's tokens
    lora_bytes: int | None = None
    serve_bytes: int | None = None
    batches: tuple[tuple[int, int, int], ...] = ()
    layers: int | None = None
    context: int | None = None  # the config's maximum context (the structure's input length)
    active: int | None = None  # parameters per token when it differs from params (MoE)
    last_modified: str | None = None  # RFC 3339 UTC, from the Hub's lastModified
    read_date: str | None = None  # RFC 3339 UTC: the day its Hub data was read (the crawl), from downloads_source
    train_tokens: int | None = None  # tokens per training sample the estimate used (the job's, capped at the context)
    qlora_batches: tuple[int, ...] = ()  # per card, QLoRA's largest batch on one card (0: does not fit or apply)
    # per card, the fewest GPUs of it that run each of METHODS at batch 1 (report.plans; 0: none up to 512)
    gpus: tuple[tuple[int, ...], ...] = ()
    # the card batch 1 of a full fine-tune, LoRA, QLoRA, serving is tight on (Memory.tight_card_*), None where none is
    tight_full: str | None = None
    tight_lora: str | None = None
    tight_serve: str | None = None
    tight_qlora: str | None = None
    # per card, per METHODS, what the one-GPU plan adds where one card holds the method only with it: "checkpointed",
    # "CPU optimizer offload"; "" elsewhere (report.plans)
    one_gpu_with: tuple[tuple[str, ...], ...] = ()
    qlora_applies: bool = True  # False where the Report prices no QLoRA: an already quantised checkpoint

    @property
    def estimated(self) -> bool:
        return self.reason is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Entry:
        known = {x.name for x in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["batches"] = tuple(tuple(b) for b in values.get("batches", ()))
        values["qlora_batches"] = tuple(values.get("qlora_batches", ()))
        values["gpus"] = tuple(tuple(g) for g in values.get("gpus", ()))
        values["one_gpu_with"] = tuple(tuple(w) for w in values.get("one_gpu_with", ()))
        return cls(**values)

    def one_card(self, index: int) -> tuple[int, ...]:
        """The largest batch on card number `index` alone, per METHODS (0: batch 1 does not fit)."""
        if index >= len(self.batches):
            return (0,) * len(METHODS)
        full, lora, serve = self.batches[index]
        qlora = self.qlora_batches[index] if index < len(self.qlora_batches) else 0
        return full, lora, qlora, serve

    def fewest(self, index: int) -> tuple[int, ...]:
        """The fewest GPUs of card number `index` per METHODS (0: none up to 512 runs it; -1: vLLM does not serve
        the model on it)."""
        return self.gpus[index] if index < len(self.gpus) else (0,) * len(METHODS)


def short_reason(exc: TraceError, model_id: str) -> str:
    """The error without the model id it starts with, and without the list of supported types."""
    text = str(exc)
    if text.startswith(f"{model_id}: "):
        text = text[len(model_id) + 2:]
    if isinstance(exc, UnsupportedArchitecture):
        text = text.split("; supported:")[0]
    return text


def config_model_type(record: ModelRecord) -> str | None:
    try:
        value = record.config().get("model_type")
    except TraceError:
        return None
    return value if isinstance(value, str) else None


def live_fields(record: ModelRecord) -> dict[str, Any]:
    """The row's values taken from the record at every build, never from the page or the manifest:
    the Hub metadata a crawl refreshes nightly (worker.NIGHTLY_FIELDS) that an index page shows."""
    return {"downloads": record.downloads, "last_modified": f.w3c_datetime(record.last_modified),
            "read_date": f.latest_day(record.downloads_source)}


def entry_for(record: ModelRecord, report: Report | None, reason: str | None) -> Entry:
    """The row of a model: what its Report (or its reason) says, and the record's live fields."""
    live = live_fields(record)
    if report is None:
        model_type = config_model_type(record)
        return Entry(record.id, model_type, family_slug(model_type), None, live["downloads"], None, None, reason,
                     last_modified=live["last_modified"], read_date=live["read_date"])
    mem, p = report.memory, report.params
    first_shape = report.structure[0].output_shape if report.structure else ()
    active = getattr(p, "active", 0)
    return Entry(
        record.id, report.model.model_type, family_slug(report.model.model_type), p.graph, live["downloads"],
        mem.smallest_card_full, mem.smallest_card_lora, None,
        smallest_serve=mem.smallest_card_serve, full_bytes=mem.train_full_bytes_batch1,
        lora_bytes=mem.train_lora_bytes_batch1, serve_bytes=mem.serve_named_bytes,
        serve_float32=bool(mem.serve_named_dtype),
        batches=tuple((c.train_full_max_batch, c.train_lora_max_batch, c.serve_max_batch) for c in mem.cards),
        layers=p.layers, context=first_shape[-1] if first_shape else None,
        active=active if active and active != p.graph else None, last_modified=live["last_modified"],
        read_date=live["read_date"], train_tokens=mem.train_tokens,
        qlora_batches=tuple(c.train_qlora_max_batch for c in mem.cards), gpus=_fewest_gpus(report),
        tight_full=mem.tight_card_full, tight_lora=mem.tight_card_lora, tight_serve=mem.tight_card_serve,
        tight_qlora=mem.tight_card_qlora, one_gpu_with=_one_gpu_with(report), qlora_applies=mem.train_qlora_bytes_batch1 is not None)


def _fewest_gpus(report: Report) -> tuple[tuple[int, ...], ...]:
    """Per card of the Report, per METHODS, the fewest GPUs of a fitting plan (a card's GPUs share its budget)."""
    fewest: dict[tuple[str, str], int] = {}
    for p in report.plans:
        if p.fits:
            key = (p.gpu, p.method)
            fewest[key] = min(fewest.get(key, p.gpus), p.gpus)
    # -1: vLLM does not serve the model on the card (its serving figure is 0: estimator vllm_support.serving_scale)
    return tuple(tuple(fewest.get((c.name, m), -1 if m == "serve" and not c.served else 0)
                       for m, _ in METHODS) for c in report.memory.cards)


def by_downloads(entries: Iterable[Entry]) -> list[Entry]:
    """Most downloaded first; unknown counts last; ties by id."""
    return sorted(entries, key=lambda e: (e.downloads is None, -(e.downloads or 0), e.id))


def split_by_downloads(entries: Iterable[Entry]) -> tuple[list[Entry], list[Entry]]:
    """(models with a download count, most downloaded first; models without one, by id). Kept apart so
    that an unknown count never reads as the smallest: a model nobody counted is not one nobody uses."""
    ordered = by_downloads(entries)
    known = [e for e in ordered if e.downloads is not None]
    return known, ordered[len(known):]


def by_size(entries: Iterable[Entry]) -> list[Entry]:
    """Smallest graph first (what fits a small card comes first); not-estimated models last."""
    return sorted(entries, key=lambda e: (e.params is None, e.params or 0, e.id))


def _card(name: str | None) -> str:
    return name if name is not None else "no single card"


def size_band(params: int | None) -> str:
    """The filter value of a parameter count ("s0" .. "s5"), "" when not estimated."""
    if params is None:
        return ""
    for i, (low, high) in enumerate(SIZE_BANDS):
        if params >= low and (high is None or params < high):
            return f"s{i}"
    return ""


def size_bands() -> list[dict[str, str]]:
    out = []
    for i, (low, high) in enumerate(SIZE_BANDS):
        label = (f"{f.round_count(low)} and more" if high is None else f"under {f.round_count(high)}" if low == 0
                 else f"{f.round_count(low)} to {f.round_count(high)}")
        out.append({"value": f"s{i}", "label": label + " parameters"})
    return out


def _fits(e: Entry, card_slugs: Sequence[str]) -> dict[str, str]:
    """Per method, the cards that run batch 1 of it: a card's slug where one holds it, slug-8 where 2 to 8 of it
    do, slug-n where 9 to 512 do (GPU_LEVELS), space-separated."""
    out: dict[str, list[str]] = {m: [] for m, _ in METHODS}
    for index, slug in enumerate(card_slugs):
        for (m, _), batch, gpus in zip(METHODS, e.one_card(index), e.fewest(index), strict=False):
            if batch > 0:
                out[m].append(slug)
            elif 0 < gpus <= 8:
                out[m].append(slug + "-8")
            elif gpus > 0:
                out[m].append(slug + "-n")
    return {m: " ".join(tokens) for m, tokens in out.items()}


def rows(entries: Iterable[Entry], root: str, card_names: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Entries as table rows with links relative to the page at `root`, and the values the filters
    match (family, size band, and per method the cards that hold batch 1)."""
    slugs = [card_slug(n) for n in card_names]
    out = []
    for e in entries:
        out.append({
            "href": f"{root}{model_dir(e.id)}/index.html",
            "id": e.id,
            "name": display_name(e.id),
            "family": e.model_type if e.model_type is not None else f.DASH,
            "family_href": None if e.slug is None else f"{root}{family_dir(e.slug)}/index.html",
            "slug": e.slug or "",
            "band": size_band(e.params),
            "fits": _fits(e, slugs),
            "params": f.short_count(e.params),
            "downloads": f.UNKNOWN if e.downloads is None else f.short_count(e.downloads),
            "full": _card(e.smallest_full) if e.estimated else None,
            "lora": _card(e.smallest_lora) if e.estimated else None,
            "reason": e.reason,
        })
    return out


def search_text(e: Entry) -> dict[str, str]:
    """What the search index holds of a model: its id as the title, its headline as the summary, and
    the words it should be found by (the id, its parts, the family)."""
    org, name = e.id.split("/")
    words = " ".join(x for x in (e.id, org, name, name.replace("-", " "), e.model_type, "family") if x)
    if not e.estimated:
        return {"title": e.id, "summary": f"Not estimated yet: {e.reason}", "words": words}
    summary = (f"{f.short_count(e.params)} parameters. At batch 1: full fine-tune {f.gb(e.full_bytes or 0)} "
               f"({_card(e.smallest_full)}), LoRA {f.gb(e.lora_bytes or 0)} ({_card(e.smallest_lora)}), "
               f"serving {f.gb(e.serve_bytes or 0)}{' in float32' if e.serve_float32 else ''} "
               f"({_card(e.smallest_serve)}).")
    return {"title": e.id, "summary": summary, "words": words}


def family_rows(entries: Iterable[Entry], root: str) -> list[dict[str, Any]]:
    """A family's models side by side, smallest first: size, shape and memory per method."""
    out = []
    for e in by_size(entries):
        out.append({
            "href": f"{root}{model_dir(e.id)}/index.html", "id": e.id, "reason": e.reason,
            "params": f.short_count(e.params),
            "active": f.short_count(e.params if e.active is None else e.active),
            "layers": f.DASH if e.layers is None else f.count(e.layers),
            "context": f.DASH if e.context is None else f.count(e.context),
            "full": f.DASH if e.full_bytes is None else f.gb(e.full_bytes),
            "lora": f.DASH if e.lora_bytes is None else f.gb(e.lora_bytes),
            "serve": f.DASH if e.serve_bytes is None else f.gb(e.serve_bytes) + (" in float32" if e.serve_float32
                                                                                 else ""),
            "full_card": _card(e.smallest_full), "lora_card": _card(e.smallest_lora),
            "serve_card": _card(e.smallest_serve),
        })
    return out


def _one_gpu_with(report: Report) -> tuple[tuple[str, ...], ...]:
    """Per card of the Report, per METHODS, the options of its fitting one-GPU plan in words ("checkpointed", "CPU
    optimizer offload"), "" where there is none or it adds nothing."""
    words: dict[tuple[str, str], str] = {}
    for p in report.plans:
        if p.fits and p.gpus == 1:
            said = [w for w in ("checkpointed" if p.grad_ckpt else "", f.OFFLOAD_WORDS.get(p.offload, p.offload)) if w]
            words[(p.gpu, p.method)] = ", ".join(said)
    return tuple(tuple(words.get((c.name, m), "") for m, _ in METHODS) for c in report.memory.cards)


def card_rows(entries: Iterable[Entry], index: int, root: str, card: str) -> dict[str, Any]:
    """The models card number `index` (named `card`) runs, most downloaded first, then those without a download
    count, by id: `one` those with a method that fits one card alone (the largest batch per method, or the fewest
    GPUs of it where one does not hold the method, "tight" first where one card holds batch 1 without its
    headroom), `several` those that need several of it for every method (the fewest GPUs per method); and how many
    estimated models no count of it up to 512 runs."""
    out: dict[str, Any] = {"one": ([], []), "several": ([], []), "none": 0}
    for part, entries_ in enumerate(split_by_downloads(entries)):
        for e in entries_:
            if not e.estimated or index >= len(e.batches):
                continue
            batches, gpus = e.one_card(index), e.fewest(index)
            if any(batches):
                group = "one"
            elif any(g > 0 for g in gpus):
                group = "several"
            else:
                out["none"] += 1
                continue
            tight = (e.tight_full == card, e.tight_lora == card, e.tight_qlora == card, e.tight_serve == card)  # METHODS
            # a method one card holds only with its plan's options says which: "tight · 1 GPU" alone would read as a
            # contradiction where batch 1 is tight without checkpointing and fits with it
            how = e.one_gpu_with[index] if index < len(e.one_gpu_with) else ("",) * len(METHODS)
            cells = [f.batch(b) if b > 0 else "n/a" if g < 0 else ("tight · " if t else "")
                     + (f.gpu_count(g) if g > 0 else f.DASH) + (f", {w}" if g == 1 and w else "")
                     for b, g, t, w in zip(batches, gpus, tight, how, strict=False)]
            if not e.qlora_applies:  # QLoRA quantises a 16-bit base: not "none up to 512"
                cells[[m for m, _ in METHODS].index("qlora")] = "n/a"
            out[group][part].append({"href": f"{root}{model_dir(e.id)}/index.html", "id": e.id,
                                     "params": f.short_count(e.params), "cells": cells})
    return out


def cards(entries: list[Entry], card_names: Sequence[str], root: str) -> list[dict[str, Any]]:
    """One row per card: how many models fit it alone for each method, and how many run on several of it."""
    out = []
    for i, name in enumerate(card_names):
        got = [e.one_card(i) for e in entries if e.estimated and i < len(e.batches)]
        several = sum(1 for e in entries if e.estimated and i < len(e.batches) and not any(e.one_card(i))
                      and any(g > 0 for g in e.fewest(i)))
        out.append({"name": name, "href": f"{root}{card_dir(name)}/index.html", "several": f.count(several),
                    **{m: f.count(sum(b[j] > 0 for b in got)) for j, (m, _) in enumerate(METHODS)}})
    return out


def families(entries: Iterable[Entry], root: str) -> list[dict[str, Any]]:
    """One row per family folder, sorted by name, with how many of its models are estimated."""
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        if e.slug is not None:
            groups.setdefault(e.slug, []).append(e)
    return [{"slug": slug, "href": f"{root}{family_dir(slug)}/index.html",
             "models": f.count(len(group)), "estimated": f.count(sum(e.estimated for e in group))}
            for slug, group in sorted(groups.items())]


def counts(entries: list[Entry]) -> dict[str, str]:
    estimated = sum(e.estimated for e in entries)
    return {"models": f.count(len(entries)), "estimated": f.count(estimated),
            "not_estimated": f.count(len(entries) - estimated)}


def filter_css(family_slugs: Sequence[str], card_names: Sequence[str]) -> str:
    """The rules that make the home page's filter work without JavaScript: `:has()` sees which option
    of each <select> is chosen and hides the rows that do not match. Every value is a validated slug."""
    hide = "{display:none}"
    row = "tbody tr[data-family]"
    rules = [f'main:has(#f-family option[value="{s}"]:checked) {row}:not([data-family="{s}"]){hide}'
             for s in family_slugs]
    rules += [f'main:has(#f-size option[value="{b["value"]}"]:checked) {row}:not([data-size="{b["value"]}"]){hide}'
              for b in size_bands()]
    for name in card_names:
        slug = card_slug(name)
        for method, _ in METHODS:
            for level, _ in GPU_LEVELS:
                accepted = "".join(f':not([data-{method}~="{slug}{x}"])' for x in SUFFIXES[level])
                rules.append(f'main:has(#f-card option[value="{slug}"]:checked):has(#f-method option[value="{method}"]'
                             f':checked):has(#f-gpus option[value="{level}"]:checked) {row}{accepted}{hide}')
    return "\n".join(rules) + "\n"
