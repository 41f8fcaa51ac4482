"""The one network seam: every huggingface_hub call of the project is made here, nowhere else."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import DISTRIBUTION
from ..errors import ConfigError, ModelNotFound
from ..estimator.config.modelopt import wants_quant_file
from ..records import (
    MAX_CONFIG_BYTES,
    QUANT_CONFIG_FILE,
    ModelRecord,
    parse_config_text,
    parse_quant_file,
    validate_repo_id,
)
from .listing import SHA_RE, Listed, build_record, config_problem, listed_from_info

# huggingface_hub is imported inside functions only: it reads HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE once,
# at import. Everything below reads those variables at call time and passes them explicitly instead.
# (typed as the strings they are: huggingface_hub's own Literal of expand properties is checked by its server)
# (siblings: the repo's file names, to know whether it has an hf_quant_config.json without asking for it)
EXPAND: Any = ["config", "safetensors", "sha", "downloads", "likes", "gated", "lastModified",
          "pipeline_tag", "library_name", "tags", "siblings"]
DEFAULT_ENDPOINT = "https://huggingface.co"
RETRY_NOTE = "retried on the next crawl"
LISTING_COUNTS_SOURCE = "Hub API field safetensors (per-dtype parameters)"
_TRUE = {"1", "ON", "YES", "TRUE"}

# Fault reasons: the keys of the crawl's summary table.
GATED, MISSING, NOT_FOUND = "gated", "missing config.json (404)", "repo not found"
RATE_LIMITED, SERVER_ERROR, TIMEOUT, NETWORK = "rate limited (429)", "server error (5xx)", "timeout", "network error"
MALFORMED, HEADER_TOO_BIG = "malformed JSON", "safetensors header > 25 MB"
NO_SAFETENSORS, BAD_ID, OFFLINE, OTHER = "no safetensors", "invalid repo id", "offline", "other error"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "dev"


def _seconds(text: str | None, default: float = 10.0) -> float:
    try:
        return float(text) if text else default
    except ValueError:
        return default


@dataclass(frozen=True)
class HubSettings:
    """The standard HF_* variables, read when a client is made (not when huggingface_hub was imported)."""

    endpoint: str
    token: str | bool  # False: send no token at all
    cache_dir: Path
    offline: bool
    etag_timeout: float
    download_timeout: float

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HubSettings:
        env = os.environ if env is None else env
        home = Path(env.get("HF_HOME") or Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface")
        cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or home / "hub"
        token: str | bool = (env.get("HF_TOKEN") or "").strip() or False
        token_file = Path(env.get("HF_TOKEN_PATH") or home / "token")
        if not token and token_file.is_file():
            token = token_file.read_text(encoding="utf-8").strip() or False
        offline = any(env.get(k, "").upper() in _TRUE for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
        return cls(
            endpoint=(env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            token=token,
            cache_dir=Path(cache),
            offline=offline,
            etag_timeout=_seconds(env.get("HF_HUB_ETAG_TIMEOUT")),
            download_timeout=_seconds(env.get("HF_HUB_DOWNLOAD_TIMEOUT")),
        )


class HubFault(Exception):
    """One failed Hub call: `reason` keys the summary table, the message is the problem recorded."""

    def __init__(self, reason: str, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry = retry  # transient: the next crawl tries again at the same sha


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 10:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def classify(exc: BaseException, what: str) -> HubFault:
    """Map a huggingface_hub/httpx exception (and its causes) to one fault reason and a problem text."""
    from huggingface_hub import errors as e
    from huggingface_hub.utils import httpx  # httpx on hub 1.x, httpx2 on 2.x

    retry = f"; {RETRY_NOTE}"
    name = "config.json" if what == "config" else what  # "config not accessible (gated)" is the wording
    for x in _chain(exc):
        if isinstance(x, HubFault):
            return x
        if isinstance(x, e.GatedRepoError):
            return HubFault(GATED, f"{what} not accessible (gated)")
        if isinstance(x, e.RemoteEntryNotFoundError):
            return HubFault(MISSING, f"{name} not found (404)")
        if isinstance(x, (e.RepositoryNotFoundError, e.RevisionNotFoundError)):
            return HubFault(NOT_FOUND, f"{name}: repo or revision not found (or private)")
        if isinstance(x, e.SafetensorsParsingError):
            if "too big" in str(x) or "Maximum supported size" in str(x):  # > SAFETENSORS_MAX_HEADER_LENGTH
                return HubFault(HEADER_TOO_BIG, "checkpoint count unknown: safetensors header declares more than 25 MB")
            return HubFault(MALFORMED, "checkpoint count unknown: safetensors header is not valid")
        if isinstance(x, e.NotASafetensorsRepoError):
            return HubFault(NO_SAFETENSORS, "checkpoint count unknown: no safetensors checkpoint")
        if isinstance(x, e.OfflineModeIsEnabled):
            return HubFault(OFFLINE, f"{name}: offline mode is enabled", retry=True)
        if isinstance(x, e.HfHubHTTPError) and getattr(x, "response", None) is not None:
            status = x.response.status_code
            if status == 429:
                return HubFault(RATE_LIMITED, f"{name}: rate limited (429) after the library's retries{retry}", True)
            if status >= 500:
                return HubFault(SERVER_ERROR, f"{name}: server error (HTTP {status}) after retries{retry}", True)
            if status in (401, 403):
                return HubFault(GATED, f"{what} not accessible (gated or private, HTTP {status})")
            return HubFault(OTHER, f"{name}: HTTP {status}")
        if isinstance(x, httpx.TimeoutException):
            return HubFault(TIMEOUT, f"{name}: timed out after retries{retry}", retry=True)
        if isinstance(x, httpx.TransportError):
            return HubFault(NETWORK, f"{name}: network error ({type(x).__name__}){retry}", retry=True)
    if isinstance(exc, e.LocalEntryNotFoundError):  # raised by hf_hub_download after its own retries
        return HubFault(NETWORK, f"{name}: the Hub could not be reached{retry}", retry=True)
    return HubFault(OTHER, f"{name}: {type(exc).__name__}: {str(exc)[:200]}")


class HubClient:
    """HfApi and hf_hub_download with the endpoint, token, cache and timeouts passed explicitly."""

    def __init__(self, settings: HubSettings | None = None) -> None:
        from huggingface_hub import HfApi
        from huggingface_hub.utils import disable_progress_bars

        self.settings = settings or HubSettings.from_env()
        disable_progress_bars()  # the crawl draws its own progress bar
        self.api = HfApi(endpoint=self.settings.endpoint, token=self.settings.token, library_name="neurarch-trace",
                         library_version=_version())

    def list_models(self, limit: int, pipeline_tag: str | None) -> Iterator[Listed]:
        """The top `limit` models by downloads, one page at a time (the library follows `Link`)."""
        try:
            for info in self.api.list_models(sort="downloads", limit=limit, pipeline_tag=pipeline_tag,
                                             expand=EXPAND):
                yield listed_from_info(info)
        except Exception as exc:  # noqa: BLE001 - any failure ends the listing; the caller decides
            raise classify(exc, "listing") from exc

    def model_info(self, repo_id: str) -> Listed:
        try:
            return listed_from_info(self.api.model_info(validate_repo_id(repo_id), expand=EXPAND))
        except Exception as exc:  # noqa: BLE001
            raise classify(exc, "model info") from exc

    def download_config(self, repo_id: str, revision: str, local_only: bool = False) -> tuple[str, str | None]:
        """config.json text at `revision` through the HF cache, and the commit it came from (download_file)."""
        return self.download_file(repo_id, "config.json", revision, local_only)

    def download_file(self, repo_id: str, filename: str, revision: str, local_only: bool = False,
                      max_bytes: int | None = None) -> tuple[str, str | None]:
        """A small JSON file's text at `revision` through the HF cache, and the commit it came from.

        A file larger than `max_bytes` (MAX_CONFIG_BYTES) is refused before its body is requested: a dry run
        (`hf_hub_download(dry_run=True)`, huggingface_hub >= 1.1; one HEAD, or the cache) gives its size
        from X-Linked-Size / Content-Length. The size on disk is checked again after the download, for
        a server whose HEAD does not tell the size or tells it wrong."""
        from huggingface_hub import hf_hub_download

        s = self.settings
        repo_id = validate_repo_id(repo_id)
        max_bytes = MAX_CONFIG_BYTES if max_bytes is None else max_bytes
        what = "config" if filename == "config.json" else filename
        # one set of options for the dry run and the download (the overloads are keyed on dry_run's literal)
        where = dict(revision=revision, endpoint=s.endpoint, token=s.token, cache_dir=s.cache_dir,
                     etag_timeout=s.etag_timeout, local_files_only=local_only or s.offline)
        try:
            planned = hf_hub_download(repo_id, filename, dry_run=True, **where)  # type: ignore[call-overload]
            _check_size(repo_id, filename, getattr(planned, "file_size", None), max_bytes,
                        "refused before downloading it")
            path = Path(hf_hub_download(repo_id, filename, **where))  # type: ignore[call-overload]
        except Exception as exc:  # noqa: BLE001
            raise classify(exc, what) from exc
        _check_size(repo_id, filename, path.stat().st_size, max_bytes, "refused unread")
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise HubFault(MALFORMED, f"{filename} is not UTF-8 text") from None
        commit = path.parent.name  # <cache>/models--org--name/snapshots/<commit>/<filename>
        return text, commit if SHA_RE.fullmatch(commit) else None

    def safetensors_counts(self, repo_id: str, revision: str | None) -> dict[str, int]:
        """Per-dtype element counts from the safetensors headers (HTTP Range reads, no weights)."""
        try:
            meta = self.api.get_safetensors_metadata(validate_repo_id(repo_id), revision=revision,
                                                     timeout=self.settings.download_timeout)
            return {str(k): int(v) for k, v in meta.parameter_count.items()}
        except Exception as exc:  # noqa: BLE001
            raise classify(exc, "safetensors header") from exc


def _check_size(repo_id: str, filename: str, size: int | None, max_bytes: int, what: str) -> None:
    """Refuse a config file over max_bytes: one problem naming the model, the file and the size."""
    if size is not None and size > max_bytes:
        raise HubFault(MALFORMED, f"{filename} of {repo_id} is {size:,} bytes, larger than {max_bytes:,} "
                                  f"bytes: {what}")


def quant_config_of_repo(client: HubClient, listed: Listed, config_text: str, revision: str,
                         local_only: bool = False) -> tuple[str, str | None, HubFault | None]:
    """hf_quant_config.json where vLLM reads it beside this config.json (estimator.config.modelopt.wants_quant_file)
    and the repo lists it; from the HF cache alone where `local_only` (a miss is no fault there: the file may not exist).
    Returns (text or "", its source, the fault that kept it out)."""
    try:
        wanted = wants_quant_file(parse_config_text(config_text, listed.id))
    except ConfigError:
        return "", None, None
    listed_file = listed.quant_config_listed
    if not wanted or listed_file is False or (listed_file is None and not local_only):
        return "", None, None
    # the two files together within what one config may be, so that their record stays readable (MAX_RECORD_BYTES)
    room = max(0, MAX_CONFIG_BYTES - len(config_text.encode()))
    try:
        text, commit = client.download_file(listed.id, QUANT_CONFIG_FILE, revision, local_only=local_only,
                                            max_bytes=room)
    except HubFault as fault:
        return "", None, None if local_only else fault
    if parse_quant_file(text) is None:
        return "", None, HubFault(MALFORMED, f"{QUANT_CONFIG_FILE} is not a JSON object: not read")
    return text, f"Hub file {QUANT_CONFIG_FILE} at revision {commit or revision}", None


def counts_of(client: HubClient, listed: Listed, revision: str | None
              ) -> tuple[dict[str, int], str | None, HubFault | None]:
    """Checkpoint counts: the listing's safetensors field, else the headers. Returns (by_dtype, source, fault)."""
    if listed.params_by_dtype:
        return dict(listed.params_by_dtype), LISTING_COUNTS_SOURCE, None
    try:
        counts = client.safetensors_counts(listed.id, revision)
    except HubFault as fault:
        return {}, None, fault
    return counts, f"safetensors headers at revision {revision or 'main'} (get_safetensors_metadata)", None


def fetch_record(repo_id: str) -> ModelRecord:
    """One model that is not in the snapshot, through the HF cache; honours HF_HUB_OFFLINE."""
    from datetime import date

    validate_repo_id(repo_id)  # refused before any request or cache path
    client = HubClient()
    today = date.today().isoformat()
    problems: list[str] = []
    listed = Listed(id=repo_id)
    unreachable: HubFault | None = None
    if not client.settings.offline:
        try:
            listed = client.model_info(repo_id)
        except HubFault as fault:
            if not fault.retry:
                raise ModelNotFound(repo_id, f"not found on the Hub ({fault})") from None
            unreachable = fault  # a transient failure: the HF cache may still have it
    cached_only = client.settings.offline or unreachable is not None
    if cached_only:
        why = "HF_HUB_OFFLINE is set" if unreachable is None else f"the Hub could not be reached ({unreachable.reason})"
        problems.append(f"{why}: config.json from the Hugging Face cache, checkpoint counts unknown")
    try:
        # "main", not the sha: the cache then records refs/main, so the same id works offline later.
        text, commit = client.download_config(repo_id, "main", local_only=cached_only)
    except HubFault as fault:
        if client.settings.offline:
            raise ModelNotFound(repo_id, "not in the snapshot and not in the Hugging Face cache "
                                         "(HF_HUB_OFFLINE is set)") from None
        if unreachable is not None:
            raise ModelNotFound(repo_id, f"the Hub could not be reached ({unreachable.reason}) and the model "
                                         "is not in the Hugging Face cache") from None
        if fault.reason == GATED:
            raise ModelNotFound(repo_id, "the model is gated on the Hub: config.json needs a token that was "
                                         "granted access (set HF_TOKEN)") from None
        if fault.reason == MISSING:
            raise ModelNotFound(repo_id, "the repo has no config.json (404)") from None
        raise ModelNotFound(repo_id, f"config.json could not be fetched: {fault}") from None
    if problem := config_problem(text, repo_id):
        problems.append(problem)
    quant, quant_source, quant_fault = quant_config_of_repo(client, listed, text, commit or "main",
                                                            local_only=cached_only)
    if quant_fault:
        problems.append(str(quant_fault))
    by_dtype: dict[str, int] = {}
    source = None
    if not cached_only:
        by_dtype, source, count_fault = counts_of(client, listed, commit)
        if count_fault:
            problems.append(str(count_fault))
    return build_record(listed, config_json=text, sha=commit, by_dtype=by_dtype, checkpoint_source=source,
                        config_source=f"Hub file config.json at revision {commit or 'main'} (fetched {today})",
                        problems=problems, date=today, quant_config_json=quant,
                        quant_config_source=quant_source and f"{quant_source} (fetched {today})")
