"""Scale benchmark (not a test): the site build on synthetic snapshots of 1k / 10k / 100k models.

    python benchmarks/bench_scale.py [SIZES ...] [--work DIR] [--change 0.01] [--shard-size N] [--keep]
    make bench-scale                      # 1000 10000 100000
    make bench-scale SIZES="1000 10000"   # a quicker run

For each size N: tools/synth_snapshot.py writes a snapshot of N models (real snapshot records under new
ids, sizes nudged); `neurarch-trace build` builds it from scratch into an empty folder (the full,
multiprocess build); then --change of the models get a new sha and config (the next night), and the
same command builds again over the previous site (the incremental build: only changed models are
rendered, every index page is rewritten). Each build is a separate process, timed by wall clock.

Reported per build: wall seconds; CPU seconds of the build and all its processes (on a shared
machine the steadier measure of linearity; on an idle 2-core one, wall is about CPU / 2); models per
second; peak memory of the whole process tree (PSS, so pages shared by forked workers count once;
sampled every 0.2 s from /proc, Linux only); the largest single process's peak RSS (VmHWM) and which
process it was; the peak RSS of the main build process, of the largest worker and of the largest
Pagefind run (one per search shard, one after another: its peak follows the shard size, --shard-size,
default generator.site.search.SHARD_SIZE, not the site) and the number of shards; the output's
size and file count; and the models rendered / copied, as the build's
own summary says. Linear time: seconds per 1,000 models do not grow with N. Flat memory: the peak
does not grow with N.

Results go to stdout as a table and to <work>/bench-scale.json. Everything is written under --work
(default: a folder in the system temp dir), removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SYNTH = ROOT / "tools" / "synth_snapshot.py"
DEFAULT_SIZES = (1000, 10000, 100000)


def _children_of(root: int) -> list[int]:
    """root and every descendant, from /proc/*/stat (ppid is field 4)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        parents[int(entry)] = int(fields[1])
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sorted(tree)


def _field_kib(path: str, name: str) -> int:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith(name):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            name = handle.read().strip()
        return "build" if pid == os.getpid() or name.startswith("python") else name
    except OSError:
        return "?"


class TreeMemory(threading.Thread):
    """Samples the PSS of a process tree until stopped; .peak is the largest sum seen (bytes)."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.every, self.peak, self.peak_procs, self.max_rss, self.max_rss_name = pid, every, 0, 0, 0, ""
        self.by_role: dict[str, int] = {}  # "build" (the main process), "worker", "pagefind", ...: largest VmHWM
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            pids = _children_of(self.pid)
            total = sum(_field_kib(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids) * 1024
            if total > self.peak:
                self.peak, self.peak_procs = total, len(pids)
            # VmHWM: each process's own peak RSS so far (a process that lived between samples is missed).
            for p in pids:
                rss = _field_kib(f"/proc/{p}/status", "VmHWM:") * 1024
                name = _comm(p)
                role = "main" if p == self.pid else ("worker" if name == "build" else name)
                self.by_role[role] = max(self.by_role.get(role, 0), rss)
                if rss > self.max_rss:
                    self.max_rss, self.max_rss_name = rss, name
            self._halt.wait(self.every)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def _tree_size(root: Path) -> tuple[int, int]:
    """Bytes (apparent sizes; hard links counted once) and files under root."""
    seen: set[tuple[int, int]] = set()
    total = files = 0
    for folder, _, names in os.walk(root):
        for name in names:
            st = os.lstat(os.path.join(folder, name))
            files += 1
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total, files


def _summary_count(text: str, label: str) -> int | None:
    found = re.search(rf"{re.escape(label)}\s*│\s*([\d,]+)", text)
    return int(found.group(1).replace(",", "")) if found else None


def build(snapshot: Path, out: Path, log: Path, shard_size: int | None = None) -> dict:
    """One `neurarch-trace build` in its own process; wall time, memory, output, the summary's counts."""
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with open(log, "w", encoding="utf-8") as err:
        shards = [] if shard_size is None else ["--search-shard-size", str(shard_size)]
        proc = subprocess.Popen([sys.executable, "-m", "generator.cli", "build", "--snapshot", str(snapshot),
                                 "--out", str(out), *shards], cwd=ROOT, env=env, stdout=err, stderr=subprocess.STDOUT)
        memory = TreeMemory(proc.pid)
        memory.start()
        code = proc.wait()
        memory.stop()
    seconds = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the build, its workers and Pagefind
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    text = log.read_text(encoding="utf-8", errors="replace")
    if code != 0:
        raise SystemExit(f"build failed ({code}); see {log}:\n{text[-3000:]}")
    size, files = _tree_size(out)
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2), "peak_tree_pss_bytes": memory.peak, "processes": memory.peak_procs,
            "max_process_rss_bytes": memory.max_rss or None, "max_process": memory.max_rss_name,
            "peak_rss_by_process_bytes": dict(sorted(memory.by_role.items())),
            "output_bytes": size, "output_files": files,
            "rendered": _summary_count(text, "models rendered"),
            "copied": _summary_count(text, "models unchanged (copied)"),
            "pages": _summary_count(text, "pages written"),
            "search_shards": sum(1 for p in out.iterdir() if p.is_dir() and re.fullmatch(r"pagefind(-\d+)?", p.name)),
            "search": next((line.strip() for line in text.splitlines() if line.startswith("search index")), "")}


def run_size(models: int, work: Path, change: float, shard_size: int | None = None) -> dict:
    folder = work / f"n{models}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    snapshot, out = folder / "snapshot", folder / "public"
    started = time.perf_counter()
    subprocess.run([sys.executable, str(SYNTH), "make", "--models", str(models), "--out", str(snapshot)],
                   check=True, cwd=ROOT, stderr=subprocess.DEVNULL)
    synth_seconds = time.perf_counter() - started
    print(f"[{models}] snapshot written in {synth_seconds:.0f} s; full build ...", file=sys.stderr, flush=True)
    full = build(snapshot, out, folder / "full.log", shard_size)
    print(f"[{models}] full build {full['seconds']:.0f} s; changing {change:.0%} ...", file=sys.stderr, flush=True)
    changed = subprocess.run([sys.executable, str(SYNTH), "change", "--snapshot", str(snapshot),
                              "--fraction", str(change)], check=True, cwd=ROOT, capture_output=True, text=True)
    incremental = build(snapshot, out, folder / "incremental.log", shard_size)
    incremental["changed"] = len(changed.stdout.split())
    print(f"[{models}] incremental build {incremental['seconds']:.0f} s", file=sys.stderr, flush=True)
    return {"models": models, "synth_seconds": round(synth_seconds, 1), "full": full, "incremental": incremental}


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:,.0f} MB"


def table(results: list[dict]) -> str:
    head = ("models", "build", "wall s", "s / 1k models", "CPU s / 1k models", "models/s", "peak PSS (tree)",
            "max RSS (1 proc)", "RSS main", "RSS worker", "RSS pagefind", "shards",
            "output", "files", "rendered", "copied")
    rows = []
    for r in results:
        for kind in ("full", "incremental"):
            b = r[kind]
            label = kind if kind == "full" else f"incremental ({b.get('changed', 0):,} changed)"
            rows.append((f"{r['models']:,}", label, f"{b['seconds']:,.1f}", f"{1000 * b['seconds'] / r['models']:.2f}",
                         f"{1000 * b['cpu_seconds'] / r['models']:.2f}",
                         f"{r['models'] / b['seconds']:,.0f}", _mb(b["peak_tree_pss_bytes"]),
                         f"{_mb(b['max_process_rss_bytes'])} ({b.get('max_process') or '?'})",
                         *(_mb(b.get("peak_rss_by_process_bytes", {}).get(k)) for k in ("main", "worker", "pagefind")),
                         str(b.get("search_shards", "-")),
                         _mb(b["output_bytes"]), f"{b['output_files']:,}",
                         f"{b['rendered']:,}" if b["rendered"] is not None else "-",
                         f"{b['copied']:,}" if b["copied"] is not None else "-"))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(str(c).rjust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, default=list(DEFAULT_SIZES), metavar="N")
    parser.add_argument("--work", type=Path, help="folder for snapshots and sites (default: a temp folder)")
    parser.add_argument("--change", type=float, default=0.01, help="fraction changed before the incremental build")
    parser.add_argument("--shard-size", type=int, metavar="N",
                        help="models per search shard (the build's --search-shard-size; default: the build's)")
    parser.add_argument("--keep", action="store_true", help="keep the snapshots and sites")
    args = parser.parse_args(argv)
    if not Path("/proc/self/smaps_rollup").exists():
        raise SystemExit("bench-scale measures memory from /proc: run it on Linux")
    work = args.work or Path(tempfile.mkdtemp(prefix="neurarch-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for models in args.sizes:
            results.append(run_size(models, work, args.change, args.shard_size))
            (work / "bench-scale.json").write_text(json.dumps({"cores": os.cpu_count(), "shard_size": args.shard_size,
                                                               "results": results},
                                                              indent=1), encoding="utf-8")
            if not args.keep:
                shutil.rmtree(work / f"n{models}", ignore_errors=True)
    finally:
        print(table(results))
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)
            print(f"\n{os.cpu_count()} cores (--work DIR keeps the results as JSON)")
        else:
            print(f"\n{os.cpu_count()} cores; results in {work / 'bench-scale.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
