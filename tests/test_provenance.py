"""Where each config.json comes from: snapshot record → ModelRecord → the page, in plain words."""

from __future__ import annotations

import json

import pytest

from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, iter_records, load_record, record_from_dict, record_to_dict
from generator.pipeline import report_for_record
from generator.records import PROVENANCES, ModelRecord
from generator.settings import load_settings
from generator.site.build import render_model_page
from generator.site.context import CONFIG_NOTICES

RECORDS = [r for r in iter_records(DEFAULT_SNAPSHOT_DIR) if isinstance(r, ModelRecord)]


def test_every_snapshot_record_says_where_its_config_comes_from():
    kinds = {r.id: r.config_provenance for r in RECORDS}
    assert len(kinds) == 157 and set(kinds.values()) <= set(PROVENANCES)
    for record in RECORDS:
        source = record.config_source or ""
        # A Hub file is pinned to the revision it was read at; the MLC presets name mlc-llm.
        assert (record.config_provenance == "hub") == ("at Hub revision" in source and record.sha is not None)
        assert (record.config_provenance == "preset") == source.startswith("github:mlc-ai/mlc-llm@")
    assert sum(1 for k in kinds.values() if k == "preset") == 47


def test_llama2_context_is_the_hub_value_with_the_correction_named():
    for size in ("7b", "13b", "70b"):
        record = load_record(DEFAULT_SNAPSHOT_DIR, f"meta-llama/Llama-2-{size}-hf")
        assert record.config()["max_position_embeddings"] == 4096
        assert record.config_source.endswith("[corrected: max_position_embeddings 2048 -> 4096, the Hub value "
                                             "(snapshot/README.md, Corrected keys)]")
        assert record.config_provenance == "preset"


def _page(record: ModelRecord) -> str:
    settings = load_settings()
    return render_model_page(report_for_record(record, settings), record, settings, standalone=False)


def test_a_page_whose_config_is_not_the_hub_file_says_so_naming_the_source():
    record = load_record(DEFAULT_SNAPSHOT_DIR, "meta-llama/Llama-2-7b-hf")
    page = _page(record)
    assert "Reconstructed from a copy of its config.json, not the Hub&#39;s file" in page
    assert "MLC-LLM&#39;s preset for this model" in page and 'id="config-notice"' in page
    assert "Config: github:mlc-ai/mlc-llm@" in page  # the source, named
    assert "Reconstructed from its own config.json" not in page


def test_a_hub_file_page_makes_no_such_notice():
    page = _page(load_record(DEFAULT_SNAPSHOT_DIR, "openai-community/gpt2"))
    assert "Reconstructed from its own config.json" in page and 'id="config-notice"' not in page


@pytest.mark.parametrize("provenance", [p for p in PROVENANCES if p not in ("hub", "local")] + [None])
def test_every_kind_of_copy_has_its_notice(provenance):
    record = load_record(DEFAULT_SNAPSHOT_DIR, "openai-community/gpt2")
    page = _page(ModelRecord(**{**record.__dict__, "config_provenance": provenance}))
    assert CONFIG_NOTICES[provenance].replace("'", "&#39;") in page


def test_the_record_round_trips_and_refuses_an_unknown_provenance():
    record = load_record(DEFAULT_SNAPSHOT_DIR, "meta-llama/Llama-2-7b-hf")
    data = record_to_dict(record)
    assert data["config_provenance"] == "preset" and record_from_dict(json.loads(json.dumps(data))) == record
    with pytest.raises(Exception, match="config_provenance"):
        record_from_dict({**data, "config_provenance": "trust me"})


def test_a_local_config_is_local_and_its_page_makes_no_hub_claim(tmp_path):
    from generator.resolve import resolve_model

    (tmp_path / "config.json").write_text(load_record(DEFAULT_SNAPSHOT_DIR, "openai-community/gpt2").config_json)
    assert resolve_model(str(tmp_path), None).config_provenance == "local"
