"""What changed between snapshots: models added, estimates changed and models removed, kept as a
history in the build manifest and shown by the changes page and the Atom feed.

Each build compares its rows with the previous build's (public/.build-manifest.json) and, when
anything differs, appends one batch dated by the snapshot: the latest day its records' Hub data was
read (the crawl's date, written in each record's downloads_source) or lastModified, whichever is
later (SOURCE_DATE_EPOCH, then 1970-01-01, when no record has either). Never the clock, so two
builds of the same snapshot on the same previous site are byte-identical.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from .. import format as f
from .listing import Entry, by_downloads
from .pages import model_dir

MAX_BATCHES = 30  # batches kept in the history
MAX_LISTED = 200  # models listed per kind in one batch (the count says how many there were)
FEED_ENTRIES = 50
# What makes an estimate "changed", and how each value is written.
FIELDS = (("params", "parameters", f.short_count), ("full_bytes", "full fine-tune", f.gb),
          ("lora_bytes", "LoRA", f.gb), ("serve_bytes", "serving", f.gb))
EPOCH = "1970-01-01T00:00:00Z"


def snapshot_date(entries: Iterable[Entry]) -> str:
    """The snapshot's date: the latest day a record's Hub data was read or a repo was last modified,
    else SOURCE_DATE_EPOCH, else 1970."""
    dates = [d for e in entries for d in (e.last_modified, e.read_date) if d]
    if dates:
        return max(dates)
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    if epoch.isdigit():
        return datetime.fromtimestamp(int(epoch), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return EPOCH


def _summary(e: Entry) -> dict[str, Any]:
    return {"id": e.id, "params": e.params, "full_bytes": e.full_bytes, "lora_bytes": e.lora_bytes,
            "reason": e.reason}


def next_history(previous: Mapping[str, Mapping[str, Any]] | None, history: list[dict[str, Any]],
                 entries: list[Entry], date: str) -> list[dict[str, Any]]:
    """The history after this build: `previous` maps id -> row of the last build (None: first build)."""
    if previous is None:
        estimated = sum(e.estimated for e in entries)
        return [{"n": 1, "date": date, "first": {"models": len(entries), "estimated": estimated},
                 "added": [], "changed": [], "removed": [], "counts": [0, 0, 0]}]
    now = {e.id: e for e in entries}
    added = [e for e in by_downloads(entries) if e.id not in previous]
    changed = []
    for e in by_downloads(entries):
        old = previous.get(e.id)
        if old is None:
            continue
        diff = {k: [old.get(k), getattr(e, k)] for k, _, _ in FIELDS if old.get(k) != getattr(e, k)}
        if (old.get("reason") is None) != e.estimated:
            diff["estimated"] = [old.get("reason") is None, e.estimated]
        if diff:
            changed.append({"id": e.id, "fields": diff})
    removed = sorted(set(previous) - set(now))
    if not (added or changed or removed):
        return history
    batch = {"n": (history[-1]["n"] + 1) if history else 1, "date": date, "first": None,
             "added": [_summary(e) for e in added[:MAX_LISTED]], "changed": changed[:MAX_LISTED],
             "removed": removed[:MAX_LISTED], "counts": [len(added), len(changed), len(removed)]}
    return (history + [batch])[-MAX_BATCHES:]


def _headline(s: Mapping[str, Any]) -> str:
    if s.get("reason") is not None:
        return f"not estimated yet: {s['reason']}"
    return (f"{f.short_count(s.get('params'))} parameters; at batch 1, full fine-tune "
            f"{f.gb(s['full_bytes']) if s.get('full_bytes') else f.DASH}, LoRA "
            f"{f.gb(s['lora_bytes']) if s.get('lora_bytes') else f.DASH}")


def _what_changed(fields: Mapping[str, list]) -> str:
    parts = []
    for key, label, fmt in FIELDS:
        if key in fields:
            old, new = fields[key]
            parts.append(f"{label} {f.change(f.DASH if old is None else fmt(old), f.DASH if new is None else fmt(new))}")
    if "estimated" in fields:
        parts.append("now estimated" if fields["estimated"][1] else "no longer estimated")
    return "; ".join(parts)


def page_batches(history: list[dict[str, Any]], live: set[str], root: str) -> list[dict[str, Any]]:
    """The history newest first, as text, with links only to models that still have a page."""
    def link(model: str) -> str | None:
        return f"{root}{model_dir(model)}/index.html" if model in live else None

    out = []
    for b in reversed(history):
        first = b.get("first")
        added_n, changed_n, removed_n = b.get("counts", [0, 0, 0])
        out.append({
            "n": f.count(b["n"]), "anchor": f"snapshot-{b['n']}",
            "date": "undated (its records carry no date)" if b["date"] == EPOCH else f.day(b["date"]),
            "first": None if not first else f"{f.count(first['models'])} models, {f.count(first['estimated'])} "
                                            "estimated: the first build this history knows of",
            "added": [{"id": s["id"], "href": link(s["id"]), "text": _headline(s)} for s in b["added"]],
            "changed": [{"id": c["id"], "href": link(c["id"]), "text": _what_changed(c["fields"])}
                        for c in b["changed"]],
            "removed": b["removed"], "listed_added": f.count(len(b["added"])),
            "counts": {"added": f.count(added_n), "changed": f.count(changed_n), "removed": f.count(removed_n)},
            "more": {"added": added_n > len(b["added"]), "changed": changed_n > len(b["changed"]),
                     "removed": removed_n > len(b["removed"])},
        })
    return out


def feed_entries(history: list[dict[str, Any]], live: set[str], site: str, host: str) -> list[dict[str, str]]:
    """Atom entries, newest batch first: one per model added, changed or removed (at most FEED_ENTRIES)."""
    out: list[dict[str, str]] = []
    changes_url = f"{site}changes/#"
    for b in reversed(history):
        date, n = b["date"], b["n"]
        tag = f"tag:{host},{date[:10]}:snapshot-{n}"
        events: list[tuple[str, str, str, str]] = []
        if b.get("first"):
            first = b["first"]
            events.append(("first", "", f"First snapshot: {f.count(first['models'])} models",
                           f"{f.count(first['models'])} models, {f.count(first['estimated'])} estimated."))
        events += [("added", s["id"], f"Added: {s['id']}", _headline(s)) for s in b["added"]]
        events += [("changed", c["id"], f"Estimate changed: {c['id']}", _what_changed(c["fields"]))
                   for c in b["changed"]]
        events += [("removed", m, f"Removed: {m}", f"{m} is no longer in the snapshot.") for m in b["removed"]]
        for kind, model, title, summary in events:
            url = f"{site}{model_dir(model)}/" if model in live and kind != "removed" else f"{changes_url}snapshot-{n}"
            out.append({"id": f"{tag}/{kind}/{model}" if model else f"{tag}/{kind}", "title": title,
                        "summary": summary, "updated": date, "url": url})
            if len(out) == FEED_ENTRIES:
                return out
    return out
