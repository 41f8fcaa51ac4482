"""The search index: Pagefind (the PyPI package `pagefind[bin]`), over one small document per model
and per family, split into shards of a bounded size, each indexed by its own Pagefind run.

Pagefind's cost is parsing HTML, and a model page is 20-60 kB of tables, so it does not read the
pages: the build writes, into a temporary folder, one tiny document per page to index (the model
id, its family, its headline numbers; templates/_search_doc.html) at the page's own path, and
Pagefind indexes that folder. Results link to the real pages. The search page (static/search.js)
loads the index from the site itself: no third-party host.

Why shards: one Pagefind process holds every document it indexes (about 50 KB each, measured by
benchmarks/bench_scale.py: 506 MB at 10,000 models), so one index over 300,000 models would need
about 15 GB. The models are split by a stable hash of their id (sha256, not Python's salted hash())
into count = ceil(models / shard_size) shards; Pagefind runs once per shard, one after the other,
so its peak memory is one shard's. Hashing modulo the count keeps a shard at shard_size models on
average and a few percent above at most (binomial: 5,000 +- 71 at one standard deviation); the
alternative, cutting the sorted ids into equal runs, would bound it exactly but move the boundary of
every later shard when one model is added, re-indexing them all. The count changes only when the
models cross a multiple of shard_size, and then every shard is re-indexed once. The family documents
are always in shard 0, so shard 0 is never empty when there is a family (a site without any family
has one shard); an empty shard k > 0 (possible with tiny shards) is not built and not listed.

Shard 0 goes to public/pagefind/, shard k to public/pagefind-k/; pagefind/shards.json lists the
folders built, and the search page merges them with Pagefind's mergeIndex. Each shard has a key (the
Pagefind version, the count, its number, its documents; shard 0's also the list): a rebuild copies
every shard whose key is unchanged from the previous site and re-indexes only the others. Pagefind's
output is deterministic, so this equals a full build byte for byte. Only the files the search page
uses are kept (the UI bundles Pagefind also writes are removed).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import ToolFailure
from . import listing, render
from .pages import PAGEFIND

SHARD_SIZE = 5000  # models per shard on average: Pagefind then peaks near 5,000 x 50 KB = 250 MB
SHARDS_FILE = "shards.json"  # in shard 0's folder: the shard folders, for static/search.js

# Written by Pagefind and not used by our search page (it drives pagefind.js directly).
_UNUSED = ("pagefind-ui.js", "pagefind-ui.css", "pagefind-component-ui.js", "pagefind-component-ui.css",
           "pagefind-modular-ui.js", "pagefind-modular-ui.css", "pagefind-highlight.js")

Documents = Callable[[], Iterator[tuple[int, str, str]]]  # (shard, page path under the site, HTML), streamed


def executable() -> Path | None:
    """The Pagefind binary that `pip install 'pagefind[bin]'` ships, or None when it is not installed."""
    try:
        from pagefind_bin import get_executable
    except ImportError:
        return None
    try:
        return Path(get_executable())
    except Exception:  # noqa: BLE001 - an install without the binary for this platform
        return None


def version() -> str:
    binary = executable()
    if binary is None:
        return "none"
    try:
        import importlib.metadata

        return importlib.metadata.version("pagefind_bin")
    except Exception:  # noqa: BLE001
        return str(binary)


def folder(shard: int) -> str:
    """Shard 0's folder keeps Pagefind's usual name, so a one-shard site looks as it always did."""
    return PAGEFIND if shard == 0 else f"{PAGEFIND}-{shard}"


def shard_count(models: int, has_families: bool, shard_size: int) -> int:
    if shard_size < 1:
        raise ValueError(f"search shard size must be a positive integer, not {shard_size!r}")
    return max(1, math.ceil(models / shard_size)) if has_families else 1


def shard_of(model_id: str, count: int) -> int:
    """The shard of a model: stable across runs, machines and Python versions."""
    return int.from_bytes(hashlib.sha256(model_id.encode("utf-8")).digest()[:8], "big") % count


@dataclass(frozen=True)
class Plan:
    """The search shards of one build: keys[k] is shard k's key; built, the shards that have documents
    (an empty one is neither indexed nor listed); documents makes the documents again, for indexing."""

    count: int
    keys: tuple[str, ...]
    built: tuple[int, ...]
    documents: Documents

    def listing(self) -> str:
        return json.dumps({"shards": [f"{folder(k)}/" for k in self.built]}, separators=(",", ":")) + "\n"


def plan(entries: list[listing.Entry], family_slugs: list[str], shard_size: int) -> Plan:
    """Which shard each document goes to and each shard's key, from one pass over the documents (made
    one at a time and hashed as they go: never all in memory)."""
    count = shard_count(len(entries), bool(family_slugs), shard_size)

    def documents() -> Iterator[tuple[int, str, str]]:
        ids = iter(entries)
        for rel, html in render.search_documents(entries, family_slugs):
            entry = next(ids, None)  # the models come first, then the families (shard 0)
            yield (0 if entry is None else shard_of(entry.id, count)), rel, html

    hashes = [hashlib.sha256() for _ in range(count)]
    sizes = [0] * count
    for k, rel, html in documents():
        for part in (rel, html):
            _feed(hashes[k], part)
        sizes[k] += 1
    built = tuple(k for k in range(count) if sizes[k])
    keys, pagefind = [], version()  # a new Pagefind may index the same documents differently
    for k, h in enumerate(hashes):
        key = hashlib.sha256()
        for part in (pagefind, str(count), str(k), h.hexdigest()):
            _feed(key, part)
        if k == 0:  # shard 0's folder holds the list of shards
            _feed(key, json.dumps(built))
        keys.append(key.hexdigest())
    return Plan(count, tuple(keys), built, documents)


def _feed(h: hashlib._Hash, part: str) -> None:
    data = part.encode("utf-8")
    h.update(len(data).to_bytes(8, "little"))
    h.update(data)


def link_tree(src: Path, dst: Path) -> None:
    """Copy a folder by hard links (a plain copy where links are not possible)."""
    def link(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link)


def build_index(site: Path, shards: Plan, previous_keys: Iterable[str] | None, old_site: Path | None,
                scratch: Path) -> str:
    """Index the shards of `shards` into site/pagefind, site/pagefind-1, ..., copying from old_site
    every shard whose key is the one in previous_keys; returns what was done, for the build summary.
    Raises RuntimeError when Pagefind fails.

    The documents are written into a temporary folder made in `scratch`, the build's staging folder
    beside the site, never /tmp: a build killed while Pagefind runs leaves it where the next build's
    recovery (staging.recover) deletes it. Each shard's documents are deleted once it is indexed."""
    binary = executable()
    if binary is None:
        return "search index skipped: Pagefind is not installed (pip install 'pagefind[bin]')"
    if not shards.built:
        return "search index skipped: no model or family to index"
    old = list(previous_keys or [])
    copied = [k for k in shards.built if old_site is not None and k < len(old) and old[k] == shards.keys[k]
              and old_site.joinpath(folder(k)).is_dir()]
    for k in copied:
        link_tree(old_site / folder(k), site / folder(k))  # type: ignore[operator]
    todo = [k for k in shards.built if k not in copied]
    if todo:
        _index(binary, site, shards, set(todo), scratch)
    if 0 in todo:
        (site / PAGEFIND / SHARDS_FILE).write_text(shards.listing(), encoding="utf-8", newline="\n")
    if len(shards.built) == 1:
        return "search index unchanged (copied)" if copied else "search index built"
    if not todo:
        return f"search index unchanged (copied, {len(copied)} shards)"
    return f"search index: {len(todo)} of {len(shards.built)} shards indexed, {len(copied)} unchanged (copied)"


def _index(binary: Path, site: Path, shards: Plan, todo: set[int], scratch: Path) -> None:
    """Write the documents of the shards in todo (one pass), then run Pagefind on each in turn."""
    source = Path(tempfile.mkdtemp(prefix=f"{site.name}-search-", dir=scratch))
    try:
        made: set[str] = set()
        for k, rel, html in shards.documents():
            if k not in todo:
                continue
            path = os.path.join(source, str(k), rel)
            parent = os.path.dirname(path)
            if parent not in made:
                os.makedirs(parent, exist_ok=True)
                made.add(parent)
            with open(path, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(html)
        del made
        for k in sorted(todo):
            target = site / folder(k)
            done = subprocess.run([str(binary), "--site", str(source / str(k)), "--output-path", str(target),
                                   "--silent"], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise ToolFailure("pagefind", "search shard", k, f"exit {done.returncode}: "
                                  f"{(done.stderr or done.stdout).strip()[:500]}")
            shutil.rmtree(source / str(k), ignore_errors=True)
            for name in _UNUSED:
                (target / name).unlink(missing_ok=True)
    finally:
        shutil.rmtree(source, ignore_errors=True)
