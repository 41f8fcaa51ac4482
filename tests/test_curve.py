"""`memory.curve` (estimator/curve.py): its token counts, its agreement with the Report's own figures,
and, over every snapshot config, that no series ever falls as the tokens grow."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from generator.estimator.normalise import normalise
from generator.estimator.report import CurvePoint
from generator.estimator.memory.curve import FIRST_TOKENS, MAX_POINTS, curve_tokens, memory_curve
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.profile import serve_profile, train_profile
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.pipeline import report_for_record
from generator.settings import load_settings
from tests.conftest import snapshot_configs
from test_properties import configs

SETTINGS = load_settings()
SERIES = ("train_full_bytes", "train_lora_bytes", "serve_bytes")


def test_curve_tokens_examples() -> None:
    # Qwen3-0.6B: 40,960 is not a power of two, so it ends the curve after 32K.
    assert curve_tokens(40960) == (512, 1024, 2048, 4096, 8192, 16384, 32768, 40960)
    assert curve_tokens(2048) == (512, 1024, 2048)
    # Short contexts start at context / 8 (a power of two) so that they still draw a line.
    assert curve_tokens(1024) == (128, 256, 512, 1024) and curve_tokens(512) == (64, 128, 256, 512)
    assert curve_tokens(100) == (8, 16, 32, 64, 100) and curve_tokens(1) == (1,) and curve_tokens(0) == ()
    assert curve_tokens(1 << 20) == tuple(512 << i for i in range(12))  # 1M: exactly MAX_POINTS
    # 10M (Llama 4 Scout): 11 powers of two, then the context.
    assert curve_tokens(10_485_760) == (*(512 << i for i in range(11)), 10_485_760)


@given(st.integers(1, 1 << 40))
@hsettings(max_examples=300, deadline=None)
def test_curve_tokens_properties(context: int) -> None:
    points = curve_tokens(context)
    assert points[-1] == context and len(points) <= MAX_POINTS
    assert list(points) == sorted(set(points))
    assert points[0] == FIRST_TOKENS if context >= 4 * FIRST_TOKENS else points[0] <= max(1, context // 8)
    assert len(points) >= min(3, context.bit_length())  # a line wherever the context allows one
    assert all(b == 2 * a for a, b in zip(points[:-2], points[1:-1]))  # powers of two but the last


def test_the_curve_meets_the_reports_own_figures() -> None:
    """At train_tokens (2,048) the curve's training points are the headline's batch-1 figures, and at
    serve_tokens (4,096) its serving point is the Report's serving figure."""
    record = load_record(DEFAULT_SNAPSHOT_DIR, "Qwen/Qwen3-0.6B")
    assert record is not None
    report = report_for_record(record, SETTINGS)
    m = report.memory
    by_tokens = {p.tokens: p for p in m.curve}
    assert sorted(by_tokens) == list(curve_tokens(40960))
    assert by_tokens[m.train_tokens].train_full_bytes == m.train_full_bytes_batch1
    assert by_tokens[m.train_tokens].train_lora_bytes == m.train_lora_bytes_batch1
    assert by_tokens[m.serve_tokens].serve_bytes == m.serve_bytes_batch1
    twin = json.loads(json.dumps(report.to_dict()))["memory"]["curve"]
    assert twin[0] == {"tokens": 512, "train_full_bytes": m.curve[0].train_full_bytes,
                       "train_lora_bytes": m.curve[0].train_lora_bytes, "serve_bytes": m.curve[0].serve_bytes}


def test_reused_profiles_give_the_same_points_as_fresh_ones() -> None:
    a = normalise(json.loads(load_record(DEFAULT_SNAPSHOT_DIR, "openai-community/gpt2").config_json), "gpt2")
    g = build_graph(a)
    s = SETTINGS.assumptions
    known = {("full", 1024): train_profile(a, g, s, 1024, "full", s.lora_rank),
             ("lora", 1024): train_profile(a, g, s, 1024, "lora", s.lora_rank),
             ("serve", 1024): serve_profile(a, g, s, 1024)}
    assert memory_curve(a, g, s, known) == memory_curve(a, g, s)
    assert [p.tokens for p in memory_curve(a, g, s)] == [128, 256, 512, 1024]


SNAPSHOT = snapshot_configs()


@pytest.mark.parametrize("model,config", [(m, c) for m, c, _ in SNAPSHOT], ids=[m for m, _, _ in SNAPSHOT])
def test_no_series_falls_as_tokens_grow_on_snapshot_configs(model: str, config: dict) -> None:
    try:
        a = normalise(config, model)
        g = build_graph(a)
    except Exception as exc:  # noqa: BLE001 - models the estimator refuses have no curve to check
        pytest.skip(f"not estimated: {type(exc).__name__}")
    curve = memory_curve(a, g, SETTINGS.assumptions)
    assert [p.tokens for p in curve] == list(curve_tokens(a.max_context))
    for key in SERIES:
        values = [getattr(p, key) for p in curve]
        assert all(v > 0 for v in values) and values == sorted(values), (key, values)


@pytest.mark.parametrize("model,config", [(m, c) for m, c, _ in SNAPSHOT], ids=[m for m, _, _ in SNAPSHOT])
def test_moved_profiles_equal_profiles_built_at_each_point(model: str, config: dict) -> None:
    # The curve moves one profile per method to every token count (Profile.total_at, serve_token_bytes)
    # instead of building a profile per point: that must be exactly what building them gives.
    try:
        a = normalise(config, model)
        g = build_graph(a)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"not estimated: {type(exc).__name__}")
    s = SETTINGS.assumptions
    built = tuple(CurvePoint(t, train_profile(a, g, s, t, "full", s.lora_rank).total(1),
                             train_profile(a, g, s, t, "lora", s.lora_rank).total(1), serve_profile(a, g, s, t).total(1))
                  for t in curve_tokens(a.max_context))
    assert memory_curve(a, g, s) == built


@given(configs())
@hsettings(max_examples=60, deadline=None)
def test_no_series_falls_as_tokens_grow(cfg: dict) -> None:
    a = normalise(cfg, "prop")
    curve = memory_curve(a, build_graph(a), SETTINGS.assumptions)
    for key in SERIES:
        values = [getattr(p, key) for p in curve]
        assert values == sorted(values), (key, values)
