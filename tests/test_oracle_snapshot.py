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
from generator.estimator.normalise import normalise
from generator.estimator.graph.nodes import build_graph
from tests.conftest import snapshot_configs

RECORDS = snapshot_configs()

# Checkpoint totals below what transformers builds from the same config (graph == meta-device count),
# or above it by a size no known cause matches. Kept visible: the page says "unexplained gap".
UNEXPLAINED: dict[str, int] = {}

# The last four gaps found, each pinned to its cause and to arithmetic done by hand from the config
# (checkpoint - graph, before FP8 scales): the test fails if an explanation stops matching.
H = 2048
EXPLAINED = {
    # q/k/v biases (24 layers x 3 x 2048) + RMSNorms (2 x 24 + 1) + shared_expert_gate rows (24 x [1, 2048])
    "Qwen/Qwen1.5-MoE-A2.7B-Chat": ("every 1-D tensor", -(24 * 3 * H + 49 * H + 24 * H)),
    # RMSNorms (2 x 48 + 1) x 2048 + q_norm/k_norm (48 x 2 x head_dim 128)
    "Qwen/Qwen3-30B-A3B-Instruct-2507": ("every 1-D tensor", -(97 * H + 48 * 2 * 128)),
    # 27 MLA layers: q_a_proj (2048x1536) + q_a_layernorm (1536) + q_b_proj (1536 x 16 heads x 192)
    # instead of q_proj (2048 x 16 x 192)
    "deepseek-ai/DeepSeek-V2-Lite-Chat": ("default q_lora_rank (1536)",
                                          -27 * (H * 1536 + 1536 + 1536 * 3072 - H * 3072)),
    # 3 MTP blocks: 2 RMSNorms + sliding attention (q 4096->64x192, k 4096->8x192, v 4096->8x128,
    # o 8192->4096, 64 sinks) + dense SwiGLU FFN (3 x 4096 x 16384) + enorm, hnorm, final norm + eh_proj
    "XiaomiMiMo/MiMo-V2-Flash": ("multi-token-prediction (MTP) layer(s) transformers does not build (3;",
                                 3 * (2 * 4096 + 4096 * (12288 + 1536 + 1024) + 8192 * 4096 + 64
                                      + 3 * 4096 * 16384 + 3 * 4096 + 2 * 4096 * 4096)),
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


def test_the_last_four_gaps_are_explained_by_their_own_cause(settings):
    records = {repo_id: (cfg, checkpoint) for repo_id, cfg, checkpoint in RECORDS}
    for repo_id, (cause, size) in EXPLAINED.items():
        cfg, checkpoint = records[repo_id]
        r = estimate(cfg, model_id=repo_id, assumptions=settings.assumptions, cards=settings.cards, gpus=settings.gpus,
                     checkpoint_params=checkpoint)
        (finding,) = [f for f in r.findings if f.check == "checkpoint_count"]
        assert cause in finding.message and f"({abs(size):,} scalars)" in finding.message, (repo_id, finding.message)
        gap = checkpoint - r.params.graph
        if r.params.stored is None:
            assert gap == size, repo_id
        else:  # MiMo-V2-Flash (FP8): the rest is scale tensors. Our fp32-per-128x128-block model of them
            # (18,767,040) is 37,696 more than is left (the MTP blocks' own scales not counted): within the
            # 0.05% scale-layout slack ckpt.explain allows; the real layout is not known offline.
            assert gap - size == (r.params.stored - r.params.graph) - 37_696


def test_the_explanations_hold_under_transformers_own_modules():
    """Independent of our graph: what transformers builds on meta for the same configs."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    from transformers import CONFIG_MAPPING

    records = {repo_id: (cfg, checkpoint) for repo_id, cfg, checkpoint in RECORDS}
    for repo_id, extra in [("Qwen/Qwen1.5-MoE-A2.7B-Chat", {}), ("Qwen/Qwen3-30B-A3B-Instruct-2507", {}),
                           ("deepseek-ai/DeepSeek-V2-Lite-Chat", {"q_lora_rank": None})]:
        cfg, checkpoint = records[repo_id]
        kwargs = {k: v for k, v in {**cfg, **extra}.items() if k != "model_type"}
        with torch.device("meta"):
            config = CONFIG_MAPPING[cfg["model_type"]](**kwargs)
            model = getattr(transformers, cfg["architectures"][0])._from_config(config)
        total = sum(p.numel() for p in model.parameters())
        if extra:  # DeepSeek-V2-Lite as published (q_lora_rank null): exactly the checkpoint
            assert total == checkpoint
        else:  # the checkpoint total lacks exactly the vectors and [1, n] rows transformers builds
            vectors = sum(p.numel() for p in model.parameters() if p.dim() == 1 or min(p.shape) == 1)
            assert checkpoint - total == EXPLAINED[repo_id][1] == -vectors


def test_deepseek_v2_lite_with_the_published_q_lora_rank_matches_its_checkpoint():
    (cfg, checkpoint), = [(c, n) for i, c, n in RECORDS if i == "deepseek-ai/DeepSeek-V2-Lite-Chat"]
    assert "q_lora_rank" not in cfg
    published = {**cfg, "q_lora_rank": None}  # DeepSeek-V2-Lite's config.json on the Hub: a single q_proj
    assert build_graph(normalise(published, "deepseek-ai/DeepSeek-V2-Lite-Chat")).params_total == checkpoint


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


def test_fp8_releases_store_their_mtp_layer_quantised(settings):
    """DeepSeek-V3/R1: checkpoint = our FP8 model + the routers' e_score_correction_bias (58 x 256) + one MTP
    layer with its embedding and head copies, in stored elements, exactly. DeepSeek-V4-Flash's routed experts
    are FP4, 2 per byte + a scale per 32: 43 x 256 x 3 x 4096 x 2048 expert weights count 17/32 of themselves."""
    records = {repo_id: (cfg, checkpoint) for repo_id, cfg, checkpoint in RECORDS}
    for repo_id in ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"):
        cfg, checkpoint = records[repo_id]
        r = estimate(cfg, model_id=repo_id, assumptions=settings.assumptions, cards=settings.cards, gpus=settings.gpus,
                     checkpoint_params=checkpoint)
        (finding,) = [f for f in r.findings if f.check == "checkpoint_count"]
        assert f"({checkpoint - r.params.stored:,} scalars)" in finding.message, finding.message
        assert "e_score_correction_bias" in finding.message and "(MTP)" in finding.message
    cfg, checkpoint = records["deepseek-ai/DeepSeek-V4-Flash"]
    r = estimate(cfg, model_id="deepseek-ai/DeepSeek-V4-Flash", assumptions=settings.assumptions, cards=settings.cards,
                 gpus=settings.gpus, checkpoint_params=checkpoint)
    experts = 43 * 256 * 3 * 4096 * 2048
    assert r.params.graph == 284_332_230_231  # = DeepseekV4ForCausalLM on meta from this config
    assert r.params.graph - r.params.stored > experts - (experts // 2 + experts // 32) - 1_000_000
    (finding,) = [f for f in r.findings if f.check == "checkpoint_count"]
    assert "FP4 experts" in finding.message and "(MTP)" in finding.message and "unexplained" not in finding.message
