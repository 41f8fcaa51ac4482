"""The snapshot format: round trip, determinism, unsafe ids, atomic writes, malformed records."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from generator.errors import RecordError
from generator.hub import snapshot as snap
from generator.hub.snapshot import (
    DEFAULT_SNAPSHOT_DIR, RecordProblem, index_entry, iter_records, load_record, read_index,
    record_from_dict, record_to_dict, write_index, write_record,
)
from generator.records import ModelRecord

CONFIG = '{\n  "model_type": "gpt2",\n  "n_embd": 768,\r\n  "name": "caf\u00e9 \u2603"\n}'


def _record(repo_id: str = "org/model-1.5", **kw) -> ModelRecord:
    base = dict(
        id=repo_id, config_json=CONFIG, sha="a" * 40, checkpoint_params=124,
        checkpoint_params_by_dtype={"BF16": 100, "F32": 24}, checkpoint_source="listing",
        downloads=7, downloads_source="api", likes=3, gated="manual",
        last_modified="2025-01-01T00:00:00.000Z", pipeline_tag="text-generation",
        library_name="transformers", tags=("a", "b"), config_source="hub", stale=True,
        problems=("config not accessible (gated)",),
    )
    base.update(kw)
    return ModelRecord(**base)


def _snapshot(tmp_path: Path, records: list[ModelRecord]) -> Path:
    root = tmp_path / "snapshot"
    for record in records:
        write_record(root, record)
    write_index(root, [index_entry(r) for r in records])
    return root


def test_round_trip_keeps_every_field(tmp_path):
    record = _record()
    assert record_from_dict(json.loads(json.dumps(record_to_dict(record)))) == record
    root = _snapshot(tmp_path, [record, _record("b-org/x", gated=False, stale=False, problems=())])
    assert load_record(root, "org/model-1.5") == record
    loaded = list(iter_records(root))
    assert [r.id for r in loaded] == ["b-org/x", "org/model-1.5"]
    assert loaded[1].config_json == CONFIG  # text kept exactly, \r\n and non-ASCII included
    assert read_index(root)[1] == {"id": "org/model-1.5", "sha": "a" * 40, "model_type": "gpt2",
                                   "downloads": 7, "stale": True, "file": "models/org/model-1.5.json"}
    assert load_record(root, "org/absent") is None


def test_files_are_deterministic(tmp_path):
    records = [_record("z/z"), _record("a/a"), _record("m/m")]
    one = _snapshot(tmp_path / "1", records)
    two = _snapshot(tmp_path / "2", list(reversed(records)))
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(two) for p in two.rglob("*") if p.is_file())
    for rel in files:
        assert (one / rel).read_bytes() == (two / rel).read_bytes()
    text = (one / "models/a/a.json").read_text(encoding="utf-8")
    data = json.loads(text)
    assert text == json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
    assert data["format"] == 1 and "\u2603" in text  # ensure_ascii=False


@pytest.mark.parametrize("bad_id", ["../etc", "org/..", "org/../x", "org", "a/b/c", "/abs/x", "org/.hidden",
                                    "org/na me", "org/name\n", "", "org/x..y"])
def test_unsafe_ids_are_refused(tmp_path, bad_id):
    with pytest.raises(RecordError):
        load_record(tmp_path, bad_id)
    with pytest.raises(RecordError):
        write_record(tmp_path, _record(bad_id))
    assert not any(tmp_path.rglob("*"))  # nothing was written anywhere


def test_symlinked_org_folder_cannot_escape(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "snapshot"
    (root / "models").mkdir(parents=True)
    os.symlink(outside, root / "models" / "evil")
    with pytest.raises(RecordError, match="outside"):
        write_record(root, _record("evil/x"))
    assert not any(outside.iterdir())


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    root = _snapshot(tmp_path, [_record()])
    path = root / "models/org/model-1.5.json"
    index_before = (root / "index.json").read_bytes()
    before = path.read_bytes()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(snap.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_record(root, _record(downloads=99))
    with pytest.raises(OSError, match="disk full"):
        write_index(root, [])
    assert path.read_bytes() == before
    assert (root / "index.json").read_bytes() == index_before
    assert sorted(p.name for p in path.parent.iterdir()) == ["model-1.5.json"]  # no temp file left
    assert load_record(root, "org/model-1.5").downloads == 7


def test_leftover_temp_files_are_ignored_and_removed(tmp_path):
    root = _snapshot(tmp_path, [_record()])
    (root / "models/org/.model-1.5.json.x.tmp").write_text("{half")
    assert [r.id for r in iter_records(root)] == ["org/model-1.5"]
    assert snap.remove_temp_files(root) == 1
    assert not list(root.rglob("*.tmp"))


@pytest.mark.parametrize("mutate, reason", [
    (lambda d: "{not json", "not valid JSON"),
    (lambda d: '{"a": NaN}', "not valid JSON"),
    (lambda d: "[1, 2]", "JSON object"),
    (lambda d: {**d, "format": 2}, "format"),
    (lambda d: {**d, "config_json": {"model_type": "gpt2"}}, "config_json"),
    (lambda d: {**d, "sha": "../../x"}, "sha"),
    (lambda d: {**d, "downloads": -1}, "downloads"),
    (lambda d: {**d, "checkpoint_params": True}, "checkpoint_params"),
    (lambda d: {**d, "checkpoint_params_by_dtype": {"BF16": "12"}}, "checkpoint_params_by_dtype"),
    (lambda d: {**d, "tags": "a,b"}, "tags"),
    (lambda d: {**d, "stale": "no"}, "stale"),
    (lambda d: {**d, "surprise": 1}, "unknown record key"),
    (lambda d: {**d, "id": "other/model"}, "differs from its file"),
    (lambda d: {k: v for k, v in d.items() if k != "config_json"}, "config_json"),
])
def test_malformed_record_yields_a_problem_and_the_rest_loads(tmp_path, mutate, reason):
    root = _snapshot(tmp_path, [_record("a/first"), _record("m/bad"), _record("z/last")])
    path = root / "models/m/bad.json"
    new = mutate(json.loads(path.read_text()))
    path.write_text(new if isinstance(new, str) else json.dumps(new))
    out = list(iter_records(root))
    assert [type(x).__name__ for x in out] == ["ModelRecord", "RecordProblem", "ModelRecord"]
    assert out[1].id == "m/bad" and reason in out[1].reason
    with pytest.raises(RecordError):
        load_record(root, "m/bad")


def test_unsafe_or_broken_index_entries_yield_problems(tmp_path):
    root = _snapshot(tmp_path, [_record("a/ok")])
    index = json.loads((root / "index.json").read_text())
    index["models"] += [
        {"id": "../../etc/passwd", "file": "models/../../etc/passwd.json"},
        {"id": "b/elsewhere", "file": "../outside.json"},
        {"id": "c/missing", "file": "models/c/missing.json"},
        {"id": "a/ok", "file": "models/a/ok.json"},
    ]
    (root / "index.json").write_text(json.dumps(index))
    out = list(iter_records(root))
    problems = {p.id: p.reason for p in out if isinstance(p, RecordProblem)}
    assert [r.id for r in out if isinstance(r, ModelRecord)] == ["a/ok"]
    assert set(problems) == {"../../etc/passwd", "b/elsewhere", "c/missing", "a/ok"}
    assert "missing" in problems["c/missing"] and "twice" in problems["a/ok"]


def test_unreadable_index_raises_record_error(tmp_path):
    with pytest.raises(RecordError, match="no snapshot index"):
        read_index(tmp_path)
    (tmp_path / "index.json").write_text('{"format": 1, "models": {}}')
    with pytest.raises(RecordError):
        list(iter_records(tmp_path))


def test_write_index_refuses_a_mismatched_file(tmp_path):
    entry = index_entry(_record())
    with pytest.raises(RecordError):
        write_index(tmp_path, [{**entry, "file": "../x.json"}])
    with pytest.raises(RecordError):
        write_index(tmp_path, [entry, entry])


def test_committed_snapshot_loads_without_problems(tmp_path):
    out = list(iter_records(DEFAULT_SNAPSHOT_DIR))
    assert len(out) >= 150
    assert not [p for p in out if isinstance(p, RecordProblem)]
    # It is in the writer's own byte format: re-writing a copy changes nothing.
    copy = tmp_path / "copy"
    for record in out:
        write_record(copy, record)
    write_index(copy, [index_entry(r) for r in out])
    for path in DEFAULT_SNAPSHOT_DIR.rglob("*.json"):
        assert (copy / path.relative_to(DEFAULT_SNAPSHOT_DIR)).read_bytes() == path.read_bytes(), path


def test_replace_keeps_a_record_valid():
    record = _record()
    assert record_from_dict(record_to_dict(replace(record, stale=False, problems=()))).stale is False


def test_reading_refuses_a_symlinked_org_folder_or_record_file_that_leaves_the_snapshot(tmp_path):
    """iter_records resolves each org folder once and each record file only when it is a link: the
    same refusals as record_path, for the org folder and for the file itself."""
    root = tmp_path / "snapshot"
    records = [_record("evil/x"), _record("org/linked"), _record("org/plain")]
    for record in records:
        write_record(root, record)
    write_index(root, [index_entry(r) for r in records])
    outside = tmp_path / "outside"
    shutil.move(root / "models" / "evil", outside)
    os.symlink(outside, root / "models" / "evil")
    shutil.move(root / "models" / "org" / "linked.json", tmp_path / "linked.json")
    os.symlink(tmp_path / "linked.json", root / "models" / "org" / "linked.json")
    got = {getattr(r, "id"): r for r in iter_records(root)}
    assert "resolves outside the snapshot folder" in got["evil/x"].reason
    assert "resolves outside the snapshot folder" in got["org/linked"].reason
    assert got["org/plain"].config_json == records[2].config_json
