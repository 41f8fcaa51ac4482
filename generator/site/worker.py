"""One model's pages, computed in a worker process: record → Report → page + JSON twin + index row.

Workers compute and write the model's own files into the build's staging tree (each model has its
own folder, claimed by the parent in snapshot order before the model is submitted, so no two workers
write one path); the parent records them and writes everything else, in the snapshot's order, so the
output does not depend on how many workers there are or which finishes first. File writes cost more
CPU than rendering on some file systems: spread over the workers they no longer queue behind the
parent. A failure of one model is returned as a problem, never raised: the rest of the build goes on;
an error writing a file (a full disk) is raised, and aborts the build.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from dataclasses import dataclass, fields, replace
from multiprocessing.pool import Pool
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RecordError, TraceError, UnsupportedArchitecture
from ..pipeline import report_for_record
from ..records import ModelRecord, validate_repo_id
from ..settings import Settings
from . import calculator, listing, pages, render


@dataclass(frozen=True)
class Problem:
    """One thing the build could not do for one model; `kind` groups the summary."""

    model: str
    kind: str  # "refused record", "unsupported architecture", "config error", "render error", "family"
    message: str

    @property
    def fatal(self) -> bool:
        """An unsupported architecture is an honest "not estimated yet" page, not a build failure."""
        return self.kind != "unsupported architecture"


@dataclass(frozen=True)
class Result:
    """What the parent writes for one model: files (path, text), its index row, and its problems."""

    id: str
    files: tuple[tuple[str, str], ...]
    row: dict[str, Any] | None
    problems: tuple[Problem, ...]
    written: bool = False  # the worker wrote the files (their texts are then left out: "")


def _kind(exc: TraceError) -> str:
    if isinstance(exc, UnsupportedArchitecture):
        return "unsupported architecture"
    if isinstance(exc, ConfigError):
        return "config error"
    return "refused record" if isinstance(exc, RecordError) else "estimate error"


# The Hub metadata a crawl rewrites every night without the config changing (crawl._refresh): the
# model's page and JSON twin do not show it, so that a nightly re-renders only the models whose
# config, sha or checkpoint changed. Downloads and lastModified reach the index pages, the sitemap and
# llms.txt through the model's row (listing.live_fields), which is taken from the record every build.
NIGHTLY_FIELDS = ("downloads", "downloads_source", "likes", "gated", "last_modified", "pipeline_tag",
                  "library_name", "tags")


def page_record(record: ModelRecord) -> ModelRecord:
    """The record a model's page is made from: the record without NIGHTLY_FIELDS. The manifest keys
    the page on exactly this (manifest.model_key), so a page can never show a field it is not keyed on."""
    return replace(record, **_NIGHTLY_DEFAULTS)


# NIGHTLY_FIELDS at ModelRecord's defaults (None, or () for tags): what "not shown" means for each.
_NIGHTLY_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ModelRecord) if f.name in NIGHTLY_FIELDS}
if set(_NIGHTLY_DEFAULTS) != set(NIGHTLY_FIELDS):
    raise TypeError(f"NIGHTLY_FIELDS names a field ModelRecord lacks: {set(NIGHTLY_FIELDS) - set(_NIGHTLY_DEFAULTS)}")


def build_model(record: ModelRecord, settings: Settings) -> Result:
    """Estimate and render one model's page (or its honest "not estimated yet" page) from its
    page_record; the row takes the live fields from the record itself."""
    try:
        folder = pages.model_dir(record.id)  # iter_records validated the id already; the path is built from it
        validate_repo_id(record.id)
    except RecordError as exc:
        return Result(str(record.id)[:200], (), None, (Problem(str(record.id)[:200], "refused record", str(exc)),))
    live, record = record, page_record(record)
    try:
        report = report_for_record(record, settings)
    except TraceError as exc:
        reason = listing.short_reason(exc, record.id)
        problem = Problem(record.id, _kind(exc), reason)
        try:
            html = render.render_not_estimated(record, reason, str(exc), settings)
        except Exception as bug:  # noqa: BLE001 - a template bug for this model only
            return Result(record.id, (), None, (problem, Problem(record.id, "render error", _text(bug))))
        return Result(record.id, ((f"{folder}/index.html", html),),
                      listing.entry_for(live, None, reason).to_dict(), (problem,))
    except Exception as bug:  # noqa: BLE001 - an estimator bug on one model: list it, build the rest
        return Result(record.id, (), None, (Problem(record.id, "estimate error", _text(bug)),))
    try:
        html = render.render_model_page(report, record, settings, standalone=False)
        twin = render.twin_json(report)
        row = listing.entry_for(live, report, None).to_dict()
    except Exception as bug:  # noqa: BLE001 - a template or formatting bug for this model only
        return Result(record.id, (), None, (Problem(record.id, "render error", _text(bug)),))
    extra = calculator.model_files(folder, record.config())  # a large config.json beside the page
    return Result(record.id, ((f"{folder}/index.html", html), (f"{folder}/index.json", twin), *extra), row, ())


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


_SETTINGS: Settings | None = None
_ROOT: str | None = None  # the staging tree the worker writes model files into


def _init(settings: Settings, root: str | None) -> None:
    global _SETTINGS, _ROOT
    _SETTINGS, _ROOT = settings, root
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops the pool


def _run(record: ModelRecord) -> Result:
    assert _SETTINGS is not None, "worker not initialised"
    result = build_model(record, _SETTINGS)
    if _ROOT is None or not result.files:
        return result
    for rel, text in result.files:  # rel is pages.model_dir(id)/..., of an id build_model validated
        path = os.path.join(_ROOT, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
    return replace(result, files=tuple((rel, "") for rel, _ in result.files), written=True)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def start_pool(jobs: int, settings: Settings, root: Path | None = None) -> Pool | None:
    """A pool of `jobs` workers (None for 1: the build then runs in this process), writing model files
    under `root` when given. Fork where the platform has it (workers start in milliseconds with the
    modules already imported)."""
    if jobs <= 1:
        return None
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    return multiprocessing.get_context(method).Pool(jobs, initializer=_init,
                                                    initargs=(settings, None if root is None else str(root)))


def submit(pool: Pool | None, record: ModelRecord, settings: Settings) -> Any:
    """A handle whose .get() is the Result; computed now when there is no pool."""
    if pool is None:
        return _Done(build_model(record, settings))
    return pool.apply_async(_run, (record,))


@dataclass(frozen=True)
class _Done:
    value: Result

    def get(self) -> Result:
        return self.value
