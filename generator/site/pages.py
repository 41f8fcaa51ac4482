"""Where pages live: validated slugs, output paths, relative links, and a writer that never escapes.

Every path under public/ is built here from a repo id or a model_type that was validated first, and
SiteWriter checks again, after resolving, that the file lands inside the output folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import RecordError
from ..records import validate_repo_id

# A model_type becomes a folder name under families/; the same character set as repo id parts,
# and no dot at the start, so ".." and hidden folders are impossible.
FAMILY_SLUG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")

HOME = "index.html"
HOME_BY_SIZE = "by-size/index.html"
FAMILIES_INDEX = "families/index.html"
NOT_FOUND = "404.html"
STYLESHEET = "static/style.css"
MARKER = ".neurarch-trace-site"  # marks a folder a build may replace whole


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


def site_url(settings_site: dict) -> str:
    """The configured public URL with one trailing slash ("" when unset)."""
    url = str(settings_site.get("url") or "")
    return url if not url or url.endswith("/") else url + "/"


@dataclass
class SiteWriter:
    """Writes text files under `root`; refuses paths that leave it and a second write to one path."""

    root: Path
    written: dict[str, str] = field(default_factory=dict)  # casefolded path -> path as first written

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()

    def write(self, rel: str, text: str) -> Path:
        path = (self.root / rel).resolve()
        if not path.is_relative_to(self.root) or path == self.root:
            raise RecordError(rel[:100], "path", rel, "resolves outside the output folder")
        # Case-insensitive file systems (macOS, Windows) would merge "Org/M" and "org/m" silently.
        key = path.relative_to(self.root).as_posix().casefold()
        if key in self.written:
            raise RecordError(rel[:100], "path", rel, f"already written as {self.written[key]!r}")
        self.written[key] = rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        return path

    def html_pages(self) -> int:
        return sum(1 for rel in self.written.values() if rel.endswith(".html"))
