"""The site build: snapshot → Reports → every page in a temporary folder, swapped in whole at the end.

A model that cannot be estimated or rendered becomes a listed problem and the rest is built; an
error outside one model (a full disk, an interrupt) aborts the build and leaves the previous out_dir
exactly as it was. With strict=True any problem aborts too, after all of them have been listed.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import ConfigError, RecordError, TraceError, UnsupportedArchitecture
from ..hub.snapshot import RecordProblem, iter_records
from ..pipeline import report_for_record
from ..records import ModelRecord, validate_repo_id
from ..settings import Settings
from . import listing, pages, render
from .render import render_model_page, twin_json

__all__ = ["Problem", "render_model_page", "run_build"]


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


def _kind(exc: TraceError) -> str:
    if isinstance(exc, UnsupportedArchitecture):
        return "unsupported architecture"
    if isinstance(exc, ConfigError):
        return "config error"
    return "refused record" if isinstance(exc, RecordError) else "estimate error"


def _build_model(record: ModelRecord, settings: Settings, writer: pages.SiteWriter,
                 problems: list[Problem]) -> listing.Entry | None:
    """Estimate and write one model's page (or its honest "not estimated yet" page)."""
    try:
        validate_repo_id(record.id)  # iter_records validated it already; the path is built from it
    except RecordError as exc:
        problems.append(Problem(str(record.id)[:200], "refused record", str(exc)))
        return None
    folder = pages.model_dir(record.id)
    try:
        report = report_for_record(record, settings)
    except TraceError as exc:
        reason = listing.short_reason(exc, record.id)
        problems.append(Problem(record.id, _kind(exc), reason))
        html = render.render_not_estimated(record, reason, str(exc), settings)
        writer.write(f"{folder}/index.html", html)
        return listing.entry_for(record, None, reason)
    try:
        html = render_model_page(report, record, settings, standalone=False)
        twin = twin_json(report)
    except Exception as exc:  # a template or formatting bug for this model only: list it, build the rest
        problems.append(Problem(record.id, "render error", f"{type(exc).__name__}: {exc}"))
        return None
    try:
        writer.write(f"{folder}/index.html", html)
        writer.write(f"{folder}/index.json", twin)
    except RecordError as exc:  # two ids that differ only in case would share a folder on macOS
        problems.append(Problem(record.id, "refused record", str(exc)))
        return None
    return listing.entry_for(record, report, None)


def _write_site(snapshot_dir: Path, work: Path, settings: Settings, console: Console,
                problems: list[Problem]) -> pages.SiteWriter:
    writer = pages.SiteWriter(work)
    items = list(iter_records(snapshot_dir))
    entries: list[listing.Entry] = []
    columns = (TextColumn("[bold]building pages"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("models", total=len(items))
        for item in items:
            if isinstance(item, RecordProblem):
                problems.append(Problem(item.id, "refused record", item.reason))
            else:
                entry = _build_model(item, settings, writer, problems)
                if entry is not None:
                    entries.append(entry)
            progress.advance(task)
    for entry in entries:
        if entry.slug is None and entry.model_type is not None:  # a missing one is already a problem
            problems.append(Problem(entry.id, "family", f"no family page: model_type {entry.model_type!r} "
                                                        "is missing or not a plain name"))
    writer.write(pages.HOME, render.render_home(entries, settings, sort="downloads"))
    writer.write(pages.HOME_BY_SIZE, render.render_home(entries, settings, sort="size"))
    writer.write(pages.FAMILIES_INDEX, render.render_families(entries, settings))
    for slug in sorted({e.slug for e in entries if e.slug is not None}):
        writer.write(f"{pages.family_dir(slug)}/index.html", render.render_family(slug, entries, settings))
    writer.write(pages.NOT_FOUND, render.render_404(settings))
    writer.write(pages.STYLESHEET, render.stylesheet())
    writer.write(pages.MARKER, "Built by neurarch-trace. The next build replaces this whole folder.\n")
    return writer


def _swap_in(work: Path, out_dir: Path) -> None:
    """Replace out_dir by work: two renames in one folder, the old tree deleted only afterwards.

    Only an empty folder or an earlier build (it holds MARKER) is replaced: `--out ~` must not
    delete a home directory."""
    if out_dir.exists() or out_dir.is_symlink():
        if not out_dir.is_dir() or out_dir.is_symlink():
            raise RecordError(str(out_dir), "out", str(out_dir), "exists and is not a folder; not replacing it")
        if not (out_dir / pages.MARKER).is_file() and any(out_dir.iterdir()):
            raise RecordError(str(out_dir), "out", str(out_dir),
                              f"is not empty and holds no {pages.MARKER} from an earlier build; not replacing it")
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-old-", dir=out_dir.parent))
        old.rmdir()
        out_dir.rename(old)
        work.rename(out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        work.rename(out_dir)


def _recover(out_dir: Path) -> None:
    """Undo what a build killed outright (SIGKILL, power loss) left beside out_dir: an old tree moved
    aside but not yet replaced goes back, and half-written temporary trees are deleted."""
    olds = sorted(out_dir.parent.glob(f".{out_dir.name}-old-*"))
    if olds and not out_dir.exists() and not out_dir.is_symlink():
        olds.pop().rename(out_dir)
    for stale in [*olds, *out_dir.parent.glob(f".{out_dir.name}-build-*")]:
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)


def run_build(*, snapshot_dir: Path, out_dir: Path, strict: bool, settings: Settings, console: Console,
              max_problems: int | None = None) -> int:
    """Build the site into out_dir; returns 0, or 1 when strict and anything went wrong, or when more
    than max_problems models failed (the nightly's alarm). Unsupported architectures are listed but
    are not failures: their page says "not estimated yet".

    Raises (out_dir untouched) when the snapshot has no readable index, or on an error that is not
    about one model (disk full, interrupt)."""
    started = time.perf_counter()
    out_dir = Path(out_dir).absolute()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _recover(out_dir)
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-build-", dir=out_dir.parent))
    problems: list[Problem] = []
    try:
        work.chmod(0o755)  # mkdtemp makes it 0700; a published site must be readable by a web server
        writer = _write_site(Path(snapshot_dir), work, settings, console, problems)
        fatal = sum(p.fatal for p in problems)
        failed = (strict and fatal > 0) or (max_problems is not None and fatal > max_problems)
        if not failed:
            _swap_in(work, out_dir)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    _summary(console, writer, problems, time.perf_counter() - started, out_dir, strict, failed, fatal)
    return 1 if failed else 0


def _summary(console: Console, writer: pages.SiteWriter, problems: list[Problem], seconds: float,
             out_dir: Path, strict: bool, failed: bool, fatal: int) -> None:
    """Pages written, models skipped by reason, and seconds: console only, never in a page."""
    by_kind: dict[str, list[Problem]] = {}
    for p in problems:
        by_kind.setdefault(p.kind, []).append(p)
    table = Table(title="Build summary", show_header=False)
    table.add_row("pages written", str(writer.html_pages()) + ("" if not failed else " (discarded)"))
    for kind in sorted(by_kind):
        table.add_row(escape(kind), str(len(by_kind[kind])))
    table.add_row("seconds", f"{seconds:.1f}")
    console.print(table)
    for kind in sorted(by_kind):
        console.print(f"[bold]{escape(kind)}[/bold]")
        for p in sorted(by_kind[kind], key=lambda p: p.model):
            console.print(f"  {escape(p.model)}: {escape(p.message)}", soft_wrap=True, highlight=False)
    not_estimated = len(problems) - fatal
    if failed:
        console.print(f"[red]{fatal} problem(s); {escape(str(out_dir))} left as it was.[/red]")
    else:
        console.print(f"Site written to {escape(str(out_dir))} with {fatal} problem(s) and {not_estimated} "
                      "model(s) not estimated yet, listed above.", highlight=False)
