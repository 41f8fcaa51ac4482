"""generator/site/report.schema.json against the Report every snapshot model gets: each JSON twin validates,
and every key a twin writes is described in the schema (validation alone would let the schema lag behind,
since its objects allow more properties)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import pytest

from generator.errors import TraceError
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, RecordProblem, iter_records
from generator.pipeline import report_for_record
from generator.settings import load_settings
from generator.site import render

SCHEMA = json.loads((Path(render.__file__).parent / "report.schema.json").read_text(encoding="utf-8"))
SETTINGS = load_settings()
# Objects whose keys are data (config keys, formula names, card names), not a fixed set of fields.
OPEN = {"memory.assumptions", "memory.peak_phase", "params.layer_kinds", "provenance.config_keys",
        "provenance.formulas", "plan_floors[].beyond"}


def _twins() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for record in iter_records(DEFAULT_SNAPSHOT_DIR):
        if isinstance(record, RecordProblem):
            continue
        try:
            report = report_for_record(record, SETTINGS)
        except TraceError:
            continue  # a "not estimated yet" page has no twin
        out.append((record.id, json.loads(render.twin_json(report))))
    return out


TWINS = _twins()


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = SCHEMA["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    for option in schema.get("oneOf", ()):
        if option.get("type") != "null":
            return _resolve(option)
    return schema


def _undescribed(value: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
    schema = _resolve(schema)
    if isinstance(value, dict) and path not in OPEN:
        props = schema.get("properties", {})
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key not in props:
                yield where
            else:
                yield from _undescribed(item, props[key], where)
    elif isinstance(value, list) and "items" in schema:
        for item in value[:3]:
            yield from _undescribed(item, schema["items"], path + "[]")


def test_the_snapshot_gives_twins_to_check() -> None:
    assert len(TWINS) > 100


@pytest.mark.parametrize("model,twin", TWINS, ids=[m for m, _ in TWINS])
def test_twin_matches_the_schema_and_the_schema_names_every_key(model: str, twin: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(SCHEMA).validate(twin)
    assert sorted(set(_undescribed(twin, SCHEMA, ""))) == []
    curve = twin["memory"]["curve"]
    assert curve and [p["tokens"] for p in curve] == sorted({p["tokens"] for p in curve})


def test_the_schema_rejects_a_malformed_curve() -> None:
    twin = json.loads(json.dumps(TWINS[0][1]))
    twin["memory"]["curve"] = [{"tokens": 512, "train_full_bytes": -1, "train_lora_bytes": 1, "serve_bytes": 1}]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(SCHEMA).validate(twin)
    del twin["memory"]["curve"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(SCHEMA).validate(twin)


def _twin(model: str) -> dict[str, Any]:
    return json.loads(json.dumps(dict(TWINS)[model]))


def test_the_setups_keys_are_required_and_checked() -> None:
    """Issue 14's keys: plans, plans_unreachable and serving at the top, train_qlora_max_batch per card; a twin
    without them, or with a malformed entry, does not validate."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
    twin = _twin("deepseek-ai/DeepSeek-V3")
    validator.validate(twin)
    assert twin["plans"] and twin["serving"] and twin["plans_unreachable"][0]["method"] == "qlora"
    assert {"per_gpu_peak_bytes", "fits", "cheapest", "smallest", "gpu_model"} <= set(twin["plans"][0])
    for key in ("plans", "plans_unreachable", "serving"):
        broken = _twin("deepseek-ai/DeepSeek-V3")
        del broken[key]
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(broken)
    bad_edits = [
        lambda t: t["plans"][0].update(method="dpo"),
        lambda t: t["plans"][0].update(gpus=0),
        lambda t: t["plans"][0].update(offload="disk"),
        lambda t: t["plans"][0].pop("cheapest"),
        lambda t: t["plans_unreachable"][0].pop("reason"),
        lambda t: t["serving"][0].update(strategy="zero3"),
        lambda t: t["serving"][0].update(decode_tokens_per_s=-1.0),
        lambda t: t["memory"]["cards"][0].pop("train_qlora_max_batch"),
        lambda t: t["memory"]["job"].pop("strategy"),
    ]
    for edit in bad_edits:
        broken = _twin("deepseek-ai/DeepSeek-V3")
        edit(broken)
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(broken)
