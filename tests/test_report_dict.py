"""The Report's JSON twin: every dataclass field is in it, and it is what dataclasses.asdict made.

Report.to_dict() walks the dataclasses itself instead of calling dataclasses.asdict (which deep-copied
every leaf and was most of an estimate's time); these tests hold it to asdict's output on every
snapshot model, and check that a field added to a Report class reaches the JSON without a change.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from generator.errors import TraceError
from generator.estimator import estimate
from generator.estimator.report import Memory, Report
from tests.conftest import snapshot_configs


def _asdict_reference(report: Report) -> dict:
    """The previous to_dict(): dataclasses.asdict, tuples to lists, then the pair-tuples as objects."""
    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    # the structure table's rows as a tuple of StructureRow, what estimate() held before the table became lazy
    out = plain(dataclasses.asdict(dataclasses.replace(report, structure=tuple(report.structure))))
    out["memory"]["assumptions"] = dict(report.memory.assumptions)
    for key in ("peak_phase_by_method", "breakdown", "job"):
        out["memory"][key] = dict(getattr(report.memory, key))
    out["params"]["layer_kinds"] = dict(report.params.layer_kinds)
    q = report.params.quantization
    out["params"]["quantization"] = None if q is None else dict(q)
    out["provenance"] = {k: v for k, v in report.provenance}
    for floor, got in zip(report.plan_floors, out["plan_floors"], strict=True):
        got["parts"], got["beyond"] = dict(floor.parts), dict(floor.beyond)
    return out


def _reports(settings):
    for repo_id, cfg, checkpoint in snapshot_configs():
        try:
            yield estimate(cfg, model_id=repo_id, assumptions=settings.assumptions, cards=settings.cards,
                           gpus=settings.gpus, checkpoint_params=checkpoint, downloads=7, sha="0" * 40)
        except TraceError:
            continue


def _missing_fields(obj, data, path="report"):
    """Paths of dataclass fields (at any depth) that the JSON form does not carry."""
    missing = []
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            if not isinstance(data, dict) or f.name not in data:
                missing.append(f"{path}.{f.name}")
            else:
                missing += _missing_fields(getattr(obj, f.name), data[f.name], f"{path}.{f.name}")
    elif isinstance(obj, tuple) and isinstance(data, list):
        for i, (o, d) in enumerate(zip(obj, data, strict=False)):
            missing += _missing_fields(o, d, f"{path}[{i}]")
    return missing


def test_to_dict_equals_asdict_for_every_snapshot_model(settings):
    reports = list(_reports(settings))
    assert len(reports) > 100
    for report in reports:
        fast, reference = report.to_dict(), _asdict_reference(report)
        assert fast == reference, report.model.id  # lists where asdict had lists, not tuples
        assert json.dumps(fast) == json.dumps(reference), report.model.id  # and the same key order


def test_every_dataclass_field_is_in_the_json(settings):
    with_splits = 0
    for report in _reports(settings):
        assert _missing_fields(report, report.to_dict()) == [], report.model.id
        with_splits += any(c.split for c in report.memory.cards)
    assert with_splits  # the walk reached the nested SplitPlans too


def test_a_field_added_to_a_report_class_reaches_the_json(settings):
    report = next(_reports(settings))
    wider = dataclasses.make_dataclass("WiderMemory", [("new_bytes", int, dataclasses.field(default=12))],
                                       bases=(Memory,), frozen=True)
    memory = wider(**{f.name: getattr(report.memory, f.name) for f in dataclasses.fields(Memory)})
    data = dataclasses.replace(report, memory=memory).to_dict()
    assert data["memory"]["new_bytes"] == 12
    assert data["memory"]["cards"] == report.to_dict()["memory"]["cards"]


def test_a_leaf_with_no_json_form_is_refused(settings):
    report = next(_reports(settings))
    with pytest.raises(TypeError, match="set"):
        dataclasses.replace(report, findings=({1, 2},)).to_dict()


def test_the_structure_table_is_built_only_when_asked(settings):
    """estimate(structure=False) (the terminal summary) skips the table and changes nothing else."""
    from tests.conftest import tiny_qwen2

    kw = {"model_id": "tiny", "assumptions": settings.assumptions, "cards": settings.cards, "gpus": settings.gpus}
    full, bare = estimate(tiny_qwen2(), **kw).to_dict(), estimate(tiny_qwen2(), structure=False, **kw).to_dict()
    assert full["structure"] and bare["structure"] == []
    assert {k: v for k, v in full.items() if k != "structure"} == {k: v for k, v in bare.items() if k != "structure"}
