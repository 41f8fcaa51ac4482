"""Plain, checked data of one listed Hub model, and the snapshot record built from it (no I/O)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import ConfigError
from ..records import HUB, QUANT_CONFIG_FILE, ModelRecord, parse_config_text, validate_repo_id

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
_DTYPE_RE = re.compile(r"^[A-Za-z0-9_]{1,16}$")


@dataclass(frozen=True)
class Listed:
    """One model as the listing (or model_info) describes it, every field checked: Hub data is untrusted."""

    id: str
    sha: str | None = None
    downloads: int | None = None
    likes: int | None = None
    gated: str | bool | None = None
    last_modified: str | None = None
    pipeline_tag: str | None = None
    library_name: str | None = None
    tags: tuple[str, ...] = ()
    params_by_dtype: Mapping[str, int] | None = None  # the API's safetensors.parameters, when present
    params_total: int | None = None
    quant_config_listed: bool | None = None  # the repo's files include hf_quant_config.json; None: not listed


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _text(value: object, limit: int = 200) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def listed_from_info(info: Any) -> Listed:
    """A huggingface_hub ModelInfo turned into plain checked values (the id is NOT validated here)."""
    sha = info.sha if isinstance(info.sha, str) and SHA_RE.fullmatch(info.sha) else None
    modified = info.last_modified
    gated = info.gated if info.gated in (False, True, "auto", "manual") else None
    by_dtype: dict[str, int] | None = None
    total: int | None = None
    st = getattr(info, "safetensors", None)
    if st is not None and isinstance(st.parameters, dict):
        clean = {k: _count(v) for k, v in st.parameters.items()}
        if clean and all(isinstance(k, str) and _DTYPE_RE.fullmatch(k) and v is not None for k, v in clean.items()):
            by_dtype, total = {str(k): int(v) for k, v in clean.items() if v is not None}, _count(st.total)
    tags = info.tags if isinstance(info.tags, list) else []
    siblings = getattr(info, "siblings", None)
    return Listed(
        id=str(info.id),
        sha=sha,
        downloads=_count(info.downloads),
        likes=_count(info.likes),
        gated=gated,
        last_modified=modified.isoformat() if isinstance(modified, datetime) else None,
        pipeline_tag=_text(info.pipeline_tag),
        library_name=_text(info.library_name),
        tags=tuple(t[:200] for t in tags[:200] if isinstance(t, str)),
        params_by_dtype=by_dtype,
        params_total=total,
        quant_config_listed=None if not isinstance(siblings, list) else any(
            getattr(x, "rfilename", None) == QUANT_CONFIG_FILE for x in siblings),
    )


def config_problem(text: str, repo_id: str) -> str | None:
    """The problem with a downloaded config.json text (malformed, truncated, not an object), or None."""
    try:
        parse_config_text(text, repo_id)
    except ConfigError as exc:
        return exc.reason
    return None


def build_record(listed: Listed, *, config_json: str, sha: str | None, by_dtype: Mapping[str, int],
                 checkpoint_source: str | None, config_source: str | None, problems: list[str],
                 date: str, config_provenance: str | None = HUB, quant_config_json: str = "",
                 quant_config_source: str | None = None) -> ModelRecord:
    """A snapshot record from what the Hub said about one model on `date` (YYYY-MM-DD)."""
    return ModelRecord(
        id=validate_repo_id(listed.id),
        config_json=config_json,
        sha=sha,
        checkpoint_params=sum(by_dtype.values()) if by_dtype else None,
        checkpoint_params_by_dtype=dict(by_dtype),
        checkpoint_source=checkpoint_source if by_dtype else None,
        downloads=listed.downloads,
        downloads_source=(f"Hub API field downloads (rolling 30-day count) on {date}"
                          if listed.downloads is not None else None),
        likes=listed.likes,
        gated=listed.gated,
        last_modified=listed.last_modified,
        pipeline_tag=listed.pipeline_tag,
        library_name=listed.library_name,
        tags=listed.tags,
        config_source=config_source,
        config_provenance=config_provenance if config_json else None,
        problems=tuple(dict.fromkeys(problems)),
        quant_config_json=quant_config_json,
        quant_config_source=quant_config_source if quant_config_json else None,
    )
