"""Benchmark (not a test): the site build at 1,000 models, and a rebuild with nothing changed.

Run with `make bench` (after bench_estimator.py). The committed snapshot's records are replicated
under new ids (`<org>-copy<k>/<name>`) until there are N models, so the mix of architectures and
sizes is the real one. Prints the full build's time and pages per second (every model estimated and
rendered, the index pages, the Pagefind index), then the time of a rebuild with nothing changed.
Targets: 1,000 models in under 10 s on 2 cores; a no-change rebuild in under 1 s.
"""

from __future__ import annotations

import argparse
import io
import re
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402

from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, index_entry, iter_records, write_index, write_record  # noqa: E402
from generator.records import ModelRecord  # noqa: E402
from generator.settings import load_settings  # noqa: E402
from generator.site import manifest, worker  # noqa: E402
from generator.site.build import run_build  # noqa: E402


def replicate(snapshot_dir: Path, target: Path, models: int) -> int:
    """Write a snapshot of `models` records into target: the real ones, then copies under new ids."""
    originals = [r for r in iter_records(snapshot_dir) if isinstance(r, ModelRecord)]
    records: list[ModelRecord] = []
    copy = 0
    while len(records) < models:
        for record in originals:
            if len(records) == models:
                break
            if copy == 0:
                records.append(record)
            else:
                org, name = record.id.split("/")
                records.append(replace(record, id=f"{org[:80]}-copy{copy}/{name}"))
        copy += 1
    for record in records:
        write_record(target, record)
    write_index(target, [index_entry(r) for r in records])
    return len(records)


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the pool's workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _build(snapshot: Path, out: Path, jobs: int | None) -> tuple[float, str]:
    buffer = io.StringIO()
    started = time.perf_counter()
    # As `neurarch-trace build` runs it: the replaced tree is deleted by a detached process.
    run_build(snapshot_dir=snapshot, out_dir=out, strict=False, settings=load_settings(),
              console=Console(file=buffer, width=200), jobs=jobs, background_cleanup=True)
    return time.perf_counter() - started, buffer.getvalue()


def _pages(out: Path) -> int:
    return sum(1 for _ in out.rglob("*.html"))


def _pin_render_key() -> None:
    """Hash the code and templates once: a no-change rebuild presumes that nothing changed, and on a
    machine shared with people editing the estimator, its source could change between the builds."""
    compute, known = manifest.render_key, {}
    manifest.render_key = lambda settings: known.setdefault(repr(settings), compute(settings))  # type: ignore[assignment]


def bench_site(models: int = 1000, jobs: int | None = None) -> None:
    jobs = worker.default_jobs() if jobs is None else jobs
    _pin_render_key()
    root = Path(tempfile.mkdtemp(prefix="bench-site-"))
    try:
        snapshot = root / "snapshot"
        n = replicate(DEFAULT_SNAPSHOT_DIR, snapshot, models)
        out = root / "public"
        cpu = _cpu()
        full, first = _build(snapshot, out, jobs)
        cpu = _cpu() - cpu
        full_phases = re.search(r"seconds by phase: ([^\n]*)", first)
        pages = _pages(out)
        again, summary = _build(snapshot, out, jobs)
        phases = re.search(r"seconds by phase: ([^\n]*)", summary)
        rendered = re.search(r"models rendered\s*│\s*(\d+)", summary)
        assert rendered and rendered.group(1) == "0", f"the rebuild re-rendered models:\n{summary}"
        model_pages = sum(1 for _ in (out / "models").rglob("index.html"))
        largest = max((out / "models").rglob("index.html"), key=lambda p: p.stat().st_size)
        print(f"site build ({n} models, {jobs} worker process(es), Pagefind index included):")
        print(f"  full build            {full:8.2f} s   ({pages} HTML pages, {model_pages} model pages; "
              f"target < 10 s for 1,000 models)")
        print(f"  pages per second      {pages / full:8.1f}")
        print(f"  CPU seconds           {cpu:8.2f}     (all processes; {cpu / jobs:.2f} s per core if none waits; "
              f"{full_phases.group(1).strip() if full_phases else ''})")
        print(f"  no-change rebuild     {again:8.2f} s   (target < 1 s; {phases.group(1).strip() if phases else ''})")
        print(f"  largest model page    {largest.stat().st_size / 1000:8.1f} kB  "
              f"({largest.relative_to(out).parent}; budget 60 kB)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per core)")
    args = parser.parse_args()
    bench_site(args.models, args.jobs)
