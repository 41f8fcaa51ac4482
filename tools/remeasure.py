#!/usr/bin/env python3
"""Rerun CPU-simulated rows in place, after a change to the harness itself (not to what a row runs).

    nice .venv/bin/python tools/remeasure.py data/measurements/cpu-sim-matrix.jsonl --where lora-ckpt
    .venv/bin/python tools/remeasure.py data/measurements/cpu-sim.jsonl --where all --check 5

Each selected row is run again from its own `config` (the config as run, shrunk) and `setup`, and its measured
peak, peak place, parameter counts, estimate and run time are replaced; everything else (the model, the config
changes, the note) stays. A row that had `live_at_peak` is rerun with --explain. `--check N` also reruns N rows
the selection leaves out, spread over the file, and fails unless their peaks are unchanged byte for byte: the
proof that the change touched only what it was meant to.

--where lora-ckpt: LoRA and QLoRA rows with gradient checkpointing, the rows in which peft makes the embedding's
output a leaf that requires grad (enable_input_require_grads), the one tensor the tracker's module hooks kept alive
past its step until generator/measure/tracker.py HookReleasingModTracker (FINDINGS.md F29).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WHERE = {
    "lora-ckpt": lambda s: s.get("method") in ("lora", "qlora") and bool(s.get("grad_ckpt")),
    "all": lambda s: True,
}


def rerun(row: dict) -> dict:
    from generator.measure.cli import _quiet
    from generator.measure.record import make_record
    from generator.measure.run import run_cpu
    from generator.measure.setup import Setup

    _quiet()
    setup = Setup.from_dict(row["setup"])
    result = run_cpu(row["config"], setup, explain=row.get("live_at_peak") is not None)
    fresh = make_record(row["model"], row["config"], None, row.get("config_changes"), setup, result, row.get("note"))
    out = dict(row)
    for key in ("measured", "peak", "params", "estimate", "estimate_note", "seconds", "live_at_peak", "versions"):
        if key in fresh:
            out[key] = fresh[key]
    return out


def main() -> int:
    from generator.measure.record import dumps, read_jsonl

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=Path)
    ap.add_argument("--where", choices=tuple(WHERE), required=True)
    ap.add_argument("--check", type=int, default=0, metavar="N", help="rerun N rows left out; fail if any moves")
    args = ap.parse_args()
    rows = read_jsonl(args.file)
    chosen = [i for i, r in enumerate(rows) if r.get("device", {}).get("kind") == "cpu-simulated"
              and WHERE[args.where](r.get("setup") or {})]
    taken = set(chosen)
    rest = [i for i, r in enumerate(rows) if i not in taken and r.get("device", {}).get("kind") == "cpu-simulated"]
    for i in rest[:: max(1, len(rest) // args.check)][: args.check] if args.check else []:
        again = rerun(rows[i])
        if again["measured"]["peak_bytes"] != rows[i]["measured"]["peak_bytes"]:
            print(f"row {i + 1} ({rows[i]['model']}) moved: {rows[i]['measured']['peak_bytes']} -> "
                  f"{again['measured']['peak_bytes']}", file=sys.stderr)
            return 1
        print(f"check row {i + 1}: unchanged", file=sys.stderr)
    moved = 0
    for n, i in enumerate(chosen, 1):
        old = rows[i]["measured"]["peak_bytes"]
        rows[i] = rerun(rows[i])
        new = rows[i]["measured"]["peak_bytes"]
        moved += new != old
        print(f"[{n}/{len(chosen)}] row {i + 1} {rows[i]['model']}: {old} -> {new} ({(new - old) / old * 100:+.2f}%)",
              file=sys.stderr)
    args.file.write_text("".join(dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(chosen)} rows rerun, {moved} moved; {args.file} written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
