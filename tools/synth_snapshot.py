"""A synthetic snapshot of N models for scale tests: real snapshot records replicated under new ids,
each with small changes to its sizes, and a mode that changes a fraction of them (the next night).

    python tools/synth_snapshot.py make   --models 100000 --out /tmp/snap-100k [--source snapshot] [--seed 0]
    python tools/synth_snapshot.py change --snapshot /tmp/snap-100k --fraction 0.01 [--seed 1]

`make`: model i is a copy of source record i mod S (S = the committed snapshot's readable records, in
id order) named `synth-<i // 1000>/<source name>-<i>`, with num_hidden_layers moved by -2..+2 (at
least 1), intermediate_size by -2..+2 steps of 64 and vocab_size by 0..255, in the config and in a
nested text_config when there is one; a new sha and downloads. Checkpoint counts are kept (the
page then shows a gap, which is what a real page with a wrong count shows). Records that are not
JSON objects are copied unchanged. Records are written without fsync (the snapshot writer's atomic
fsync'd writes cost more than the build they feed here); the index last, in the snapshot format.

`change`: the next night as a crawl makes it: every record gets a new downloads count (within 5%)
and a new downloads_source date, and round(fraction * N) records picked with the seed also get one
more layer and a new sha. The ids whose config changed are printed on stdout, one a line.

Nothing here is used by the site or the tests; it writes only under --out / --snapshot.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from generator.hub.snapshot import (DEFAULT_SNAPSHOT_DIR, RecordProblem, index_entry, iter_records,  # noqa: E402
                                    load_record, read_index, record_from_dict, record_path, record_to_dict,
                                    write_index)
from generator.records import ModelRecord  # noqa: E402

PER_ORG = 1000  # models per synthetic org folder


def _dumps(data: dict) -> str:
    # The snapshot's own serialisation (generator/hub/snapshot.py), so the files read back the same.
    return json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def _sha(*parts: str) -> str:
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()


def _set_layers(target: dict, key: str, layers: int) -> None:
    """Set the layer count and keep per-layer lists (layer_types, windows, ...) as long, repeating
    their pattern, so that the config stays valid."""
    old = target[key]
    for name, value in target.items():
        if isinstance(value, list) and len(value) == old and old > 0:
            target[name] = (value * (layers // old + 1))[:layers]
    target[key] = layers


def _nudge(cfg: dict, rng: random.Random) -> None:
    """Small size changes that keep a config valid: layers, MLP width, vocabulary."""
    for target in (cfg, cfg.get("text_config")):
        if not isinstance(target, dict):
            continue
        for key in ("num_hidden_layers", "n_layer", "num_layers"):
            if isinstance(target.get(key), int) and not isinstance(target[key], bool) and target[key] > 0:
                _set_layers(target, key, max(1, target[key] + rng.randint(-2, 2)))
                break
        for key in ("intermediate_size", "n_inner", "ffn_dim"):
            if isinstance(target.get(key), int) and not isinstance(target[key], bool) and target[key] > 256:
                target[key] += 64 * rng.randint(-2, 2)
                break
        if isinstance(target.get("vocab_size"), int) and not isinstance(target["vocab_size"], bool) \
                and target["vocab_size"] > 0:
            target["vocab_size"] += rng.randint(0, 255)


def _write(snapshot: Path, record: ModelRecord) -> dict:
    data = record_to_dict(record)
    record_from_dict(data)  # never write what the reader would refuse
    path = record_path(snapshot, record.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_dumps(data), encoding="utf-8")
    return index_entry(record)


def make(models: int, out: Path, source: Path, seed: int) -> float:
    started = time.perf_counter()
    sources = [r for r in iter_records(source) if not isinstance(r, RecordProblem)]
    if not sources:
        raise SystemExit(f"{source}: no readable records")
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} exists and is not empty; pick a new folder")
    rng = random.Random(seed)
    entries = []
    for i in range(models):
        base = sources[i % len(sources)]
        name = f"{base.id.split('/')[1][:80]}-{i}"
        repo_id = f"synth-{i // PER_ORG:04d}/{name}"
        text = base.config_json
        try:
            cfg = json.loads(text)
        except ValueError:
            cfg = None
        if isinstance(cfg, dict):
            _nudge(cfg, rng)
            text = json.dumps(cfg, indent=2, sort_keys=True)
        record = replace(base, id=repo_id, config_json=text, sha=_sha(repo_id, text),
                         downloads=rng.randint(0, 5_000_000), stale=False)
        entries.append(_write(out, record))
    write_index(out, entries)
    return time.perf_counter() - started


def change(snapshot: Path, fraction: float, seed: int) -> list[str]:
    """The next night: every model gets new downloads, a fraction a new sha and one more layer."""
    index = read_index(snapshot)
    count = round(fraction * len(index))
    rng = random.Random(seed)
    chosen = sorted(rng.sample([e["id"] for e in index], count))
    picked = set(chosen)
    entries = {e["id"]: e for e in index}
    for repo_id in entries:
        record = load_record(snapshot, repo_id)
        downloads = None if record.downloads is None else max(0, round(record.downloads * rng.uniform(0.95, 1.05)))
        record = replace(record, downloads=downloads, downloads_source="Hub API field downloads (rolling 30-day "
                                                                        f"count) on night {seed}")
        if repo_id not in picked:
            entries[repo_id] = _write(snapshot, record)
            continue
        try:
            cfg = json.loads(record.config_json)
        except ValueError:
            cfg = None
        text = record.config_json
        if isinstance(cfg, dict):
            for key in ("num_hidden_layers", "n_layer", "num_layers"):
                if isinstance(cfg.get(key), int) and not isinstance(cfg[key], bool) and cfg[key] > 0:
                    _set_layers(cfg, key, cfg[key] + 1)
                    break
            else:
                cfg["synthetic_revision"] = seed
            text = json.dumps(cfg, indent=2, sort_keys=True)
        entries[repo_id] = _write(snapshot, replace(record, config_json=text, sha=_sha(repo_id, text, str(seed))))
    write_index(snapshot, entries.values())
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make", help="write a synthetic snapshot of N models")
    m.add_argument("--models", type=int, required=True, metavar="N")
    m.add_argument("--out", type=Path, required=True, metavar="DIR")
    m.add_argument("--source", type=Path, default=DEFAULT_SNAPSHOT_DIR, metavar="DIR")
    m.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("change", help="change a fraction of a synthetic snapshot's models (new sha)")
    c.add_argument("--snapshot", type=Path, required=True, metavar="DIR")
    c.add_argument("--fraction", type=float, default=0.01)
    c.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.command == "make":
        seconds = make(args.models, args.out, args.source, args.seed)
        print(f"{args.models} models written to {args.out} in {seconds:.1f} s", file=sys.stderr)
    else:
        for repo_id in change(args.snapshot, args.fraction, args.seed):
            print(repo_id)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
