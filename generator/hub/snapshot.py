"""Read and write the committed Hub snapshot: snapshot/index.json plus one JSON record per model."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RecordError
from ..records import PROVENANCES, RECORD_FORMAT, ModelRecord, parse_config_text, validate_repo_id

_CHECKOUT = Path(__file__).resolve().parents[2]
# The committed snapshot in a checkout; installed as a package, ./snapshot of the working directory.
DEFAULT_SNAPSHOT_DIR = _CHECKOUT / "snapshot" if (_CHECKOUT / "pyproject.toml").is_file() else Path("snapshot")
INDEX_NAME = "index.json"
INDEX_FORMAT = 1
# A record is a config.json plus a few scalars; anything this large is not ours, so it is not read.
MAX_RECORD_BYTES = 16 * 1024 * 1024
_SHA_RE = re.compile(r"^[0-9a-f]{40}$|^[0-9a-f]{64}$")
_DTYPE_RE = re.compile(r"^[A-Za-z0-9_]{1,16}$")
_FIELDS = {f.name: f for f in fields(ModelRecord)}
_INT_FIELDS = ("checkpoint_params", "downloads", "likes")
_STR_FIELDS = ("checkpoint_source", "downloads_source", "last_modified", "pipeline_tag",
               "library_name", "config_source", "config_provenance", "quant_config_source")


@dataclass(frozen=True)
class RecordProblem:
    """A snapshot entry that could not be loaded; a batch build reports it and goes on."""

    id: str
    reason: str


def _dumps(data: Any) -> str:
    # One serialisation for every file so that an unchanged record is byte-identical (clean git diffs).
    return json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def _loads(text: str) -> Any:
    def _no_constants(name: str) -> Any:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=_no_constants)


def record_relpath(repo_id: str) -> str:
    """`models/<org>/<name>.json` for a validated repo id (the `file` of its index entry)."""
    org, name = validate_repo_id(repo_id).split("/")
    return f"models/{org}/{name}.json"


def record_path(snapshot_dir: Path, repo_id: str) -> Path:
    """The record file of repo_id; refuses an id or a symlinked folder that would leave snapshot_dir."""
    root = Path(snapshot_dir).resolve()
    path = root / record_relpath(repo_id)
    if not path.resolve().is_relative_to(root):
        raise RecordError(repo_id, "file", str(path), "resolves outside the snapshot folder")
    return path


def record_to_dict(record: ModelRecord) -> dict[str, Any]:
    """Every ModelRecord field as plain JSON values, plus `"format": 1`."""
    data: dict[str, Any] = {}
    for name in _FIELDS:
        value = getattr(record, name)
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        data[name] = value
    data["format"] = RECORD_FORMAT
    return data


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def record_from_dict(data: object) -> ModelRecord:
    """Check every field's type and build the record; anything unexpected raises RecordError."""
    if not isinstance(data, dict):
        raise RecordError("?", "record", data, "a record must be a JSON object")
    repo_id = validate_repo_id(data.get("id"))
    if data.get("format") != RECORD_FORMAT:
        raise RecordError(repo_id, "format", data.get("format"), f"expected record format {RECORD_FORMAT}")
    unknown = sorted(set(data) - set(_FIELDS) - {"format"})
    if unknown:
        raise RecordError(repo_id, unknown[0], data[unknown[0]], "unknown record key")

    def bad(key: str, why: str) -> RecordError:
        return RecordError(repo_id, key, data.get(key), why)

    if not isinstance(data.get("config_json"), str):
        raise bad("config_json", "must be the config.json text (a string)")
    if not isinstance(data.get("quant_config_json", ""), str):
        raise bad("quant_config_json", "must be the hf_quant_config.json text (a string)")
    sha = data.get("sha")
    if sha is not None and not (isinstance(sha, str) and _SHA_RE.fullmatch(sha)):
        raise bad("sha", "must be a hex commit id or null")
    for key in _INT_FIELDS:
        if data.get(key) is not None and not _is_count(data[key]):
            raise bad(key, "must be a non-negative integer or null")
    for key in _STR_FIELDS:
        if data.get(key) is not None and not isinstance(data[key], str):
            raise bad(key, "must be a string or null")
    by_dtype = data.get("checkpoint_params_by_dtype", {})
    if not isinstance(by_dtype, dict) or not all(
        isinstance(k, str) and _DTYPE_RE.fullmatch(k) and _is_count(v) for k, v in by_dtype.items()
    ):
        raise bad("checkpoint_params_by_dtype", "must map dtype names to non-negative integers")
    gated = data.get("gated")
    if gated is not None and not isinstance(gated, (bool, str)):
        raise bad("gated", "must be false, 'auto', 'manual' or null")
    for key in ("tags", "problems"):
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad(key, "must be a list of strings")
    if data.get("config_provenance") not in (None, *PROVENANCES):
        raise bad("config_provenance", f"must be one of {', '.join(PROVENANCES)} or null")
    if not isinstance(data.get("stale", False), bool):
        raise bad("stale", "must be true or false")

    kwargs = {k: v for k, v in data.items() if k in _FIELDS}
    kwargs["tags"] = tuple(data.get("tags", []))
    kwargs["problems"] = tuple(data.get("problems", []))
    kwargs["checkpoint_params_by_dtype"] = dict(by_dtype)
    return ModelRecord(**kwargs)


def _read_record_file(path: Path, repo_id: str) -> ModelRecord:
    size = path.stat().st_size
    if size > MAX_RECORD_BYTES:
        raise RecordError(repo_id, "file", size, f"record is larger than {MAX_RECORD_BYTES} bytes")
    try:
        data = _loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise RecordError(repo_id, "file", str(path.name), f"not valid JSON ({exc})") from None
    record = record_from_dict(data)
    if record.id != repo_id:
        raise RecordError(repo_id, "id", record.id, "record id differs from its file name")
    return record


def load_record(snapshot_dir: Path, repo_id: str) -> ModelRecord | None:
    """The record of repo_id, or None when the snapshot has none; unsafe ids and bad files raise."""
    path = record_path(snapshot_dir, repo_id)
    if not path.is_file():
        return None
    return _read_record_file(path, repo_id)


def read_index(snapshot_dir: Path) -> list[dict]:
    """The index entries sorted by id (shape checked; each id is validated when its record is loaded)."""
    path = Path(snapshot_dir) / INDEX_NAME
    try:
        data = _loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordError("snapshot", INDEX_NAME, str(path), "no snapshot index here") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise RecordError("snapshot", INDEX_NAME, str(path), f"not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT:
        raise RecordError("snapshot", INDEX_NAME, str(path), f"expected an index of format {INDEX_FORMAT}")
    models = data.get("models")
    if not isinstance(models, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str)
                                               for m in models):
        raise RecordError("snapshot", "models", str(path), "must be a list of objects with an id")
    return sorted(models, key=lambda m: m["id"])


class _RecordPaths:
    """record_path for a whole iteration, with the same check at a fraction of the system calls: the
    snapshot root and each org folder are resolved once (a site build reads every record; resolving
    each path anew was a third of a no-change build). A record file that is itself a symlink is
    resolved in full, as record_path does."""

    def __init__(self, snapshot_dir: Path) -> None:
        self.root = Path(snapshot_dir).resolve()
        self.orgs: dict[str, bool] = {}  # org folder name -> it resolves inside the root

    def __call__(self, repo_id: str) -> Path:
        path = self.root / record_relpath(repo_id)
        org = repo_id.split("/")[0]
        inside = self.orgs.get(org)
        if inside is None:
            inside = self.orgs[org] = path.parent.resolve().is_relative_to(self.root)
        if not inside or (path.is_symlink() and not path.resolve().is_relative_to(self.root)):
            raise RecordError(repo_id, "file", str(path), "resolves outside the snapshot folder")
        return path


def iter_records(snapshot_dir: Path) -> Iterator[ModelRecord | RecordProblem]:
    """Each indexed record, sorted by id, read one file at a time; a bad one yields a RecordProblem."""
    seen: set[str] = set()
    paths = _RecordPaths(snapshot_dir)
    for entry in read_index(snapshot_dir):
        repo_id = entry["id"]
        try:
            if repo_id in seen:
                raise RecordError(repo_id, "id", repo_id, "listed twice in the index")
            seen.add(repo_id)
            expected = record_relpath(repo_id)
            if entry.get("file") != expected:
                raise RecordError(repo_id, "file", entry.get("file"), f"expected {expected!r}")
            path = paths(repo_id)
            if not path.is_file():
                raise RecordError(repo_id, "file", expected, "record file is missing")
            yield _read_record_file(path, repo_id)
        except (RecordError, OSError) as exc:
            yield RecordProblem(repo_id[:200], str(exc))


def index_entry(record: ModelRecord) -> dict[str, Any]:
    """The index line of a record: what a site index page needs without opening the record."""
    try:
        model_type = parse_config_text(record.config_json, record.id).get("model_type")
    except ConfigError:
        model_type = None
    return {
        "id": record.id,
        "sha": record.sha,
        "model_type": model_type if isinstance(model_type, str) else None,
        "downloads": record.downloads,
        "stale": record.stale,
        "file": record_relpath(record.id),
    }


def _atomic_write(path: Path, text: str) -> None:
    # Temp file in the same folder, then os.replace: readers see the old file or the new one, never half.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_record(snapshot_dir: Path, record: ModelRecord) -> Path:
    """Write one record atomically; returns its path. The record is re-checked before it is written."""
    data = record_to_dict(record)
    record_from_dict(data)  # never write what the reader would refuse
    path = record_path(snapshot_dir, record.id)
    _atomic_write(path, _dumps(data))
    return path


def write_index(snapshot_dir: Path, entries: Iterable[Mapping[str, Any]]) -> Path:
    """Write index.json atomically, entries sorted by id; a crawl calls it last, after every record."""
    models = []
    for entry in sorted(entries, key=lambda e: e["id"]):
        if entry.get("file") != record_relpath(entry["id"]):
            raise RecordError(entry["id"], "file", entry.get("file"), "does not match the id")
        models.append(dict(entry))
    ids = [m["id"] for m in models]
    if len(ids) != len(set(ids)):
        raise RecordError("snapshot", "models", ids, "an id is listed twice")
    path = Path(snapshot_dir) / INDEX_NAME
    _atomic_write(path, _dumps({"format": INDEX_FORMAT, "models": models}))
    return path


def remove_temp_files(snapshot_dir: Path) -> int:
    """Delete temp files a killed writer left behind (they are never read); returns how many."""
    count = 0
    root = Path(snapshot_dir)
    if root.is_dir():
        for tmp in root.rglob(".*.tmp"):
            if tmp.is_file() and not tmp.is_symlink():
                tmp.unlink()
                count += 1
    return count
