"""The site build: snapshot → Reports → every page in a temporary folder, swapped in whole at the end.

Records are streamed from the snapshot; worker processes (one per core) estimate and render each
model and write its folder, and this process records the files and writes everything else in the
snapshot's order, so the output never depends on the number of workers. Only a small row per model
is kept for the index pages, never the Reports.

Incremental: a model whose page record (its record less the nightly Hub metadata, which only the
index pages show) and render inputs hash as in the previous build's manifest is not estimated
again; its files are copied (hard-linked) from the previous out_dir. The index pages, card and
family pages, changes page, feed and sitemap are copied the same way when their inputs (the rows,
the history, the page list) hash the same, else rendered; the Pagefind index likewise. The output
is byte-identical to a full build (`incremental=False`) from the same previous site.

A model that cannot be estimated or rendered becomes a listed problem and the rest is built; an
error outside one model (a full disk, an interrupt) aborts the build and leaves the previous out_dir
exactly as it was. With strict=True any problem aborts too, after all of them have been listed.
"""

from __future__ import annotations

import shutil
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import ConfigError, RecordError
from ..hub.snapshot import RecordProblem, iter_records, read_index
from ..settings import Settings
from . import calculator, changes, listing, manifest, pages, render, search, staging, unchanged, worker
from .lock import build_lock
from .render import render_model_page, twin_json
from .worker import Problem

__all__ = ["Problem", "render_model_page", "run_build", "twin_json"]

LOOKAHEAD_PER_JOB = 8  # models in flight per worker: enough to keep both cores busy, few in memory
REFRESH = 50  # redraw the progress bar every this many models


@dataclass
class _Stats:
    rendered: int = 0
    copied: int = 0
    search: str = ""
    notes: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase, for the summary
    clock: float = field(default_factory=time.perf_counter)

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - self.clock
        self.clock = now


def _copy_model(old_out: Path, entry: dict[str, Any], writer: pages.SiteWriter) -> None:
    for rel in entry["files"]:
        writer.copy(rel, old_out / rel)


def _reusable(old_out: Path | None, old: dict[str, Any] | None, key: str) -> bool:
    return (old_out is not None and old is not None and old.get("key") == key
            and all(isinstance(rel, str) and (old_out / rel).is_file() for rel in old["files"]))


def _models(snapshot_dir: Path, settings: Settings, render_key: str, writer: pages.SiteWriter,
            previous: manifest.Manifest | None, old_out: Path | None, jobs: int, console: Console,
            problems: list[Problem], stats: _Stats) -> tuple[list[listing.Entry], dict[str, dict[str, Any]]]:
    """Every model's files, in snapshot order; returns the index rows and the new manifest entries."""
    entries: list[listing.Entry] = []
    models: dict[str, dict[str, Any]] = {}
    pending: deque[tuple[str, Any, str, Any]] = deque()
    total = len(read_index(snapshot_dir))
    columns = (TextColumn("[bold]building pages"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    pool: Any = None
    started = False
    try:
        # auto_refresh=False: no refresh thread, so the pool may fork (lazily, at the first model
        # that needs rendering) while the bar is up; the bar is redrawn every REFRESH models.
        with Progress(*columns, console=console, transient=True, auto_refresh=False) as progress:
            task = progress.add_task("models", total=total)

            def drain_one() -> None:
                kind, model, key, payload = pending.popleft()
                if kind == "copy":
                    old, record = payload
                    _copy_model(old_out, old, writer)  # type: ignore[arg-type]
                    problems.extend(Problem(model, k, m) for k, m in old.get("problems", []))
                    row = {**old["row"], **listing.live_fields(record)}  # the page is the same, the counts live
                    entries.append(listing.Entry.from_dict(row))
                    models[model] = {**old, "row": row}
                    stats.copied += 1
                else:
                    result: worker.Result = payload.get()
                    problems.extend(result.problems)
                    try:
                        for rel, text in result.files:
                            if result.written:
                                writer.adopt(rel)
                            else:
                                writer.write(rel, text)
                    except RecordError as exc:
                        problems.append(Problem(model, "refused record", str(exc)))
                    else:
                        if result.row is not None:
                            entries.append(listing.Entry.from_dict(result.row))
                            models[model] = {"key": key, "files": [rel for rel, _ in result.files], "row": result.row,
                                             "problems": [[p.kind, p.message] for p in result.problems]}
                    stats.rendered += 1
                progress.advance(task)
                if progress.tasks[0].completed % REFRESH == 0:
                    progress.refresh()

            folders: dict[str, str] = {}  # casefolded id -> id: each model's folder, claimed in snapshot order
            for item in iter_records(snapshot_dir):
                if not isinstance(item, RecordProblem) and folders.setdefault(item.id.casefold(), item.id) != item.id:
                    # Two ids that differ only in case would share a folder on macOS and Windows.
                    item = RecordProblem(item.id, str(RecordError(item.id, "id", item.id, "shares its folder with "
                                                                  f"{folders[item.id.casefold()]!r} where file names "
                                                                  "are case-insensitive")))
                if isinstance(item, RecordProblem):
                    problems.append(Problem(item.id, "refused record", item.reason))
                    progress.advance(task)
                    continue
                key = manifest.model_key(render_key, item)
                old = previous.models.get(item.id) if previous is not None else None
                if _reusable(old_out, old, key):
                    pending.append(("copy", item.id, key, (old, item)))
                else:
                    if not started:
                        pool, started = worker.start_pool(jobs, settings, writer.root), True
                    pending.append(("render", item.id, key, worker.submit(pool, item, settings)))
                while len(pending) > LOOKAHEAD_PER_JOB * max(jobs, 1) or (pending and pending[0][0] == "copy"):
                    drain_one()
            while pending:
                drain_one()
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    return entries, models


def _write_site(snapshot_dir: Path, work: Path, settings: Settings, console: Console, problems: list[Problem],
                previous: manifest.Manifest | None, old_out: Path | None, jobs: int, use_search: bool,
                shard_size: int, stats: _Stats) -> pages.SiteWriter:
    writer = pages.SiteWriter(work)
    render_key = manifest.render_key(settings)  # once: the manifest must hold the key the pages were built under
    stats.lap("start")
    entries, models = _models(snapshot_dir, settings, render_key, writer, previous, old_out, jobs, console,
                              problems, stats)
    stats.lap("models")
    problems.extend(unchanged.family_problems(entries))
    groups: dict[str, list[listing.Entry]] = {}
    for e in entries:
        if e.slug is not None:
            groups.setdefault(e.slug, []).append(e)
    previous_rows = None if previous is None else {m: v["row"] for m, v in previous.models.items()}
    history = changes.next_history(previous_rows, [] if previous is None else previous.history, entries,
                                   changes.snapshot_date(entries))
    live = set(models)
    if not calculator.runtime_available():
        stats.notes.append(calculator.MISSING)
    if not pages.site_url(settings.site):
        stats.notes.append("no site.url in site_config.yaml: no sitemap, feed, robots.txt or llms.txt written")
    index_key, index_files = _index_pages(writer, settings, render_key, entries, models, groups, history, live,
                                          previous, old_out, stats)
    stats.lap("index pages")
    search_keys = (_search_index(work, entries, sorted(groups), shard_size, previous, old_out, stats)
                   if use_search else None)
    stats.lap("search")
    writer.write(pages.MANIFEST, manifest.Manifest(render_key, models, history, search_keys, index_key,
                                                   index_files).dumps())
    writer.write(pages.MARKER, "Built by neurarch-trace. The next build replaces this whole folder.\n")
    return writer


def _index_pages(writer: pages.SiteWriter, settings: Settings, render_key: str, entries: list[listing.Entry],
                 models: dict[str, dict[str, Any]], groups: dict[str, list[listing.Entry]], history: list[dict],
                 live: set[str], previous: manifest.Manifest | None, old_out: Path | None,
                 stats: _Stats) -> tuple[str, list[str]]:
    """The index pages, rendered, or copied from old_out when everything they are made from hashes as
    in the previous build; returns that hash and the files written, for the manifest."""
    # Every input of the index pages: the rows in snapshot order, the history, the snapshot's date
    # (SOURCE_DATE_EPOCH when no record has one) and the pages written so far (the sitemap lists them).
    key = manifest.index_key(render_key, [models[e.id]["row"] for e in entries], history,
                             changes.snapshot_date(entries), writer.pages())
    first = len(writer.written)
    if (previous is not None and old_out is not None and previous.index_key == key
            and all((old_out / rel).is_file() for rel in previous.index_files)):
        for rel in previous.index_files:
            writer.copy(rel, old_out / rel)
        stats.notes.append("index pages unchanged (copied)")
    else:
        _write_index_pages(writer, settings, entries, groups, history, live)
    return key, list(writer.written.values())[first:]


def _search_index(work: Path, entries: list[listing.Entry], family_slugs: list[str], shard_size: int,
                  previous: manifest.Manifest | None, old_out: Path | None, stats: _Stats) -> list[str] | None:
    """Pagefind over the search documents, shard by shard, copying the shards whose documents hash as
    in the previous build (search.py); returns the shard keys for the manifest (None when Pagefind is
    not installed). The documents are made as they are hashed and again as they are written, never
    held all at once."""
    shards = search.plan(entries, family_slugs, shard_size)
    stats.search = search.build_index(work, shards, None if previous is None else previous.search_keys, old_out,
                                      scratch=work.parent)
    return None if stats.search.startswith("search index skipped") else list(shards.keys)


def _write_index_pages(writer: pages.SiteWriter, settings: Settings, entries: list[listing.Entry],
                       groups: dict[str, list[listing.Entry]], history: list[dict], live: set[str]) -> None:
    """Every page that is not one model's: home, families, cards, changes, search, 404, static files,
    and (with site.url) sitemap, robots.txt, feed and llms.txt."""
    writer.write(pages.HOME, render.render_home(entries, settings, sort="downloads"))
    writer.write(pages.HOME_BY_SIZE, render.render_home(entries, settings, sort="size"))
    writer.write(pages.FAMILIES_INDEX, render.render_families(entries, settings))
    for slug in sorted(groups):
        writer.write(f"{pages.family_dir(slug)}/index.html", render.render_family(slug, groups[slug], settings))
    writer.write(pages.CARDS_INDEX, render.render_cards(entries, settings))
    for i, card in enumerate(settings.cards):
        writer.write(f"{pages.card_dir(card.name)}/index.html", render.render_card(i, entries, settings))
    writer.write(pages.CHANGES, render.render_changes(history, live, settings))
    writer.write(pages.SEARCH, render.render_search(settings))
    writer.write(pages.ACCURACY, render.render_accuracy(settings))  # from data/measurements/accuracy.json
    writer.write(pages.SOURCES, render.render_sources(settings))
    writer.write(pages.NOT_FOUND, render.render_404(settings))
    writer.write(pages.STYLESHEET, render.stylesheet())
    writer.write(pages.FILTER_JS, render.static_file(pages.FILTER_JS))
    writer.write(pages.SEARCH_JS, render.static_file(pages.SEARCH_JS))
    calculator.write_assets(writer, settings, render.static_file(calculator.SCRIPT))
    if pages.site_url(settings.site):
        _write_machine_files(writer, settings, entries, history, live)


def _write_machine_files(writer: pages.SiteWriter, settings: Settings, entries: list[listing.Entry],
                         history: list[dict], live: set[str]) -> None:
    """sitemap.xml (lastmod from each model's lastModified), robots.txt, the Atom feed, llms.txt."""
    date = changes.snapshot_date(entries)
    index_date = None if date == changes.EPOCH else date
    modified = {f"{pages.model_dir(e.id)}/index.html": e.last_modified for e in entries}
    urls = [(rel, modified.get(rel, index_date)) for rel in writer.pages()
            if rel not in (pages.NOT_FOUND, pages.SEARCH)]
    writer.write(pages.SITEMAP, render.render_sitemap(settings, urls))
    writer.write(pages.ROBOTS, render.render_robots(settings))
    writer.write(pages.FEED, render.render_feed(settings, history, live))
    writer.write(pages.LLMS, render.render_llms(entries, settings))


def run_build(*, snapshot_dir: Path, out_dir: Path, strict: bool, settings: Settings, console: Console,
              max_problems: int | None = None, incremental: bool = True, jobs: int | None = None,
              search_index: bool = True, background_cleanup: bool = False,
              search_shard_size: int = search.SHARD_SIZE) -> int:
    """Build the site into out_dir; returns 0, or 1 when strict and anything went wrong, or when more
    than max_problems models failed (the nightly's alarm). Unsupported architectures are listed but
    are not failures: their page says "not estimated yet".

    incremental=False renders every model again (the previous build's manifest is still read, for the
    change history). jobs: worker processes (default: one per core). search_index=False skips Pagefind;
    search_shard_size: models per search shard on average (search.py).
    background_cleanup: delete the replaced site in a detached process (the command line does).

    Raises (out_dir untouched) when the snapshot has no readable index, or on an error that is not
    about one model (disk full, interrupt)."""
    started = time.perf_counter()
    if isinstance(search_shard_size, bool) or not isinstance(search_shard_size, int) or search_shard_size < 1:
        raise ConfigError("build", "search_shard_size", search_shard_size, "must be a positive integer")
    out_dir = Path(out_dir).absolute()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # The lock comes before staging.recover: a second build's recovery would otherwise delete the first
    # one's temporary folder mid-build. A second build of the same folder refuses (BuildLocked).
    with build_lock(out_dir):
        return _locked_build(started, snapshot_dir, out_dir, strict, settings, console, max_problems,
                             incremental, jobs, search_index, background_cleanup, search_shard_size)


def _locked_build(started: float, snapshot_dir: Path, out_dir: Path, strict: bool, settings: Settings,
                  console: Console, max_problems: int | None, incremental: bool, jobs: int | None,
                  search_index: bool, background_cleanup: bool, shard_size: int) -> int:
    staging.recover(out_dir)
    is_site = out_dir.is_dir() and not out_dir.is_symlink() and (out_dir / pages.MARKER).is_file()
    previous = manifest.load(out_dir) if is_site else None
    old_out = out_dir if (incremental and previous is not None) else None
    stats = _Stats()
    if old_out is not None and previous is not None:
        found = unchanged.check(Path(snapshot_dir), out_dir, settings, manifest.render_key(settings), previous,
                                search_index, shard_size)
        if found is not None:
            return _finish(console, found, started, out_dir, strict, max_problems, stats, len(previous.models),
                           sum(rel.endswith(".html") for v in previous.models.values() for rel in v["files"])
                           + sum(rel.endswith(".html") for rel in previous.index_files))
    work = staging.make_work(out_dir)
    problems: list[Problem] = []
    try:
        writer = _write_site(Path(snapshot_dir), work, settings, console, problems, previous, old_out,
                             worker.default_jobs() if jobs is None else jobs, search_index, shard_size, stats)
        if not _failed(problems, strict, max_problems):
            stats.lap("manifest")
            staging.swap_in(work, out_dir, background_cleanup)
            stats.lap("swap")
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return _finish(console, problems, started, out_dir, strict, max_problems, stats, None, writer.html_pages())


def _failed(problems: list[Problem], strict: bool, max_problems: int | None) -> bool:
    fatal = sum(p.fatal for p in problems)
    return (strict and fatal > 0) or (max_problems is not None and fatal > max_problems)


def _finish(console: Console, problems: list[Problem], started: float, out_dir: Path, strict: bool,
            max_problems: int | None, stats: _Stats, kept: int | None, html_pages: int) -> int:
    """The summary and the exit code; kept: the number of models when out_dir was already this build."""
    if kept is not None:
        stats.copied = kept
        stats.search = "search index unchanged (copied)"
        stats.notes += ["index pages unchanged (copied)",
                        "nothing changed since the last build: the site in place is this build's output, "
                        "left as it is"]
        stats.lap("no-change check")
    failed = _failed(problems, strict, max_problems)
    _summary(console, html_pages, problems, time.perf_counter() - started, out_dir, strict, failed,
             sum(p.fatal for p in problems), stats)
    return 1 if failed else 0


def _summary(console: Console, html_pages: int, problems: list[Problem], seconds: float,
             out_dir: Path, strict: bool, failed: bool, fatal: int, stats: _Stats) -> None:
    """Pages written, models skipped by reason, and seconds: console only, never in a page."""
    by_kind: dict[str, list[Problem]] = {}
    for p in problems:
        by_kind.setdefault(p.kind, []).append(p)
    table = Table(title="Build summary", show_header=False)
    table.add_row("pages written", str(html_pages) + ("" if not failed else " (discarded)"))
    table.add_row("models rendered", str(stats.rendered))
    table.add_row("models unchanged (copied)", str(stats.copied))
    for kind in sorted(by_kind):
        table.add_row(escape(kind), str(len(by_kind[kind])))
    table.add_row("seconds", f"{seconds:.1f}")
    console.print(table)
    console.print("seconds by phase: " + ", ".join(f"{k} {v:.2f}" for k, v in stats.phases.items()), highlight=False)
    for note in ([stats.search] if stats.search else []) + stats.notes:
        console.print(escape(note), highlight=False)
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
