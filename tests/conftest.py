"""Shared fixtures: the project's settings, snapshot configs by family, and a tiny-config factory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "snapshot"

# The first decoders (GPT-2 era, llama and its first descendants, Gemma 1-3, granite): the families the property
# and oracle tests draw from their class defaults (the other families: test_oracle_causal.py, the group tests).
FIRST_DECODERS = ("gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "llama", "mistral", "qwen2", "qwen3",
                  "phi3", "olmo", "olmo2", "stablelm", "starcoder2", "cohere", "gemma", "gemma2", "gemma3_text",
                  "granite")


@pytest.fixture(scope="session")
def settings():
    from generator.settings import load_settings

    return load_settings()


def snapshot_configs() -> list[tuple[str, dict, int | None]]:
    """(repo id, config dict as the build reads it: ModelRecord.config(), checkpoint count) for every committed
    snapshot record."""
    from generator.errors import ConfigError
    from generator.hub.snapshot import record_from_dict

    out = []
    for path in sorted((SNAPSHOT / "models").glob("*/*.json")):
        record = record_from_dict(json.loads(path.read_text(encoding="utf-8")))
        try:
            cfg = record.config()
        except ConfigError:
            continue
        out.append((record.id, cfg, record.checkpoint_params))
    return out


def snapshot_arch(repo: str, **changes):
    """The committed snapshot's config of `repo`, with `changes` over its keys, normalised (estimator.normalise)."""
    from generator.estimator.normalise import normalise
    from generator.hub.snapshot import load_record

    record = load_record(SNAPSHOT, repo)
    assert record is not None, repo
    return normalise({**record.config(), **changes}, repo)


def snapshot_model(repo: str, **changes):
    """(snapshot_arch, its graph)."""
    from generator.estimator.graph.nodes import build_graph

    arch = snapshot_arch(repo, **changes)
    return arch, build_graph(arch)


def priced_errors(rows: list[dict]) -> list[tuple[float, dict]]:
    """(estimate / measured - 1, row) for measured rows, each priced as /accuracy/ prices it (accuracy_rows)."""
    from generator.accuracy_rows import estimate_bytes
    from generator.settings import load_settings

    s = load_settings().assumptions
    out = []
    for row in rows:
        estimate = estimate_bytes(row, s)
        assert estimate is not None, row["setup"]
        out.append((estimate / row["measured"]["peak_bytes"] - 1, row))
    return out


def measured_rows(name: str) -> list[dict]:
    """The rows of data/measurements/<name>.jsonl (cpu-sim-extra, public, ...), in file order."""
    path = ROOT / "data" / "measurements" / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def tiny_qwen2(**overrides) -> dict:
    """The seed reference model's config (reference page tiny-Qwen2ForCausalLM-2.5)."""
    cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 32,
           "vocab_size": 152064, "max_position_embeddings": 32768, "tie_word_embeddings": False,
           "hidden_act": "silu", "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "torch_dtype": "bfloat16"}
    cfg.update(overrides)
    return cfg


def tiny_remote(**overrides) -> dict:
    """The second reference page's model: the same shape under a custom auto_map."""
    cfg = tiny_qwen2(architectures=["RemoteForCausalLM"], model_type="remote", vocab_size=128256,
                     max_position_embeddings=131072, rms_norm_eps=1e-05, rope_theta=500000.0,
                     auto_map={"AutoConfig": "configuration_remote.RemoteConfig",
                               "AutoModelForCausalLM": "modeling_remote.RemoteForCausalLM"})
    cfg.update(overrides)
    return cfg
