"""Fuzzing by mutation of real snapshot configs: every case gives a Report or the project's typed error.

`make test` runs a bounded number of examples; `make fuzz` sets FUZZ_EXAMPLES (10,000 or more).
Never a crash, a hang, or a number that is NaN or negative: in the Report, and on the page the
build publishes for it (numbers, or "not estimated yet: why"), where no string may become markup.
"""

from __future__ import annotations

import json
import math
import os
import re
from html.parser import HTMLParser

from hypothesis import HealthCheck, event, given, settings as hsettings, strategies as st

from generator.errors import TraceError
from generator.estimator import estimate
from generator.records import ModelRecord, parse_config_text
from generator.settings import load_settings
from generator.site import worker
from generator.site.build import render_model_page
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
        event(f"typed error: {type(exc).__name__}")
        return
    event("report")
    data = report.to_dict()
    json.dumps(data, allow_nan=False)  # no NaN/inf anywhere in the JSON twin
    for value in _numbers({k: v for k, v in data.items() if k != "provenance"}):
        assert math.isfinite(value) and value >= 0, value


# A number a reader would take as negative: a minus sign (or U+2212) right before a digit, not inside a
# word, a date or an exponent ("2026-11-01", "1e-06", "Qwen2-7B" are fine; "memory − 0.5 GiB" is a
# subtraction). NaN and infinity in any spelling a formatter could produce.
NEGATIVE = re.compile(r"(?<![\w.\-])[-\u2212]\d[\d,]*(\.\d+)?")
NOT_A_NUMBER = re.compile(r"\b(nan|inf|infinity)\b", re.IGNORECASE)
JSON_NUMBER = re.compile(r"-?(?:\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|Infinity)|NaN")


def _quoted(config_text: str) -> set[str]:
    """The config's own negative and non-finite values, as a page may quote them (a finding that names
    the key and the value): these are the input, not a number the estimate produced."""
    allowed = set()
    for token in JSON_NUMBER.findall(config_text):
        if token.startswith("-") or token in ("NaN", "Infinity"):
            allowed.add(token.lower().lstrip("-"))
            try:
                allowed.add(repr(float(token)).lower().lstrip("-"))
                if float(token).is_integer():
                    allowed.add(f"{int(float(token)):,}".lstrip("-"))
            except (ValueError, OverflowError):
                pass
    return allowed
MARKUP = [s for s in HOSTILE_STRINGS if set(s) & set("<>\"'")]


class _Page(HTMLParser):
    """The visible text of a page, and every element and attribute that could run code."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.active: list[str] = []
        self._raw = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._raw += 1
        names, values = {k for k, _ in attrs}, dict(attrs)
        data_block = values.get("type") in ("application/json", "application/ld+json")  # the embedded twin
        if tag in ("iframe", "object", "embed", "base") or any(k.startswith("on") for k in names) or (
                tag == "script" and "src" not in names and not data_block):
            self.active.append(f"<{tag} {sorted(names)}>")
        self.active += [f"{tag} {k}={v}" for k, v in attrs if (v or "").strip().lower().startswith("javascript:")]

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._raw -= 1

    def handle_data(self, data):
        if not self._raw:
            self.text.append(data)


def _check_page(html: str, where: str, numbers: bool = True, quoted: frozenset[str] = frozenset()) -> None:
    for hostile in MARKUP:
        assert hostile not in html, f"{where}: {hostile!r} unescaped"
    page = _Page()
    page.feed(html)
    page.close()
    assert page.active == [], f"{where}: {page.active}"
    if not numbers:  # a "not estimated yet" page quotes the refused value itself, as its message must
        return
    text = " ".join(page.text)
    for pattern in (NEGATIVE, NOT_A_NUMBER):
        for found in pattern.finditer(text):
            number = found.group(0).lower().lstrip("-\u2212")
            assert number in quoted or number.replace(",", "") in quoted, \
                f"{where}: {text[max(0, found.start() - 60):found.end() + 30]!r}"


@given(mutated())
@hsettings(max_examples=EXAMPLES if EXAMPLES > 300 else 100, deadline=5000, suppress_health_check=list(HealthCheck),
           derandomize=EXAMPLES <= 300)
def test_mutated_config_gives_a_clean_page(text):
    """The build's own path (worker.build_model: estimate, render, JSON twin, index row) and the
    --html page: no estimator or template bug, and nothing NaN, negative or unescaped on the page."""
    record = ModelRecord(id="fuzz/model", config_json=text, downloads=1234)
    result = worker.build_model(record, SETTINGS)
    kinds = {p.kind for p in result.problems}
    event(f"page: {', '.join(sorted(kinds)) or 'estimated'}")
    assert kinds <= {"config error", "unsupported architecture"}, result.problems
    assert result.files, result.problems  # a page either way: numbers, or "not estimated yet: why"
    for rel, content in result.files:
        if rel.endswith(".html"):
            _check_page(content, rel, numbers=not result.problems, quoted=frozenset(_quoted(text)))
        else:
            twin = json.loads(content)
            assert not set(content) & set("<>&'"), rel
            for value in _numbers({k: v for k, v in twin.items() if k != "provenance"}):
                assert math.isfinite(value) and value >= 0, (rel, value)
    if not result.problems:
        report = estimate(record.config(), model_id=record.id, assumptions=SETTINGS.assumptions,
                          cards=SETTINGS.cards, gpus=SETTINGS.gpus, downloads=record.downloads)
        _check_page(render_model_page(report, record, SETTINGS, standalone=True), "--html page",
                    quoted=frozenset(_quoted(text)))
