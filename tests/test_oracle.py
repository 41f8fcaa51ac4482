"""Oracle: our graph's parameter count against transformers building the model on the meta device.

For every supported family: the config class's defaults, their sparse form (`to_diff_dict()`, as many
Hub files are written), and every committed snapshot config of that family (text towers included).
Against the checkpoint (snapshot records with a count): equal, or a finding names the cause.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from generator.errors import TraceError  # noqa: E402
from generator.estimator.checks import check_checkpoint  # noqa: E402
from generator.estimator.normalise import normalise  # noqa: E402
from generator.estimator.graph.nodes import build_graph  # noqa: E402
from tests.conftest import FIRST_DECODERS, snapshot_configs  # noqa: E402
from tests.test_oracle_support import meta_count as support_meta_count  # noqa: E402

FAMILIES = set(FIRST_DECODERS)

transformers.logging.set_verbosity_error()
warnings.filterwarnings("ignore")


def meta_count(cfg: dict) -> int:
    """What transformers counts: AutoModelForCausalLM.from_config under torch.device("meta")."""
    from transformers import AutoModelForCausalLM

    return support_meta_count(cfg, AutoModelForCausalLM)


def _cases():
    from transformers import CONFIG_MAPPING

    for family in sorted(FAMILIES):
        config = CONFIG_MAPPING[family]()
        yield pytest.param(f"{family}:defaults", config.to_dict(), id=f"{family}-defaults")
        yield pytest.param(f"{family}:sparse", {"model_type": family, **config.to_diff_dict()}, id=f"{family}-sparse")
    for repo_id, cfg, _ in snapshot_configs():
        try:
            arch = normalise(cfg, repo_id)
        except TraceError:
            continue
        if arch.family not in FAMILIES or (arch.approximate and not arch.custom_code):
            continue  # the other families' snapshot configs: tests/test_oracle_snapshot.py
        if arch.custom_code:
            continue  # the repo's own code defines it; transformers cannot build it (reference-page test covers it)
        oracle_cfg = cfg["text_config"] if arch.text_tower_only else cfg
        yield pytest.param(repo_id, oracle_cfg, id=repo_id)


CASES = list(_cases())


@pytest.mark.parametrize("name,cfg", CASES)
def test_graph_count_equals_meta_device_count(name, cfg):
    assert build_graph(normalise(cfg, name)).params_total == meta_count(cfg)


def test_oracle_covers_every_supported_family_and_the_snapshot():
    ids = {c.id for c in CASES}
    assert {f"{f}-defaults" for f in FAMILIES} <= ids
    snapshot_cases = [i for i in ids if "/" in i]
    assert len(snapshot_cases) >= 80, len(snapshot_cases)


def test_checkpoint_counts_equal_or_explained():
    """Every snapshot record of a supported family: exact, or a finding naming a known cause."""
    exact, explained = 0, []
    for repo_id, cfg, checkpoint in snapshot_configs():
        try:
            arch = normalise(cfg, repo_id)
        except TraceError:
            continue
        if checkpoint is None or arch.model_type not in FAMILIES:
            continue  # other families: tests/test_oracle_snapshot.py
        graph = build_graph(arch)
        findings = check_checkpoint(arch, graph, checkpoint)
        if not findings:
            exact += 1
            continue
        (finding,) = findings
        assert "unexplained" not in finding.message, (repo_id, finding.message)
        explained.append(repo_id)
    # Documented gaps (DESIGN.md "Checkpoint counts are stored tensors"): GPT-2 attn.bias masks,
    # Llama-2 inv_freq, Qwen3 untied lm_head copies. (VLMs are counted whole now: test_oracle_snapshot.py.)
    assert sorted(explained) == [
        "Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "distilbert/distilgpt2", "meta-llama/Llama-2-7b-hf",
        "openai-community/gpt2", "openai-community/gpt2-medium"]
    assert exact == 49
