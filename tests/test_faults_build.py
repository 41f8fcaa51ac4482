"""A build killed at 20 random points leaves the previous public/ intact; two builds at once do not mix.

The build runs as `neurarch-trace build` in a subprocess whose audit hook (test_faults_crawl.KILLER)
sends it SIGKILL just before its N-th disk-changing operation: N drawn (seeded) across a whole build,
plus the four moments that matter most (before the search indexer starts, before each rename of the
swap, and before the old tree is deleted). After each kill:

- public/ is byte-identical to the previous site, or to the complete new one; the single other state
  allowed is a kill between the swap's two renames, where public/ is briefly absent and the previous
  tree sits whole beside it, put back by the next build (a rename of a folder over another cannot be
  done in one step without renameat2(RENAME_EXCHANGE));
- no process of the killed build lingers;
- the next build succeeds, leaves exactly the new site, and nothing else beside it;
- nothing is ever left in TMPDIR (the search documents are staged beside public/, where recovery cleans).
"""

from __future__ import annotations

import inspect
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, index_entry, iter_records, write_index, write_record
from generator.records import ModelRecord
from generator.settings import load_settings
from generator.site import build as build_mod
from generator.site.build import run_build
from generator.site.lock import BuildLocked, build_lock, lock_path
from test_faults_crawl import KILLER

REPO = Path(__file__).resolve().parents[1]
RUNS = int(os.environ.get("FAULT_RUNS", "20"))
SEED = 20261109
# Until run_build takes the lock itself, these tests take it around the call (one process holds a
# lock once, so the shim steps aside as soon as the build is wired).
WIRED = "build_lock" in inspect.getsource(build_mod.run_build)

BUILD = KILLER + r'''
from generator.cli import main
sys.exit(main(["build", "--snapshot", sys.argv[1], "--out", sys.argv[2], *sys.argv[3:]]))
'''

LOCKED_BUILD = r'''
import io, sys, time
from pathlib import Path
from rich.console import Console
from generator.settings import load_settings
from generator.site import staging
from generator.site.build import run_build
from generator.site.lock import build_lock
if len(sys.argv) > 4:  # hold the finished site until the test says so: the build is still running meanwhile
    release, swap_in = Path(sys.argv[4]), staging.swap_in
    def held_swap_in(*args, **kwargs):
        while not release.exists():
            time.sleep(0.01)
        return swap_in(*args, **kwargs)
    staging.swap_in = held_swap_in
def build():
    return run_build(snapshot_dir=Path(sys.argv[1]), out_dir=Path(sys.argv[2]), strict=False,
                     settings=load_settings(), console=Console(file=io.StringIO()))
if sys.argv[3] == "wired":
    sys.exit(build())
with build_lock(Path(sys.argv[2])):
    sys.exit(build())
'''


def locked_build(snapshot: Path, out: Path, **options: object) -> tuple[int, str]:
    console = io.StringIO()
    kwargs = dict(snapshot_dir=snapshot, out_dir=out, strict=False, settings=load_settings(),
                  console=Console(file=console, width=200), **options)
    if WIRED:
        return run_build(**kwargs), console.getvalue()
    with build_lock(out):
        return run_build(**kwargs), console.getvalue()


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _differences(a: dict[str, bytes], b: dict[str, bytes]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))[:8]


def _snapshots(root: Path) -> tuple[Path, Path]:
    """A: 16 committed records (an unsupported one and a config error among them). B, the next night:
    one model gone, one new, two with new downloads, one with a changed config."""
    records = [r for r in iter_records(DEFAULT_SNAPSHOT_DIR) if isinstance(r, ModelRecord)]
    chosen = records[::10][:15] + [next(r for r in records if r.id == "meta-llama/Llama-3.2-11B-Vision")]
    newcomer = records[5]
    changed = dict(json.loads(chosen[3].config_json))
    changed["num_hidden_layers"] = int(changed.get("num_hidden_layers") or 2) + 1
    night2 = [replace(chosen[1], downloads=(chosen[1].downloads or 0) + 1234),
              replace(chosen[2], downloads=(chosen[2].downloads or 0) + 99),
              replace(chosen[3], config_json=json.dumps(changed, indent=2))] + chosen[4:-1] + [newcomer, chosen[-1]]
    out = []
    for name, recs in (("A", chosen), ("B", night2)):
        snap = root / f"snapshot-{name}"
        for record in recs:
            write_record(snap, record)
        write_index(snap, [index_entry(r) for r in recs])
        out.append(snap)
    return out[0], out[1]


def _kill_build(snapshot: Path, out: Path, kill_at: int, event_log: Path | None = None,
                args: tuple[str, ...] = ()) -> tuple[int, int, int]:
    """Run the CLI build, killed before disk event kill_at; returns (exit code, events, lingering procs).
    Its temp dir is a `tmp` folder beside out (what a killed build leaves there is not in /tmp)."""
    (out.parent / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "KILL_AT": str(kill_at), "PYTHONDONTWRITEBYTECODE": "1",
           "TMPDIR": str(out.parent / "tmp")}
    if event_log is not None:
        env["EVENT_LOG"] = str(event_log)
    proc = subprocess.Popen([sys.executable, "-c", BUILD, str(snapshot), str(out), *args], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    lingering = 0
    deadline = time.monotonic() + 5
    while True:  # workers of a killed build must not outlive it (they would hold memory, or a lock)
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        if time.monotonic() > deadline:
            lingering = 1
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    if proc.returncode not in (0, -9):
        pytest.fail(f"build exited {proc.returncode}: {err[-3000:]}")
    events = [int(line.split()[1]) for line in err.splitlines() if line.startswith("DISK-EVENTS")]
    return proc.returncode, (events[-1] if events else -1), lingering


def _critical_points(log: Path, out: Path) -> list[int]:
    """Disk events just before the search indexer starts, before each rename of the swap, and just
    after the swap (where the old tree's deletion starts, in this process or a detached one)."""
    rows = [line.split("\t") for line in log.read_text(encoding="utf-8").splitlines() if line]
    renames = [int(n) for n, event, arg in rows if event == "os.rename" and Path(arg).parent == out.parent]
    assert len(renames) == 2, rows[-10:]
    pagefind = [int(n) for n, event, _ in rows if event == "subprocess.Popen" and int(n) < renames[0]]
    after = [int(n) for n, _, _ in rows if int(n) > renames[1]]
    return pagefind[:1] + renames + after[:1]


def _settled(folder: Path, expected: list[str], timeout: float = 10) -> list[str]:
    """The names in folder once they equal expected, or after timeout (a detached deletion of the
    replaced site may still be running when a build returns)."""
    deadline = time.monotonic() + timeout
    while sorted(p.name for p in folder.iterdir()) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return sorted(p.name for p in folder.iterdir())


def test_a_build_killed_at_random_points_leaves_the_previous_site(tmp_path):
    rng = random.Random(SEED)
    snap_a, snap_b = _snapshots(tmp_path)
    previous = tmp_path / "previous" / "public"
    assert locked_build(snap_a, previous)[0] == 0
    before = _tree(previous)

    reference = tmp_path / "reference" / "public"  # the uninterrupted build of B over the previous site
    shutil.copytree(previous, reference)
    code, total, lingering = _kill_build(snap_b, reference, 0, event_log=tmp_path / "events.log")
    assert code == 0 and total > 50 and not lingering
    shutil.rmtree(reference.parent / "tmp")
    after = _tree(reference)
    assert after != before and not (reference.parent / lock_path(reference).name).exists()
    again = tmp_path / "again" / "public"  # what the next build makes of a finished one
    shutil.copytree(reference, again)
    assert locked_build(snap_b, again)[0] == 0
    after_again = _tree(again)

    points = _critical_points(tmp_path / "events.log", reference)
    points += sorted(rng.randint(1, total) for _ in range(RUNS - len(points)))
    outcomes: dict[str, int] = {}
    temp_left = []  # what a killed build left in its TMPDIR: nothing may be there (Pagefind's scratch is beside public/)
    for run, point in enumerate(points):
        out = tmp_path / f"run{run}" / "public"
        shutil.copytree(previous, out)
        code, _, lingering = _kill_build(snap_b, out, point)
        assert code == -9 and not lingering, f"kill at disk event {point}/{total}: code {code}, lingering {lingering}"
        temp_left += [f"{point}: {p.name}" for p in (out.parent / "tmp").iterdir()]
        shutil.rmtree(out.parent / "tmp")
        olds = sorted(out.parent.glob(f".{out.name}-old-*"))
        if out.exists():
            state = _tree(out)
            assert state in (before, after), (f"kill at {point}/{total}: public/ is neither the old nor the new site: "
                                              f"{_differences(state, before)} differ from the old, "
                                              f"{_differences(state, after)} from the new")
            outcome = "previous site" if state == before else "new site"
        else:
            assert len(olds) == 1 and _tree(olds[0]) == before, f"kill at {point}/{total}: the previous site is lost"
            outcome = "between the swap's renames"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

        code, output = locked_build(snap_b, out)  # the next build: recovers, then builds
        assert code == 0, output
        assert _tree(out) == (after_again if outcome == "new site" else after), f"kill at {point}/{total}"
        assert _settled(out.parent, ["public"]) == ["public"], f"kill at {point}/{total}: leftovers"
        shutil.rmtree(out.parent)
    print(f"\n{RUNS} builds killed at disk events {points} of {total}: {outcomes}; "
          f"{len(temp_left)} file(s) left in TMPDIR")
    assert set(outcomes) == {"previous site", "new site", "between the swap's renames"}
    assert temp_left == [], f"a killed build left temporary files outside its staging area: {temp_left}"


def test_a_sharded_build_killed_between_its_pagefind_runs_leaves_the_previous_site(tmp_path):
    """The search index in 3 shards (6 models each), one Pagefind run each: killed as each run starts
    and just after each (its documents being deleted), the previous site stays whole, nothing is left
    outside the staging area, and the next build recovers and makes the uninterrupted build's site."""
    snap_a, snap_b = _snapshots(tmp_path)
    shards = ("--search-shard-size", "6")
    previous = tmp_path / "previous" / "public"
    assert locked_build(snap_a, previous, search_shard_size=6)[0] == 0
    before = _tree(previous)
    assert {"pagefind/shards.json", "pagefind-1/pagefind.js", "pagefind-2/pagefind.js"} <= set(before)
    reference = tmp_path / "reference" / "public"
    shutil.copytree(previous, reference)
    code, total, _ = _kill_build(snap_b, reference, 0, event_log=tmp_path / "events.log", args=shards)
    assert code == 0
    shutil.rmtree(reference.parent / "tmp")
    after = _tree(reference)
    rows = [line.split("\t") for line in (tmp_path / "events.log").read_text(encoding="utf-8").splitlines() if line]
    runs = [int(n) for n, event, arg in rows if event == "subprocess.Popen" and "pagefind" in arg.lower()]
    assert len(runs) >= 2, rows[-20:]  # night B re-indexes every shard here (3 runs), at least two
    print(f"\nPagefind runs at disk events {runs} of {total}")
    for point in sorted({p for n in runs for p in (n, n + 1)}):
        out = tmp_path / f"kill{point}" / "public"
        shutil.copytree(previous, out)
        code, _, lingering = _kill_build(snap_b, out, point, args=shards)
        assert code == -9 and not lingering, f"kill at disk event {point}/{total}"
        assert list((out.parent / "tmp").iterdir()) == [], f"kill at {point}: files left in TMPDIR"
        shutil.rmtree(out.parent / "tmp")
        assert _tree(out) == before, f"kill at {point}/{total}: the previous site changed"
        assert any(p.name.startswith(".public-build-") for p in out.parent.iterdir())  # staged beside public/
        code, output = locked_build(snap_b, out, search_shard_size=6)
        assert code == 0, output
        assert _tree(out) == after, f"kill at {point}/{total}"
        assert _settled(out.parent, ["public"]) == ["public"], f"kill at {point}/{total}: leftovers"
        shutil.rmtree(out.parent)


def _wait_for(predicate, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            pytest.fail(f"the first build ended before {what}: {proc.stderr.read()[-2000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_second_build_at_the_same_time_refuses_and_the_first_is_whole(tmp_path):
    snap_a, snap_b = _snapshots(tmp_path)
    out = tmp_path / "site" / "public"
    assert locked_build(snap_a, out)[0] == 0
    reference = tmp_path / "reference" / "public"
    shutil.copytree(out, reference)
    assert locked_build(snap_b, reference)[0] == 0

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # The first build holds its finished site until `release` exists, so that the second attempts (the library call
    # and the command, which takes a second or more to start on a loaded machine) meet it running, whatever the load.
    release = tmp_path / "release"
    first = subprocess.Popen([sys.executable, "-c", LOCKED_BUILD, str(snap_b), str(out), "wired" if WIRED else "shim",
                              str(release)], env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    try:
        _wait_for(lambda: any(out.parent.glob(f".{out.name}-build-*")), first, "it started writing")
        with pytest.raises(BuildLocked, match=r"another build of .*public is running: .*\.public\.lock is locked"):
            locked_build(snap_a, out)
        if WIRED:  # the command line refuses the same way: one line, exit 1, no traceback
            cli = subprocess.run([sys.executable, "-m", "generator.cli", "build", "--snapshot", str(snap_a),
                                  "--out", str(out)], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
            assert cli.returncode == 1 and ".public.lock is locked" in cli.stderr and "Traceback" not in cli.stderr
        release.touch()
        assert first.wait(timeout=120) == 0, first.stderr.read()[-2000:]
    finally:
        first.kill()
        first.wait()
        first.stderr.close()
    assert _tree(out) == _tree(reference)  # the first build's site, whole, despite the second's attempts
    assert _settled(out.parent, ["public"]) == ["public"]


def test_the_lock_of_a_killed_build_is_not_held(tmp_path):
    out = tmp_path / "public"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from generator.site.lock import build_lock\n"
                               "with build_lock(Path(sys.argv[1])):\n print('locked', flush=True); time.sleep(60)",
                               str(out)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(BuildLocked, match=f"held by process {holder.pid}"):
            with build_lock(out):
                pass
    finally:
        holder.kill()  # SIGKILL: the lock file stays, the lock does not
        holder.wait()
        holder.stdout.close()
    assert lock_path(out).exists()
    with build_lock(out) as path:
        assert path == lock_path(out)
        with pytest.raises(BuildLocked):  # one process, one holder: a second block refuses too
            with build_lock(out):
                pass
    assert not lock_path(out).exists()
