"""Benchmark (not a test): estimator time per model against transformers building it on the meta device.

Run with `make bench` (`--per-model` lists every model). Both sides get the same snapshot configs, warm
imports (each transformers model class is built once untimed first: its first build imports its
modeling file) and the median of repeats, timed in CPU time (time.process_time), so that other work on
a loaded machine does not count. Ours is the whole path the site and CLI run: config dict -> Report ->
its JSON twin (Report.to_dict()). Theirs is AutoModelForCausalLM.from_config under torch.device("meta")
from an already built config object. The target is >= 50x faster.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from generator.errors import TraceError  # noqa: E402
from generator.estimator import estimate  # noqa: E402
from generator.estimator.normalise import normalise  # noqa: E402
from generator.estimator.graph.nodes import build_graph  # noqa: E402
from generator.settings import load_settings  # noqa: E402
from tests.conftest import snapshot_configs  # noqa: E402

OURS_REPEAT = 21
THEIRS_REPEAT = 3


def _median_cpu_seconds(fn, repeat: int) -> float:
    gc.collect()  # garbage from the other side's run is not charged to this one
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def bench_estimator_vs_meta(per_model: bool = False) -> None:
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    settings = load_settings()
    rows = []  # (repo id, ours s, theirs s, ours without to_dict s, graph only s)
    for repo_id, cfg, checkpoint in snapshot_configs():
        model_type = cfg.get("model_type")
        if "auto_map" in cfg or "text_config" in cfg or model_type not in CONFIG_MAPPING:
            continue

        def report(cfg=cfg, repo_id=repo_id, checkpoint=checkpoint):
            return estimate(cfg, model_id=repo_id, assumptions=settings.assumptions, cards=settings.cards,
                            gpus=settings.gpus, checkpoint_params=checkpoint)

        def ours(report=report):
            report().to_dict()

        try:
            ours()
        except TraceError:
            continue
        config = CONFIG_MAPPING[model_type](**{k: v for k, v in cfg.items() if k != "model_type"})

        def meta(config=config):
            with torch.device("meta"):
                AutoModelForCausalLM.from_config(config)

        try:
            meta()  # warm: the first build of a class imports its modeling file
        except Exception:  # noqa: BLE001 - a class transformers cannot build is not a benchmark point
            continue
        def graph(cfg=cfg, repo_id=repo_id):  # the same work as the meta build: the layer graph and its count
            build_graph(normalise(cfg, repo_id))

        def summary(cfg=cfg, repo_id=repo_id, checkpoint=checkpoint):  # the terminal summary: no structure table
            estimate(cfg, model_id=repo_id, assumptions=settings.assumptions, cards=settings.cards,
                     gpus=settings.gpus, checkpoint_params=checkpoint, structure=False).to_dict()

        rows.append((repo_id, _median_cpu_seconds(ours, OURS_REPEAT), _median_cpu_seconds(meta, THEIRS_REPEAT),
                     _median_cpu_seconds(report, OURS_REPEAT), _median_cpu_seconds(graph, OURS_REPEAT),
                     _median_cpu_seconds(summary, OURS_REPEAT)))

    o = statistics.median(r[1] for r in rows)
    t = statistics.median(r[2] for r in rows)
    ratios = sorted((r[2] / r[1], r[0]) for r in rows)
    if per_model:
        print(f"{'model':60s} {'ours ms':>9s} {'meta ms':>9s} {'ratio':>7s}")
        for repo_id, ours_s, theirs_s, *_ in sorted(rows, key=lambda r: r[2] / r[1]):
            print(f"{repo_id:60s} {ours_s * 1e3:9.3f} {theirs_s * 1e3:9.2f} {theirs_s / ours_s:6.0f}x")
    print(f"estimator (config -> Report -> to_dict) vs transformers on meta, {len(rows)} snapshot models,")
    print(f"median CPU time (process_time) per model, {OURS_REPEAT} / {THEIRS_REPEAT} repeats each:")
    print(f"  estimator           {o * 1e3:8.3f} ms   (slowest model {max(r[1] for r in rows) * 1e3:.2f} ms)")
    print(f"  transformers (meta) {t * 1e3:8.2f} ms")
    print(f"  ratio of medians    {t / o:8.1f}x  (target >= 50x)")
    bare = statistics.median(r[3] for r in rows)
    print(f"  without to_dict     {bare * 1e3:8.3f} ms  ratio {t / bare:.1f}x  (config -> Report only)")
    no_table = statistics.median(r[5] for r in rows)
    print(f"  without structure   {no_table * 1e3:8.3f} ms  ratio {t / no_table:.1f}x  (Report + JSON without the "
          "structure table: the terminal summary)")
    graph_only = statistics.median(r[4] for r in rows)
    print(f"  graph only          {graph_only * 1e3:8.3f} ms  ratio {t / graph_only:.1f}x  (config -> layer graph and "
          "parameter count: what the meta build gives)")
    print(f"  per-model ratio     median {statistics.median(r for r, _ in ratios):.1f}x, "
          f"lowest {ratios[0][0]:.1f}x ({ratios[0][1]})")


if __name__ == "__main__":
    bench_estimator_vs_meta(per_model="--per-model" in sys.argv)
