"""`neurarch-trace crawl`: refresh the snapshot from the Hub's top-N listing, incrementally and atomically."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import ConfigError, CrawlError, RecordError
from ..estimator.config.modelopt import wants_quant_file
from ..records import HUB, QUANT_CONFIG_FILE, ModelRecord, validate_repo_id
from ..settings import load_settings
from .client import (
    BAD_ID,
    LISTING_COUNTS_SOURCE,
    MALFORMED,
    RETRY_NOTE,
    HubClient,
    HubFault,
    HubSettings,
    counts_of,
    quant_config_of_repo,
)
from .listing import Listed, build_record, config_problem
from .snapshot import (
    INDEX_NAME,
    index_entry,
    load_record,
    read_index,
    record_relpath,
    record_to_dict,
    remove_temp_files,
    write_index,
    write_record,
)

DEFAULT_LIMIT = 200  # models listed per pipeline tag
# The Hub tasks whose popular models the estimator covers: decoders (text-generation), vision-language
# models (image-text-to-text), encoder-decoders (text2text-generation, translation, summarization) and
# encoders / embedders (the rest). site_config.yaml's crawl.pipeline_tags overrides this list.
DEFAULT_PIPELINE_TAGS = ("text-generation", "image-text-to-text", "text2text-generation", "translation",
                         "summarization", "fill-mask", "feature-extraction", "sentence-similarity",
                         "text-classification", "token-classification", "question-answering",
                         "zero-shot-classification")
_COUNT_UNKNOWN = "checkpoint count unknown"
_GATED_PREFIXES = ("config not accessible",)


@dataclass
class Summary:
    """What one crawl did; listed == fetched + unchanged + sum(skipped)."""

    listed: int = 0
    fetched: int = 0  # config.json downloaded and valid (new model or new sha)
    unchanged: int = 0  # same sha: no file downloaded, listing metadata refreshed
    stale: int = 0  # in the snapshot, no longer in the top N: kept, marked stale
    written: int = 0  # record files (re)written
    skipped: Counter = field(default_factory=Counter)  # no usable new config.json, by reason
    problems: Counter = field(default_factory=Counter)  # config fine, something else missing, by reason
    listing_error: str | None = None


def crawl_defaults(site_config: Path | None = None) -> tuple[int, tuple[str, ...]]:
    """`crawl.limit` and `crawl.pipeline_tags` of the settings (settings.load_settings), else 200 and
    DEFAULT_PIPELINE_TAGS. A tag '' lists every task."""
    crawl = load_settings(site_config).crawl
    where = str(site_config or "site_config.yaml")
    limit = crawl.get("limit", DEFAULT_LIMIT)
    tags = crawl.get("pipeline_tags", DEFAULT_PIPELINE_TAGS)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ConfigError(where, "crawl.limit", limit, "must be a positive integer")
    if isinstance(tags, str) or not isinstance(tags, (list, tuple)) or not tags \
            or not all(isinstance(t, str) for t in tags):
        raise ConfigError(where, "crawl.pipeline_tags", tags, "must be a list of Hub pipeline tags")
    return limit, tuple(tags)


def _needs_fetch(previous: ModelRecord, item: Listed, has_token: bool) -> bool:
    # Files at a commit never change, so the same sha means nothing to download, unless the last try
    # failed for a reason that can pass (5xx, 429, timeout; gated once a token is configured).
    if previous.sha is None or item.sha is None or previous.sha != item.sha:
        return True
    if item.quant_config_listed and not previous.quant_config_json \
            and not any(p.startswith(QUANT_CONFIG_FILE) for p in previous.problems):
        try:  # a record crawled before the file was read, or before the repo listed it
            if wants_quant_file(previous.config()):
                return True
        except ConfigError:
            pass
    return any(p.endswith(RETRY_NOTE) or (has_token and p.startswith(_GATED_PREFIXES))
               for p in previous.problems)


def _refresh(previous: ModelRecord, item: Listed, date: str) -> ModelRecord:
    """Same sha: keep config and counts, take the listing's fresh metadata."""
    fresh = build_record(item, config_json="", sha=None, by_dtype={}, checkpoint_source=None,
                         config_source=None, problems=[], date=date)
    changes = {k: getattr(fresh, k) for k in ("downloads", "downloads_source", "likes", "gated", "last_modified",
                                              "pipeline_tag", "library_name", "tags")}
    if item.params_by_dtype:
        changes.update(checkpoint_params=sum(item.params_by_dtype.values()),
                       checkpoint_params_by_dtype=dict(item.params_by_dtype), checkpoint_source=LISTING_COUNTS_SOURCE,
                       problems=tuple(p for p in previous.problems if not p.startswith(_COUNT_UNKNOWN)))
    return replace(previous, stale=False, **changes)


def _fetch(client: HubClient, item: Listed, previous: ModelRecord | None, summary: Summary,
           date: str) -> ModelRecord:
    """New model or new sha: download config.json at that sha, then the checkpoint counts."""
    problems: list[str] = []
    fresh_config = False
    provenance: str | None = HUB
    config_source: str | None
    quant, quant_source = "", None
    try:
        text, commit = client.download_config(item.id, item.sha or "main")
        sha, config_source, fresh_config = commit or item.sha, f"Hub file config.json at revision {commit}", True
        if problem := config_problem(text, item.id):
            problems.append(problem)
            summary.skipped[MALFORMED] += 1
        else:
            quant, quant_source, quant_fault = quant_config_of_repo(client, item, text, sha or "main")
            if quant_fault is not None and quant_fault.retry and previous is not None:
                raise quant_fault  # as a failed config.json: the last good record stands, tried again next crawl
            summary.fetched += 1
            if quant_fault is not None:  # the config stands without it
                problems.append(str(quant_fault))
                summary.problems[f"{QUANT_CONFIG_FILE} not read"] += 1
    except HubFault as fault:
        summary.skipped[fault.reason] += 1
        problems.append(str(fault))
        if previous is not None:  # keep the last good data; its older sha makes the next crawl try again
            text, sha, config_source = previous.config_json, previous.sha, previous.config_source
            provenance = previous.config_provenance
            quant, quant_source = previous.quant_config_json, previous.quant_config_source
        else:
            text, sha, config_source, provenance = "", item.sha, None, None
    by_dtype: dict[str, int] = {}
    source = None
    if item.params_by_dtype or fresh_config:  # a gated or failing repo would refuse the headers too
        by_dtype, source, count_fault = counts_of(client, item, sha)
        if count_fault is not None:
            problems.append(str(count_fault))
            summary.problems[count_fault.reason] += 1
    if not by_dtype and previous is not None and previous.checkpoint_params_by_dtype:
        by_dtype, source = dict(previous.checkpoint_params_by_dtype), previous.checkpoint_source
    return build_record(item, config_json=text, sha=sha, by_dtype=by_dtype, checkpoint_source=source,
                        config_source=config_source, problems=problems, date=date, config_provenance=provenance,
                        quant_config_json=quant, quant_config_source=quant_source)


def _crawl_one(client: HubClient, item: Listed, snapshot_dir: Path, summary: Summary, date: str) -> ModelRecord:
    try:
        previous = load_record(snapshot_dir, item.id)
    except RecordError:
        previous = None  # unreadable: replaced by a fresh record
    if previous is not None and not _needs_fetch(previous, item, bool(client.settings.token)):
        summary.unchanged += 1
        record = _refresh(previous, item, date)
    else:
        record = _fetch(client, item, previous, summary, date)
    if previous is None or record_to_dict(record) != record_to_dict(previous):
        write_record(snapshot_dir, record)  # atomic; an unchanged record is not rewritten
        summary.written += 1
    return record


def _mark_stale(snapshot_dir: Path, entries: dict[str, dict], seen: set[str], summary: Summary) -> None:
    for repo_id in sorted(set(entries) - seen):
        try:
            record = load_record(snapshot_dir, repo_id)
        except RecordError:
            continue  # the build reports it; the crawl leaves it alone
        if record is None:
            continue
        summary.stale += 1
        if not record.stale:
            record = replace(record, stale=True)
            write_record(snapshot_dir, record)
            summary.written += 1
        entries[repo_id] = index_entry(record)


def summary_table(summary: Summary) -> Table:
    table = Table(title="crawl summary", show_header=True)
    table.add_column("")
    table.add_column("models", justify="right")
    for label, value in (("listed", summary.listed), ("fetched", summary.fetched),
                         ("unchanged", summary.unchanged), ("stale (kept)", summary.stale),
                         ("records written", summary.written)):
        table.add_row(label, str(value))
    for reason, count in sorted(summary.skipped.items()):
        table.add_row(f"skipped: {escape(reason)}", str(count))
    for reason, count in sorted(summary.problems.items()):
        table.add_row(f"problem: {escape(reason)}", str(count))
    return table


def run_crawl(*, limit: int, pipeline_tags: Sequence[str | None], snapshot_dir: Path, console: Console) -> int:
    """Crawl the top `limit` models of each pipeline tag ('' or None: every task) into snapshot_dir. 0 when
    it finished (problems or not); CrawlError (exit 1) when it could not start or list anything, RecordError when
    the snapshot's index is unreadable: the snapshot is then left untouched."""
    snapshot_dir = Path(snapshot_dir)
    tags = list(dict.fromkeys(tag or None for tag in pipeline_tags)) or [None]
    settings = HubSettings.from_env()
    if settings.offline:
        raise CrawlError(settings.endpoint, "HF_HUB_OFFLINE", os.environ.get("HF_HUB_OFFLINE"),
                         "is set; the crawl needs the Hub")
    old = read_index(snapshot_dir) if (snapshot_dir / INDEX_NAME).exists() else []  # RecordError: left as it is
    entries: dict[str, dict] = {}
    for entry in old:
        try:
            if entry.get("file") == record_relpath(entry["id"]):
                entries[entry["id"]] = entry
        except RecordError:
            pass  # an unsafe id in a hand-edited index is dropped, never used as a path
    summary = Summary()
    date = datetime.now(timezone.utc).date().isoformat()
    client = HubClient(settings)
    listed: list[Listed] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("listing", total=limit * len(tags))
        for tag in tags:
            progress.update(task, description=escape(f"listing {tag or 'every task'}"))
            try:
                for item in client.list_models(limit, tag):
                    listed.append(item)
                    progress.advance(task)
            except HubFault as fault:  # the other tags are still listed; nothing is marked stale
                summary.listing_error = f"{tag or 'every task'}: {fault}"
        if not listed:
            progress.stop()
            raise CrawlError(settings.endpoint, "pipeline_tags", [tag or "" for tag in tags],
                             f"nothing could be listed ({summary.listing_error or 'the listing is empty'})")
        remove_temp_files(snapshot_dir)
        summary.listed = len(listed)
        progress.update(task, description="fetching", completed=0, total=len(listed))
        seen: set[str] = set()
        for item in listed:
            progress.update(task, description=escape(f"fetching {item.id[:60]}"))
            try:
                validate_repo_id(item.id)
            except RecordError:
                summary.skipped[BAD_ID] += 1  # refused before it becomes a path
            else:
                if item.id not in seen:
                    seen.add(item.id)
                    entries[item.id] = index_entry(_crawl_one(client, item, snapshot_dir, summary, date))
                else:
                    summary.skipped["listed twice"] += 1
            progress.advance(task)
        progress.update(task, description="done")
    if summary.listing_error is None:
        _mark_stale(snapshot_dir, entries, seen, summary)
    write_index(snapshot_dir, entries.values())  # last: a crawl killed before this keeps the old index
    console.print(summary_table(summary))
    if summary.listing_error:
        console.print(f"[yellow]listing stopped early ({escape(summary.listing_error)}); "
                      "no model was marked stale[/yellow]")
    console.print(f"snapshot: {escape(str(snapshot_dir))} ({len(entries)} models)")
    return 0
