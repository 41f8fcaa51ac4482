"""ModelRecord: one Hub model as the snapshot stores it (config text, sha, checkpoint counts, downloads)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, RecordError
from .estimator.config.modelopt import merge_quant_file

# A Hub repo id is "org/name" of [A-Za-z0-9._-]; ".." and leading dots are refused so that an id can
# never name a parent folder once it becomes a path under public/ or the snapshot.
_PART = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,95}"
REPO_ID_RE = re.compile(rf"^{_PART}/{_PART}$")

RECORD_FORMAT = 1
# The largest config.json the project reads, from a local file (resolve.py) or the Hub (hub/client.py):
# real configs are a few hundred KB at most, a bigger file is not a config.
MAX_CONFIG_BYTES = 8 * 1024 * 1024

# Where a record's config.json comes from (config_provenance); config_source names the exact place.
HUB = "hub"  # the Hub's own file at a known revision (every crawled record)
PROVENANCES = (
    HUB,
    "copy",  # a verbatim copy kept in another public repository or Hub page, not read from the Hub here
    "preset",  # a preset of MLC-LLM (mlc-ai/mlc-llm model_preset.py) re-serialised: often an older revision
    "resaved",  # re-saved or printed through transformers by a third party: saver-made keys differ
    "repaired",  # copied from third-party test code, with documented repairs
    "reconstructed",  # rebuilt from what a published page states
    "local",  # the user's own file (the command line)
)


def validate_repo_id(repo_id: object) -> str:
    """Return repo_id if it is a safe `org/name`, else raise RecordError naming it."""
    if not isinstance(repo_id, str) or not REPO_ID_RE.fullmatch(repo_id):
        raise RecordError(str(repo_id)[:100], "id", repo_id, "not an org/name repo id of [A-Za-z0-9._-]")
    if any(part in {".", ".."} or ".." in part for part in repo_id.split("/")):
        raise RecordError(repo_id, "id", repo_id, "'..' is not allowed in a repo id")
    return repo_id


@dataclass(frozen=True)
class ModelRecord:
    """What the snapshot (or a live Hub fetch) knows about one model. Counts are checkpoint scalars."""

    id: str
    config_json: str  # config.json exactly as published (text)
    sha: str | None = None
    checkpoint_params: int | None = None  # safetensors total over shards, stored scalars
    checkpoint_params_by_dtype: Mapping[str, int] = field(default_factory=dict)
    checkpoint_source: str | None = None
    downloads: int | None = None  # the Hub's rolling 30-day count
    downloads_source: str | None = None
    likes: int | None = None
    gated: str | bool | None = None  # False, "auto", "manual", or None when unknown
    last_modified: str | None = None  # ISO 8601 from the Hub
    pipeline_tag: str | None = None
    library_name: str | None = None
    tags: tuple[str, ...] = ()
    config_source: str | None = None
    config_provenance: str | None = None  # one of PROVENANCES; None: not recorded
    stale: bool = False  # dropped out of the crawled top N; last data kept
    problems: tuple[str, ...] = ()
    # hf_quant_config.json exactly as published where vLLM reads it (wants_quant_file); "" otherwise
    quant_config_json: str = ""
    quant_config_source: str | None = None

    def config(self) -> dict[str, Any]:
        """config.json as vLLM reads it: parsed, with hf_quant_config.json merged where vLLM takes it
        (estimator.config.modelopt.merge_quant_file). A non-object or malformed config.json raises ConfigError naming
        the model; a malformed hf_quant_config.json is left out (the crawl records it as a problem)."""
        cfg = parse_config_text(self.config_json, self.id)
        if self.quant_config_json and (quant := parse_quant_file(self.quant_config_json)) is not None:
            return merge_quant_file(cfg, quant)
        return cfg

    @property
    def custom_code(self) -> bool:
        try:
            return "auto_map" in self.config()
        except ConfigError:
            return False


QUANT_CONFIG_FILE = "hf_quant_config.json"


def parse_quant_file(text: str) -> dict[str, Any] | None:
    """hf_quant_config.json's object, or None where the text is not a JSON object."""
    try:
        data = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def parse_config_text(text: str, model: str) -> dict[str, Any]:
    """json.loads with the project's errors and a top-level object required.

    NaN and Infinity are accepted as Python's json (and so transformers) reads them: real Hub files
    use them (nvidia/Nemotron-H-56B-Base-8K). Sizes that are not integers are refused later, by key."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise ConfigError(model, None, None, "config.json is nested too deeply") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(model, None, None, f"config.json is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(model, None, None, f"config.json must hold a JSON object, not a {type(data).__name__}")
    return data
