"""The model argument -> its ModelRecord: a local folder or config.json, the snapshot, then the Hub."""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError, ModelNotFound
from .hub import client, snapshot
from .records import MAX_CONFIG_BYTES, REPO_ID_RE, ModelRecord

LOCAL = "local config.json"  # config_source of a record read from the user's own file


def read_config_file(path: Path, model: str) -> str:
    """The text of a local config.json, refusing huge or unreadable files with one clear line."""
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(model, None, None, f"config.json is {size:,} bytes, over the {MAX_CONFIG_BYTES:,}-byte limit")
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(model, None, None, "config.json is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(model, None, None, f"cannot read config.json ({exc.strerror or exc})") from None


def resolve_model(arg: str, snapshot_dir: Path | None) -> ModelRecord:
    """MODEL -> record: a local folder or file first, then the snapshot, then the Hub (hub/client.py)."""
    path = Path(arg)
    # A local model is named as the user typed it (less a trailing config.json), so that every
    # message names the file they gave.
    name = arg[: -len("config.json")].rstrip("/\\") if path.name == "config.json" else arg.rstrip("/\\")
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except OSError:  # a name the file system refuses (e.g. longer than 255 bytes) is no local path
        is_dir = is_file = False
    if is_dir:
        cfg = path / "config.json"
        if not cfg.is_file():
            raise ModelNotFound(arg, "folder holds no config.json")
        return ModelRecord(id=name or arg, config_json=read_config_file(cfg, name or arg), config_source=LOCAL,
                           config_provenance="local")
    if is_file:
        return ModelRecord(id=name or arg, config_json=read_config_file(path, name or arg), config_source=LOCAL,
                           config_provenance="local")
    if not REPO_ID_RE.fullmatch(arg):
        raise ModelNotFound(arg, "no such file or folder, and not a Hub repo id (org/name)")
    record = snapshot.load_record(snapshot_dir or snapshot.DEFAULT_SNAPSHOT_DIR, arg)
    if record is not None:
        return record
    return client.fetch_record(arg)
