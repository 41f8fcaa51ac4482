"""Fuzzing by mutation of real snapshot configs: every case gives a Report or the project's typed error.

`make test` runs a bounded number of examples; `make fuzz` sets FUZZ_EXAMPLES (10,000 or more).
Never a crash, a hang, or a number that is NaN or negative.
"""

from __future__ import annotations

import json
import math
import os

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from generator.errors import TraceError
from generator.estimator import estimate
from generator.records import parse_config_text
from generator.settings import load_settings
from tests.conftest import snapshot_configs

SETTINGS = load_settings()
SEEDS = [cfg for _, cfg, _ in snapshot_configs()]
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))

HOSTILE_STRINGS = ["<script>alert(1)</script>", "\"'><img src=x onerror=alert(1)>", "../../etc/passwd", "",
                   "[bold]x[/bold]", "\u202e\u0000", "x" * 10_000, "llama", "qwen2", "mamba", "t5"]
ODD_NUMBERS = [0, -1, -(10**18), 10**18, 2**63, 1.5, 4096.0, float("nan"), float("inf"), "4096", None, True, [],
               {}, [1, 2]]


def _all_paths(obj, prefix=()):
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield prefix + (key,)
            yield from _all_paths(value, prefix + (key,))


def _set(obj, path, value):
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


def _drop(obj, path):
    for key in path[:-1]:
        obj = obj[key]
    obj.pop(path[-1], None)


@st.composite
def mutated(draw):
    cfg = json.loads(json.dumps(draw(st.sampled_from(SEEDS))))
    for _ in range(draw(st.integers(1, 4))):
        paths = list(_all_paths(cfg))
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["drop", "rename", "number", "string", "empty_nested", "hostile_type"]))
        if op == "drop":
            _drop(cfg, path)
        elif op == "rename":
            parent = cfg
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1] + "_renamed"] = parent.pop(path[-1], None)
        elif op == "number":
            _set(cfg, path, draw(st.sampled_from(ODD_NUMBERS)))
        elif op == "string":
            _set(cfg, path, draw(st.sampled_from(HOSTILE_STRINGS)))
        elif op == "empty_nested":
            nested = [p for p in paths if isinstance(_get(cfg, p), dict)]
            if nested:
                _set(cfg, draw(st.sampled_from(nested)), {})
        else:
            cfg[draw(st.sampled_from(["model_type", "architectures"]))] = draw(
                st.sampled_from(HOSTILE_STRINGS + [["<script>"], [None], 42]))
    text = json.dumps(cfg, allow_nan=True)
    if draw(st.booleans()):  # a duplicated key: JSON keeps the last one, as Python's json does
        text = text[:-1] + ', "hidden_size": ' + json.dumps(draw(st.sampled_from(ODD_NUMBERS[:8])), allow_nan=True) + "}"
    return text


def _get(obj, path):
    for key in path:
        obj = obj[key]
    return obj


def _numbers(obj):
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _numbers(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _numbers(value)


@given(mutated())
@hsettings(max_examples=EXAMPLES, deadline=2000, suppress_health_check=list(HealthCheck), derandomize=EXAMPLES <= 300)
def test_mutated_config_gives_report_or_typed_error(text):
    try:
        cfg = parse_config_text(text, "fuzz/model")
        report = estimate(cfg, model_id="fuzz/model", assumptions=SETTINGS.assumptions, cards=SETTINGS.cards,
                          gpus=SETTINGS.gpus)
    except TraceError as exc:
        message = str(exc)
        assert message.startswith("fuzz/model") and "\n" not in message
        return
    data = report.to_dict()
    json.dumps(data, allow_nan=False)  # no NaN/inf anywhere in the JSON twin
    for value in _numbers({k: v for k, v in data.items() if k != "provenance"}):
        assert math.isfinite(value) and value >= 0, value
