"""The no-change check: whether a build would write exactly the site already in out_dir, decided
from the records and the previous manifest without estimating, rendering or writing anything.

An incremental build copies a model whose key is unchanged, and the index pages and the search index
whose inputs hash the same; so when every model's key and row, the history, the index key and the
search shard keys are those of the previous build, and the manifest it would write is byte for byte the one
in out_dir, the whole new tree would equal the old one. The build then leaves out_dir in place (no
staging tree, no swap). Anything else (a record changed, added or gone, a file missing, new code or
settings) returns None and the build runs as usual.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..hub.snapshot import RecordProblem, iter_records
from ..settings import Settings
from . import changes, listing, manifest, pages, search
from .worker import Problem


def check(snapshot_dir: Path, out_dir: Path, settings: Settings, render_key: str, previous: manifest.Manifest,
          use_search: bool, shard_size: int) -> list[Problem] | None:
    """The problems the build would list when out_dir is already its output; None when it is not."""
    problems: list[Problem] = []
    models: dict[str, dict] = {}
    for item in iter_records(snapshot_dir):
        if isinstance(item, RecordProblem):
            problems.append(Problem(item.id, "refused record", item.reason))
            continue
        old = previous.models.get(item.id)
        if (old is None or old["key"] != manifest.model_key(render_key, item)
                or not all(isinstance(rel, str) for rel in old["files"])):
            return None
        if {**old["row"], **listing.live_fields(item)} != old["row"]:
            return None
        problems.extend(Problem(item.id, k, m) for k, m in old.get("problems", []))
        models[item.id] = old
    if len(models) != len(previous.models):  # a model of the previous site is gone (or now refused)
        return None
    entries = [listing.Entry.from_dict(v["row"]) for v in models.values()]
    date = changes.snapshot_date(entries)
    if changes.next_history({m: v["row"] for m, v in previous.models.items()}, previous.history, entries,
                            date) != previous.history:
        return None
    html = [rel for v in models.values() for rel in v["files"] if rel.endswith(".html")]
    index_key = manifest.index_key(render_key, [v["row"] for v in models.values()], previous.history, date, html)
    if index_key != previous.index_key:
        return None
    search_keys, search_dirs = None, set()
    if use_search and search.executable() is not None:
        shards = search.plan(entries, sorted({e.slug for e in entries if e.slug is not None}), shard_size)
        if shards.built:
            search_keys, search_dirs = list(shards.keys), {search.folder(k) for k in shards.built}
    text = manifest.Manifest(render_key, models, previous.history, search_keys, index_key,
                             previous.index_files).dumps()
    try:
        same = (out_dir / pages.MANIFEST).read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return None
    expected = {rel for v in models.values() for rel in v["files"]} | set(previous.index_files) | {
        pages.MANIFEST, pages.MARKER}
    if not same or not _holds_exactly(out_dir, expected, search_dirs):
        return None
    return problems + family_problems(entries)


def _holds_exactly(out_dir: Path, expected: set[str], search_dirs: set[str]) -> bool:
    """out_dir holds the expected files and folders and nothing else (a file left there by hand would
    not survive a build); the search shards' folders (pagefind/, pagefind-1/, ...) are taken whole, as
    an incremental build copies them, and must be exactly search_dirs."""
    found: set[str] = set()
    folders, frontier = {""}, {os.path.dirname(rel) for rel in expected}
    while frontier - folders:  # every folder above an expected file
        folders |= frontier
        frontier = {os.path.dirname(f) for f in frontier if f}
    found_search: set[str] = set()
    for folder, dirs, files in os.walk(out_dir):
        rel = os.path.relpath(folder, out_dir).replace(os.sep, "/")
        rel = "" if rel == "." else rel
        if rel == "":
            found_search = {d for d in dirs if d == pages.PAGEFIND or d.startswith(f"{pages.PAGEFIND}-")}
            dirs[:] = [d for d in dirs if d not in found_search]
        if rel not in folders:
            return False
        found.update(f"{rel}/{name}" if rel else name for name in files)
        if len(found) > len(expected):
            return False
    return found == expected and found_search == search_dirs


def family_problems(entries: list[listing.Entry]) -> list[Problem]:
    """Models whose model_type cannot name a family folder (a missing one is already a problem)."""
    return [Problem(e.id, "family", f"no family page: model_type {e.model_type!r} is missing or not a plain name")
            for e in entries if e.slug is None and e.model_type is not None]
