"""The search index: Pagefind (the PyPI package `pagefind[bin]`), over one small document per model
and per family.

Pagefind's cost is parsing HTML, and a model page is 20-60 kB of tables, so it does not read the
pages: the build writes, into a temporary folder, one tiny document per page to index (the model
id, its family, its headline numbers; templates/_search_doc.html) at the page's own path, and
Pagefind indexes that folder into public/pagefind/. Results link to the real pages. The search page
(static/search.js) loads the index from the site itself: no third-party host. The output is
deterministic, so a rebuild whose documents are unchanged copies the previous index instead.
Only the files the search page uses are kept (the UI bundles Pagefind also writes are removed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from .pages import PAGEFIND

# Written by Pagefind and not used by our search page (it drives pagefind.js directly).
_UNUSED = ("pagefind-ui.js", "pagefind-ui.css", "pagefind-component-ui.js", "pagefind-component-ui.css",
           "pagefind-modular-ui.js", "pagefind-modular-ui.css", "pagefind-highlight.js")


def executable() -> Path | None:
    """The Pagefind binary that `pip install 'pagefind[bin]'` ships, or None when it is not installed."""
    try:
        from pagefind_bin import get_executable  # type: ignore[import-not-found]
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


def parts(documents: Iterable[tuple[str, str]]) -> Iterator[str]:
    """What the search key hashes: the Pagefind version, then each document's path and HTML, streamed."""
    yield version()
    for rel, html in documents:
        yield rel
        yield html


def link_tree(src: Path, dst: Path) -> None:
    """Copy a folder by hard links (a plain copy where links are not possible)."""
    def link(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link)


def build_index(site: Path, documents: Iterable[tuple[str, str]], previous: Path | None, scratch: Path) -> str:
    """Index `documents` ((page path under the site, HTML), streamed: never all in memory) into
    site/pagefind, or copy `previous`, the earlier build's index of the same documents; returns what
    was done, for the build summary. Raises RuntimeError when Pagefind fails.

    The documents are written into a temporary folder made in `scratch`, the build's staging folder
    beside the site, never /tmp: a build killed while Pagefind runs leaves it where the next build's
    recovery (build._recover) deletes it."""
    target = site / PAGEFIND
    if previous is not None and previous.is_dir():
        link_tree(previous, target)
        return "search index unchanged (copied)"
    binary = executable()
    if binary is None:
        return "search index skipped: Pagefind is not installed (pip install 'pagefind[bin]')"
    source = Path(tempfile.mkdtemp(prefix=f"{site.name}-search-", dir=scratch))
    try:
        made: set[str] = set()
        for rel, html in documents:
            path = os.path.join(source, rel)
            folder = os.path.dirname(path)
            if folder not in made:
                os.makedirs(folder, exist_ok=True)
                made.add(folder)
            with open(path, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(html)
        done = subprocess.run([str(binary), "--site", str(source), "--output-path", str(target), "--silent"],
                              capture_output=True, text=True, check=False)
    finally:
        shutil.rmtree(source, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"pagefind failed ({done.returncode}): {(done.stderr or done.stdout).strip()[:500]}")
    for name in _UNUSED:
        (target / name).unlink(missing_ok=True)
    return "search index built"
