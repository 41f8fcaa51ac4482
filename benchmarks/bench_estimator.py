"""Benchmark (not a test): estimator time per model against transformers building it on the meta device.

Run with `make bench`. Prints per-model medians and the ratio; the target is >= 50x faster.
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from generator.errors import TraceError  # noqa: E402
from generator.estimator import estimate  # noqa: E402
from generator.settings import load_settings  # noqa: E402
from tests.conftest import snapshot_configs  # noqa: E402


def _median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_estimator_vs_meta(repeat: int = 5) -> None:
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    settings = load_settings()
    ours, theirs = [], []
    for repo_id, cfg, checkpoint in snapshot_configs():
        model_type = cfg.get("model_type")
        if "auto_map" in cfg or "text_config" in cfg or model_type not in CONFIG_MAPPING:
            continue
        try:
            estimate(cfg, model_id=repo_id, assumptions=settings.assumptions, cards=settings.cards, gpus=settings.gpus)
        except TraceError:
            continue
        config = CONFIG_MAPPING[model_type](**{k: v for k, v in cfg.items() if k != "model_type"})

        def meta():
            with torch.device("meta"):
                AutoModelForCausalLM.from_config(config)

        try:
            theirs.append(_median_seconds(meta, 1))
        except Exception:  # noqa: BLE001 - a class transformers cannot build is not a benchmark point
            continue
        ours.append(_median_seconds(lambda: estimate(cfg, model_id=repo_id, assumptions=settings.assumptions,
                                                     cards=settings.cards, gpus=settings.gpus,
                                                     checkpoint_params=checkpoint), repeat))
    o, t = statistics.median(ours), statistics.median(theirs)
    print(f"estimator vs transformers on meta ({len(ours)} snapshot models, median per model):")
    print(f"  estimator           {o * 1e3:8.2f} ms")
    print(f"  transformers (meta) {t * 1e3:8.2f} ms")
    print(f"  ratio               {t / o:8.1f}x  (target >= 50x)")


if __name__ == "__main__":
    bench_estimator_vs_meta()
