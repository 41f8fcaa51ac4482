"""The build manifest: what the next build needs to re-render only what changed, and to say what changed.

public/.build-manifest.json (never linked, deterministic) maps each model to the hash of what its
page is made from (its record less the nightly Hub metadata, worker.page_record) and of everything
its page depends on (the estimator's version and source, the site code, the templates and static
files, site_config.yaml), the files its page wrote, and its index row. A model whose hash is
unchanged has byte-identical pages by construction, so a rebuild copies them from the previous
public/ and takes its row from here (its downloads and lastModified from the record). The index
pages, feeds and sitemap are copied too when everything they are made from hashes the same
(index_key), else rendered. It also carries the change history that the changes page and the Atom
feed show.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..hub.snapshot import record_to_dict
from ..records import ModelRecord
from ..settings import Settings
from . import accuracy_page, calculator
from .render import TEMPLATES
from .worker import page_record

FORMAT = 1
_PACKAGE = Path(__file__).resolve().parents[1]
# The code a page depends on: the estimator, the site renderer and the shared modules (format,
# records, settings, pipeline). The estimator's source is hashed, not only its version string, so that
# an edit without a version bump still re-renders every page.
_SOURCES = ("*.py", "estimator/*.py", "site/*.py", "site/*.json")


def _digest(*parts: bytes | str) -> str:
    return _digest_all(parts)


def _digest_all(parts: Iterable[bytes | str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _files(root: Path, patterns: tuple[str, ...]) -> list[Path]:
    found = {p for pattern in patterns for p in root.glob(pattern) if p.is_file() and "__pycache__" not in p.parts}
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def render_key(settings: Settings) -> str:
    """The hash of everything every page depends on besides its own record."""
    parts: list[bytes | str] = [f"format {FORMAT}", f"estimator {__version__}", repr(settings)]
    for root, patterns in ((_PACKAGE, _SOURCES), (TEMPLATES, ("**/*",))):
        for path in _files(root, patterns):
            parts += [path.relative_to(root).as_posix(), path.read_bytes()]
    # Every model page prints the accuracy table's figures (accuracy_line.model_line).
    parts += ["accuracy.json", accuracy_page.source_bytes()]
    # The calculator's shared files: every shipped module (estimator/** included), site.json, the runtime's presence.
    parts += ["calculator", calculator.assets_key(settings)]
    return _digest(*parts)


def model_key(render: str, record: ModelRecord) -> str:
    """The hash of what one model's page is made from (worker.page_record: the record less the Hub
    metadata a crawl refreshes nightly) under a render key: equal keys, byte-identical pages."""
    return _digest(render, json.dumps(record_to_dict(page_record(record)), sort_keys=True, ensure_ascii=True))


def index_key(render: str, *inputs: Any) -> str:
    """The hash of everything the index pages (home, families, cards, changes, feeds, sitemap, ...)
    are made from: the render key and the inputs the build hands their renderers."""
    return _digest(render, *(json.dumps(x, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
                             for x in inputs))


@dataclass
class Manifest:
    """models: id -> {"key", "files", "row"}; history: the change batches, oldest first; search_keys:
    each search shard's key (search.Plan; None without a search index); index_files:
    the index pages (everything but the models' own files, the search index and this manifest), which
    a build whose index_key is unchanged copies instead of rendering."""

    render_key: str = ""
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    search_keys: list[str] | None = None
    index_key: str | None = None
    index_files: list[str] = field(default_factory=list)

    def dumps(self) -> str:
        """Sorted keys, ASCII, and `<`, `>`, `&`, `'` \\u-escaped like the JSON twins (hub strings
        inside the rows must not appear raw in any published file)."""
        data = {"format": FORMAT, "render_key": self.render_key, "search_keys": self.search_keys,
                "index_key": self.index_key, "index_files": self.index_files,
                "history": self.history, "models": self.models}
        text = json.dumps(data, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
        for char in "<>&'":
            text = text.replace(char, f"\\u{ord(char):04x}")
        return text + "\n"


def load(out_dir: Path) -> Manifest | None:
    """The manifest of the build in out_dir, or None when there is none or it is not one we can read
    (the build then renders every page and starts the change history afresh)."""
    try:
        data = json.loads((out_dir / ".build-manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    models, history = data.get("models"), data.get("history")
    if not isinstance(models, dict) or not isinstance(history, list):
        return None
    good = {k: v for k, v in models.items() if isinstance(v, dict) and isinstance(v.get("key"), str)
            and isinstance(v.get("files"), list) and isinstance(v.get("row"), dict)}
    keys = data.get("search_keys")  # a manifest from before the shards has none: every shard is indexed
    keys = keys if isinstance(keys, list) and all(isinstance(x, str) for x in keys) else None
    files = data.get("index_files")
    files = files if isinstance(files, list) and all(isinstance(x, str) for x in files) else []
    return Manifest(str(data.get("render_key") or ""), good, [h for h in history if isinstance(h, dict)],
                    keys,
                    data.get("index_key") if isinstance(data.get("index_key"), str) and files else None, files)
