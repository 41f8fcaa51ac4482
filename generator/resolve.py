"""The model argument -> its ModelRecord: a local folder or config.json, the snapshot, then the Hub."""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError, ModelNotFound
from .estimator.config.modelopt import wants_quant_file
from .hub import client, snapshot
from .records import (
    MAX_CONFIG_BYTES,
    QUANT_CONFIG_FILE,
    REPO_ID_RE,
    ModelRecord,
    parse_config_text,
    parse_quant_file,
)

LOCAL = "local config.json"  # config_source of a record read from the user's own file


def read_config_file(path: Path, model: str, name: str = "config.json") -> str:
    """The text of a local config file, refusing huge or unreadable files with one clear line."""
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(model, None, None, f"{name} is {size:,} bytes, over the {MAX_CONFIG_BYTES:,}-byte limit")
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(model, None, None, f"{name} is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(model, None, None, f"cannot read {name} ({exc.strerror or exc})") from None


def local_record(config: Path, model: str) -> ModelRecord:
    """A local config file and, where it is a model folder's config.json and vLLM would read it
    (estimator.config.modelopt.wants_quant_file), the hf_quant_config.json beside it, as vLLM reads a model folder."""
    text = read_config_file(config, model)
    quant, beside = "", config.parent / QUANT_CONFIG_FILE
    if config.name == "config.json" and beside.is_file() and wants_quant_file(parse_config_text(text, model)):
        quant = read_config_file(beside, model, QUANT_CONFIG_FILE)
        if parse_quant_file(quant) is None:
            raise ConfigError(model, QUANT_CONFIG_FILE, quant[:60], "must hold a JSON object (the file beside its "
                                                                    "config.json, read as vLLM reads a model folder)")
    return ModelRecord(id=model, config_json=text, config_source=LOCAL, config_provenance="local",
                       quant_config_json=quant, quant_config_source=f"local {QUANT_CONFIG_FILE}" if quant else None)


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
        return local_record(cfg, name or arg)
    if is_file:
        return local_record(path, name or arg)
    if not REPO_ID_RE.fullmatch(arg):
        raise ModelNotFound(arg, "no such file or folder, and not a Hub repo id (org/name)")
    record = snapshot.load_record(snapshot_dir or snapshot.DEFAULT_SNAPSHOT_DIR, arg)
    if record is not None:
        return record
    return client.fetch_record(arg)
