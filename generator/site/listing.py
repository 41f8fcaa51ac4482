"""Index pages: one Entry per model (estimated or not), sorted for the home, family and size pages.

Sorting is done here, once per page, in a fixed order with the repo id as the last key, so the
pages are deterministic and need no JavaScript: each sort order is its own static page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .. import format as f
from ..errors import TraceError, UnsupportedArchitecture
from ..estimator import Report
from ..records import ModelRecord
from .pages import display_name, family_dir, family_slug, model_dir


@dataclass(frozen=True)
class Entry:
    """One row of an index page."""

    id: str
    model_type: str | None  # as config.json writes it, for display (escaped by the template)
    slug: str | None  # the family folder, None when model_type is missing or not a plain name
    params: int | None
    downloads: int | None
    smallest_full: str | None
    smallest_lora: str | None
    reason: str | None  # set when the model is not estimated yet

    @property
    def estimated(self) -> bool:
        return self.reason is None


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


def entry_for(record: ModelRecord, report: Report | None, reason: str | None) -> Entry:
    if report is None:
        model_type = config_model_type(record)
        return Entry(record.id, model_type, family_slug(model_type), None, record.downloads, None, None, reason)
    mem = report.memory
    return Entry(record.id, report.model.model_type, family_slug(report.model.model_type), report.params.graph,
                 report.model.downloads, mem.smallest_card_full, mem.smallest_card_lora, None)


def by_downloads(entries: Iterable[Entry]) -> list[Entry]:
    """Most downloaded first; unknown counts last; ties by id."""
    return sorted(entries, key=lambda e: (e.downloads is None, -(e.downloads or 0), e.id))


def by_size(entries: Iterable[Entry]) -> list[Entry]:
    """Smallest graph first (what fits a small card comes first); not-estimated models last."""
    return sorted(entries, key=lambda e: (e.params is None, e.params or 0, e.id))


def _card(name: str | None) -> str:
    return name if name is not None else "no single card"


def rows(entries: Iterable[Entry], root: str) -> list[dict[str, Any]]:
    """Entries as table rows with links relative to the page at `root`."""
    out = []
    for e in entries:
        out.append({
            "href": f"{root}{model_dir(e.id)}/index.html",
            "id": e.id,
            "name": display_name(e.id),
            "family": e.model_type if e.model_type is not None else f.DASH,
            "family_href": None if e.slug is None else f"{root}{family_dir(e.slug)}/index.html",
            "params": f.short_count(e.params),
            "downloads": f.short_count(e.downloads),
            "full": _card(e.smallest_full) if e.estimated else None,
            "lora": _card(e.smallest_lora) if e.estimated else None,
            "reason": e.reason,
        })
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
