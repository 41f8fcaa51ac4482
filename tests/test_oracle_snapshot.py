"""Every committed snapshot config: estimated, its graph equal to transformers' own count, and its
checkpoint count matched or explained.

- Every record is estimated (no refusal) and never crashes.
- Where transformers ships the class named in `architectures` (and the repo has no custom code), our
  graph equals that class built on the meta device.
- Against the checkpoint (safetensors element totals): equal, or a finding naming the cause (buffers,
  untied copies, MTP layers, FP8 scales, packed 4-bit, towers not counted...). The few totals no known
  cause explains are pinned below with what we know.
"""

from __future__ import annotations

import warnings

import pytest

from generator.errors import TraceError
from generator.estimator import estimate
from generator.estimator.config import normalise
from generator.estimator.graph import build_graph
from tests.conftest import snapshot_configs

RECORDS = snapshot_configs()

# Checkpoint totals below what transformers builds from the same config (graph == meta-device count),
# or above it by a size no known cause matches. Kept visible: the page says "unexplained gap".
UNEXPLAINED = {
    # 145 x hidden (2048) fewer scalars than Qwen2MoeForCausalLM builds: a row count the config does not show
    "Qwen/Qwen1.5-MoE-A2.7B-Chat": -296_960,
    # 103 x hidden (2048) fewer than Qwen3MoeForCausalLM builds
    "Qwen/Qwen3-30B-A3B-Instruct-2507": -210_944,
    # 0.27% fewer than DeepseekV2ForCausalLM builds (no tensor of that size in the layout)
    "deepseek-ai/DeepSeek-V2-Lite-Chat": -42_508_800,
    # MiMo-V2-Flash ships multi-token-prediction layers its config.json does not declare
    "XiaomiMiMo/MiMo-V2-Flash": 987_782_528,
}


def test_every_snapshot_config_is_estimated(settings):
    refused = []
    for repo_id, cfg, checkpoint in RECORDS:
        try:
            estimate(cfg, model_id=repo_id, assumptions=settings.assumptions, cards=settings.cards, gpus=settings.gpus,
                     checkpoint_params=checkpoint)
        except TraceError as exc:
            refused.append((repo_id, str(exc)[:100]))
    assert refused == []


def test_checkpoint_counts_equal_or_explained(settings):
    unexplained, exact, explained = {}, 0, 0
    for repo_id, cfg, checkpoint in RECORDS:
        if checkpoint is None:
            continue
        r = estimate(cfg, model_id=repo_id, assumptions=settings.assumptions, cards=settings.cards, gpus=settings.gpus,
                     checkpoint_params=checkpoint)
        if r.params.match:
            exact += 1
            continue
        (finding,) = [f for f in r.findings if f.check == "checkpoint_count"]
        if "unexplained" in finding.message:
            unexplained[repo_id] = checkpoint - (r.params.stored or r.params.graph)
        else:
            explained += 1
    assert unexplained == UNEXPLAINED
    assert exact >= 60 and exact + explained + len(unexplained) == sum(1 for *_, c in RECORDS if c is not None)


def _meta_count_of_class(cfg: dict) -> int | None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers import CONFIG_MAPPING

    archs = cfg.get("architectures") or []
    cls = getattr(transformers, archs[0], None) if archs else None
    if cls is None or cfg.get("model_type") not in CONFIG_MAPPING or "auto_map" in cfg:
        return None
    kwargs = {k: v for k, v in cfg.items() if k not in ("model_type", "auto_map")}
    config = CONFIG_MAPPING[cfg["model_type"]](**kwargs)
    with torch.device("meta"):
        model = cls._from_config(config)
    return sum(p.numel() for p in model.parameters())


def _class_cases():
    for repo_id, cfg, _ in RECORDS:
        try:
            arch = normalise(cfg, repo_id)
        except TraceError:
            continue
        if arch.approximate is None:
            yield pytest.param(repo_id, cfg, id=repo_id)


@pytest.mark.parametrize("repo_id,cfg", list(_class_cases()))
def test_graph_equals_the_declared_class_on_meta(repo_id, cfg):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    meta = _meta_count_of_class(cfg)
    if meta is None:
        pytest.skip("transformers does not ship the declared class")
    assert build_graph(normalise(cfg, repo_id)).params_total == meta
