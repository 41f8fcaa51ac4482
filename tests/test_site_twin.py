"""The JSON twin (render.twin_json) is the Report's own to_dict(), serialised: written without building
the dict first, it must stay equal to it on every model the snapshot holds."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from generator.errors import TraceError
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, iter_records
from generator.pipeline import report_for_record
from generator.records import ModelRecord
from generator.settings import load_settings
from generator.site.render import twin_json


def _reference(report) -> str:
    text = json.dumps(report.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    for char in "<>&'":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text + "\n"


def test_the_twin_equals_report_to_dict_on_every_snapshot_model() -> None:
    settings = load_settings()
    compared = 0
    for record in iter_records(DEFAULT_SNAPSHOT_DIR):
        if not isinstance(record, ModelRecord):
            continue
        try:
            report = report_for_record(record, settings)
        except TraceError:
            continue
        assert twin_json(report) == _reference(report), record.id
        compared += 1
    assert compared > 100  # the snapshot's estimable models (about 170 today), not a handful


def test_a_value_json_cannot_write_is_refused_as_before() -> None:
    record = next(r for r in iter_records(DEFAULT_SNAPSHOT_DIR) if isinstance(r, ModelRecord)
                  and r.id == "openai-community/gpt2")
    report = report_for_record(record, load_settings())
    odd = replace(report, provenance=(("key", object()),))
    with pytest.raises(TypeError):
        _reference(odd)
    with pytest.raises(TypeError):
        twin_json(odd)
