"""Where pages live: validated slugs, output paths, relative links, and a writer that never escapes.

Every path under public/ is built here from a repo id or a model_type that was validated first, and
SiteWriter checks again, after resolving, that the file lands inside the output folder.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RecordError
from ..records import validate_repo_id
from ..settings import REPOSITORY_RE

# A model_type becomes a folder name under families/; the same character set as repo id parts,
# and no dot at the start, so ".." and hidden folders are impossible.
FAMILY_SLUG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")

HOME = "index.html"
HOME_BY_SIZE = "by-size/index.html"
FAMILIES_INDEX = "families/index.html"
NOT_FOUND = "404.html"
STYLESHEET = "static/style.css"
FILTER_JS = "static/filter.js"
SEARCH_JS = "static/search.js"
CARDS_INDEX = "cards/index.html"
SEARCH = "search/index.html"
CHANGES = "changes/index.html"
ACCURACY = "accuracy/index.html"
SOURCES = "sources/index.html"
FEED = "feeds/models.atom.xml"
SITEMAP = "sitemap.xml"
ROBOTS = "robots.txt"
LLMS = "llms.txt"
PAGEFIND = "pagefind"  # the search index folder Pagefind writes
MARKER = ".neurarch-trace-site"  # marks a folder a build may replace whole
MANIFEST = ".build-manifest.json"  # what the next build needs to skip unchanged models; never linked


def family_slug(model_type: object) -> str | None:
    """model_type as a folder name, or None when it is not a plain name (hostile or missing)."""
    if isinstance(model_type, str) and FAMILY_SLUG_RE.fullmatch(model_type) and ".." not in model_type:
        return model_type
    return None


def model_dir(repo_id: str) -> str:
    """`models/<org>/<name>` of a repo id that validate_repo_id accepts (raises RecordError otherwise)."""
    org, name = validate_repo_id(repo_id).split("/")
    return f"models/{org}/{name}"


def family_dir(slug: str) -> str:
    return f"families/{slug}"


def card_slug(name: str) -> str:
    """A card's folder name from its configured name: "A100 / H100 80 GB" -> "a100-h100-80-gb"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "card"


def card_dir(name: str) -> str:
    return f"cards/{card_slug(name)}"


def root_from(page: str) -> str:
    """The relative prefix from a page (a path like `models/a/b/index.html`) back to the site root.

    Links are relative so that public/ works from file:// and under any base path."""
    return "../" * page.count("/")


def display_name(model_id: str) -> str:
    """The name shown in titles: the part after the org, or the last part of a local path."""
    trimmed = model_id.rstrip("/\\")
    for sep in ("/", "\\"):
        trimmed = trimmed.rsplit(sep, 1)[-1]
    return trimmed or model_id


def site_url(settings_site: Mapping[str, Any]) -> str:
    """The configured public URL with one trailing slash ("" when unset)."""
    url = str(settings_site.get("url") or "")
    return url if not url or url.endswith("/") else url + "/"


def install_command(settings_site: Mapping[str, Any]) -> str:
    """`pip install git+<site.repository>`: this project from its repository (the PyPI name
    `neurarch-trace` is another project's). A missing or unusual URL is refused, naming the key."""
    repo = settings_site.get("repository")
    if not isinstance(repo, str) or not REPOSITORY_RE.fullmatch(repo):
        raise ConfigError("site_config.yaml", "site.repository", repo, "must be the https:// URL of the repository")
    return f"pip install git+{repo}"


@dataclass
class SiteWriter:
    """Writes text files under `root`; refuses paths that leave it and a second write to one path."""

    root: Path
    written: dict[str, str] = field(default_factory=dict)  # casefolded path -> path as first written
    folders: set[str] = field(default_factory=set)  # folders made so far

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self._prefix = str(self.root) + os.sep

    def _claim(self, rel: str, make: bool = True) -> Path:
        # The tree is a fresh folder only this writer fills with plain files and folders (no links),
        # so a lexical check is as strict as resolving, and far cheaper for 100,000 pages.
        full = os.path.normpath(os.path.join(self._prefix, rel))
        if not full.startswith(self._prefix):
            raise RecordError(rel[:100], "path", rel, "resolves outside the output folder")
        # Case-insensitive file systems (macOS, Windows) would merge "Org/M" and "org/m" silently.
        key = full[len(self._prefix):].replace(os.sep, "/").casefold()
        if key in self.written:
            raise RecordError(rel[:100], "path", rel, f"already written as {self.written[key]!r}")
        self.written[key] = rel
        folder = os.path.dirname(full)
        if make and folder not in self.folders:
            os.makedirs(folder, exist_ok=True)
            self.folders.add(folder)
        return Path(full)

    def write(self, rel: str, text: str) -> Path:
        path = self._claim(rel)
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        return path

    def write_bytes(self, rel: str, data: bytes) -> Path:
        path = self._claim(rel)
        path.write_bytes(data)
        return path

    def copy(self, rel: str, source: Path) -> Path:
        """Take a file unchanged from the previous build: a hard link where possible (the previous
        tree is deleted after the swap; the link keeps the bytes), else a copy."""
        path = self._claim(rel)
        try:
            os.link(source, path)
        except OSError:
            shutil.copyfile(source, path)
        return path

    def adopt(self, rel: str) -> Path:
        """Count a file a build worker wrote under root itself (worker.py) as written here: the same
        checks as write(), no I/O."""
        return self._claim(rel, make=False)

    def pages(self) -> list[str]:
        """The HTML pages written so far, in the order they were written."""
        return [rel for rel in self.written.values() if rel.endswith(".html")]

    def html_pages(self) -> int:
        return sum(1 for rel in self.written.values() if rel.endswith(".html"))
