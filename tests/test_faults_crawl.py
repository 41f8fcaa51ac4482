"""A crawl killed at 20 random points always leaves a snapshot that reads and builds, and loses nothing.

The crawl runs in a subprocess against the fake Hub on 127.0.0.1. An audit hook in that process counts
the operations that change the disk (files opened for writing, renames, removals, folders made) and
sends itself SIGKILL just before the N-th one, N drawn (seeded) across a whole uninterrupted crawl,
so the kills land everywhere: between a temp file and its rename, inside the HF cache, between the
records and the index, while stale models are marked. After each kill:

- the snapshot reads without a RecordProblem and `run_build` on it succeeds (exit 0, not strict);
- nothing is lost: the index and every record file are either exactly as before the crawl or
  exactly as an uninterrupted crawl writes them, never a mix within one file;
- a crawl run again finishes the job: the snapshot is then byte-identical to the uninterrupted one.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from rich.console import Console

from fakehub import FakeHub, FakeModel, models_from_snapshot
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, RecordProblem, iter_records
from generator.settings import load_settings
from generator.site.build import run_build
from hubkit import IDS, crawl, crawl_models, hub_environment, seed_snapshot, snapshot_files

REPO = Path(__file__).resolve().parents[1]
RUNS = int(os.environ.get("FAULT_RUNS", "20"))
SEED = 20261108
PARALLEL = 4

# Prepended to a subprocess's code: an audit hook that SIGKILLs the process just before its N-th
# disk-changing operation (N = $KILL_AT; 0 = never) and, at a normal exit, prints how many there were
# (and logs each one to $EVENT_LOG when set). Only the main process counts: forked workers inherit hooks.
KILLER = r'''
import atexit, os, signal, sys
_N, _MAIN, _COUNT, _LOG = int(os.environ["KILL_AT"]), os.getpid(), [0], []
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_EVENTS = {"os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.link", "os.symlink", "os.truncate",
           "shutil.rmtree", "shutil.copyfile", "shutil.copytree", "shutil.move", "tempfile.mkstemp",
           "tempfile.mkdtemp", "os.chmod", "subprocess.Popen"}
def _hook(event, args):
    if os.getpid() != _MAIN:
        return
    if event == "open":
        mode, flags = args[1], args[2]
        if not ((isinstance(mode, str) and any(c in mode for c in "wax+"))
                or (isinstance(flags, int) and flags & _WRITE)):
            return
    elif event not in _EVENTS:
        return
    _COUNT[0] += 1
    if _N and _COUNT[0] >= _N:
        os.kill(_MAIN, signal.SIGKILL)
    if "EVENT_LOG" in os.environ:
        _LOG.append(f"{_COUNT[0]}\t{event}\t{args[0] if args else ''}")
def _done():
    count = _COUNT[0]
    if "EVENT_LOG" in os.environ:
        with open(os.environ["EVENT_LOG"], "w", encoding="utf-8") as f:
            f.write("\n".join(_LOG) + "\n")
    os.write(2, f"\nDISK-EVENTS {count}\n".encode())
atexit.register(_done)
sys.addaudithook(_hook)
'''

CRAWL = KILLER + r'''
from pathlib import Path
from rich.console import Console
from generator.hub.crawl import run_crawl
sys.exit(run_crawl(limit=50, pipeline_tags=[None], snapshot_dir=Path(sys.argv[1]), console=Console(stderr=True)))
'''


@pytest.fixture
def sleeps(monkeypatch, tmp_path):
    return hub_environment(monkeypatch, tmp_path)


def _others() -> list[str]:
    """Committed snapshot models that hubkit's crawl models do not use."""
    return sorted(r.id for r in iter_records(DEFAULT_SNAPSHOT_DIR) if not isinstance(r, RecordProblem)
                  and r.id not in IDS)


def _models() -> list[FakeModel]:
    """Every sha moved (all re-downloaded), two new models, three faults that need no retry sleeps."""
    models = crawl_models(salt="moved") + models_from_snapshot(DEFAULT_SNAPSHOT_DIR, _others()[1:3])
    for model, fault in zip(sorted(models, key=lambda m: m.id)[1::3], ("gated", "malformed", "missing")):
        model.fault = fault
    return models


def _seed(snap: Path) -> None:
    """The previous snapshot: six of the listed models at older shas, plus one that drops out (stale)."""
    seed_snapshot(snap, IDS[:6] + _others()[:1])


def _run(snap: Path, hub: FakeHub, hf_home: Path, kill_at: int) -> tuple[int, int]:
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(hf_home), "PYTHONPATH": str(REPO),
           "KILL_AT": str(kill_at), "PYTHONDONTWRITEBYTECODE": "1", "NO_PROXY": "127.0.0.1,localhost", "HF_HUB_DISABLE_TELEMETRY": "1"}
    done = subprocess.run([sys.executable, "-c", CRAWL, str(snap)], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    events = [int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("DISK-EVENTS")]
    if done.returncode not in (0, -9):
        pytest.fail(f"crawl exited {done.returncode}: {done.stderr[-3000:]}")
    return done.returncode, (events[-1] if events else -1)


def _digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()


def _published(snap: Path) -> dict[str, bytes]:
    """The snapshot files a reader can see (temp files of a killed writer are never read)."""
    return {k: v for k, v in snapshot_files(snap).items() if not Path(k).name.startswith(".")}


def test_a_crawl_killed_at_random_points_leaves_a_snapshot_that_builds(sleeps, monkeypatch, tmp_path):
    rng = random.Random(SEED)
    seed = tmp_path / "seed"
    _seed(seed)
    before = _published(seed)
    settings = load_settings()
    built: dict[str, int] = {}  # snapshot digest -> build exit code (identical states are built once)
    outcomes = {"killed": 0, "finished": 0, "index kept": 0, "index new": 0}
    with FakeHub(_models(), page_size=4) as hub:
        reference = tmp_path / "reference"
        shutil.copytree(seed, reference)
        code, total = _run(reference, hub, tmp_path / "hf-reference", kill_at=0)
        assert code == 0 and total > 20, total
        after = _published(reference)
        assert after["index.json"] != before["index.json"]

        # Random points, plus the two just before the index's rename (the crawl's last disk events).
        points = sorted(rng.randint(1, total) for _ in range(RUNS - 2)) + [total - 1, total]
        snaps = [tmp_path / f"run{run}" for run in range(RUNS)]
        for snap in snaps:
            shutil.copytree(seed, snap)
        with ThreadPoolExecutor(PARALLEL) as pool:  # the crawls mostly wait on sockets and fsync
            codes = list(pool.map(lambda run: _run(snaps[run], hub, tmp_path / f"hf-{run}", points[run])[0],
                                  range(RUNS)))
        for run, (point, code, snap) in enumerate(zip(points, codes, snaps)):
            outcomes["killed" if code == -9 else "finished"] += 1
            problems = [r for r in iter_records(snap) if isinstance(r, RecordProblem)]
            assert problems == [], f"kill at disk event {point}/{total}: {problems}"
            state = _published(snap)
            for name, data in state.items():  # each file whole: the old one or the new one
                assert data in (before.get(name), after.get(name)), f"kill at {point}/{total}: {name} is mixed"
            assert set(before) <= set(state), f"kill at {point}/{total}: a record was lost"
            outcomes["index kept" if state["index.json"] == before["index.json"] else "index new"] += 1

            key = _digest(state)
            if key not in built:
                console = io.StringIO()
                built[key] = run_build(snapshot_dir=snap, out_dir=tmp_path / f"site{run}" / "public", strict=False,
                                       settings=settings, console=Console(file=console, width=200))
                assert built[key] == 0, f"kill at {point}/{total}: build failed\n{console.getvalue()[-3000:]}"
                shutil.rmtree(tmp_path / f"site{run}")

            monkeypatch.setenv("HF_HOME", str(tmp_path / f"hf-{run}"))
            code, out = crawl(monkeypatch, hub, snap)  # the next night's crawl finishes the job
            assert code == 0, out
            assert _published(snap) == after, f"kill at {point}/{total}: the next crawl did not converge"
            shutil.rmtree(snap)
    print(f"\n{RUNS} crawls killed at disk events {points} of {total}; {outcomes}; "
          f"{len(built)} distinct snapshots built")
    assert outcomes["killed"] >= RUNS - 2  # the kill points lie inside the crawl
    assert codes[-1] == -9 and outcomes["index kept"] == RUNS  # a kill never publishes a half index
