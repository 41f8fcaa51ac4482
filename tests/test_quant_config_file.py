"""hf_quant_config.json: read where vLLM reads it, from the snapshot, the crawl, `neurarch-trace org/name` and a folder.

NVIDIA ModelOpt up to 0.29 keeps its quantisation settings in hf_quant_config.json, not config.json; vLLM 0.19.1 takes
that file as the quantization_config of a config.json that has none (transformers_utils/config.py get_config) and sets
its quant_method from the producer's algorithm (model_arch_config_convertor.py _normalize_quantization_config).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from fakehub import FakeHub, FakeModel, fake_sha
from generator.errors import ConfigError, RecordError
from generator.estimator.config.modelopt import merge_quant_file, wants_quant_file
from generator.estimator.normalise import normalise
from generator.estimator.vllm_support import fp8_kv_cache, quant_capability, quant_method, refused_everywhere
from generator.hub.client import fetch_record
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record, record_from_dict, record_to_dict, write_record
from generator.pipeline import report_for_record
from generator.records import QUANT_CONFIG_FILE, ModelRecord
from generator.resolve import resolve_model
from generator.settings import load_settings
from generator.site.build import render_model_page
from hubkit import crawl, hub_environment

SETTINGS = load_settings()
LLAMA_FP8, QWEN_NVFP4 = "nvidia/Llama-3.1-70B-Instruct-FP8", "nvidia/Qwen3-235B-A22B-NVFP4"
FP8_FILE = {"producer": {"name": "modelopt", "version": "0.23.0"},
            "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}
CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
          "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}


@pytest.fixture
def sleeps(monkeypatch, tmp_path):
    return hub_environment(monkeypatch, tmp_path)


def _bytes(data: dict) -> bytes:
    return json.dumps(data, indent=2).encode()


# --- where vLLM takes the file ------------------------------------------------------------------------------------

def test_the_file_is_wanted_where_config_json_declares_no_quantization():
    assert wants_quant_file({"model_type": "llama"})
    assert wants_quant_file({"quantization_config": None})
    assert not wants_quant_file({"quantization_config": {"quant_method": "fp8"}})
    # a MIXED_PRECISION config.json without its layers: vLLM reads them from the file (weight_utils.get_quant_config)
    mixed = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}
    assert wants_quant_file({"quantization_config": mixed})
    assert not wants_quant_file({"quantization_config": {**mixed, "quantized_layers": {}}})


def test_merge_takes_the_file_as_quantization_config_and_keeps_config_json_own():
    assert merge_quant_file({"a": 1}, FP8_FILE) == {"a": 1, "quantization_config": FP8_FILE}
    own = {"quantization_config": {"quant_method": "fp8"}}
    assert merge_quant_file(own, FP8_FILE) == own
    mixed = {"quantization_config": {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
                                     "kv_cache_quant_algo": "FP8"}}
    layers = {"x": {"quant_algo": "FP8"}}
    file = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "MIXED_PRECISION",
                                                               "kv_cache_quant_algo": None,
                                                               "quantized_layers": layers, "exclude_modules": ["y"]}}
    # the layers and exclusions from the file; config.json's other keys, its KV cache's, kept (vLLM reads those)
    assert merge_quant_file(mixed, file)["quantization_config"] == {**mixed["quantization_config"],
                                                                    "quantized_layers": layers, "ignore": ["y"]}
    # a file vLLM raises on (not ModelOpt's, or without layers) merges nothing: the config stays refused
    for bad in ({**file, "producer": {"name": "other"}}, {**file, "quantization": {"quant_algo": "FP8"}}):
        assert merge_quant_file(mixed, bad) == mixed


def test_a_record_reads_its_file_and_leaves_a_malformed_one_out():
    record = ModelRecord(id="org/m", config_json=json.dumps(CONFIG), quant_config_json=json.dumps(FP8_FILE))
    assert record.config()["quantization_config"] == FP8_FILE
    for bad in ("[1, 2]", "{not json", '"text"'):
        assert "quantization_config" not in ModelRecord(id="org/m", config_json=json.dumps(CONFIG),
                                                        quant_config_json=bad).config()


# --- vLLM's reading of the producer form --------------------------------------------------------------------------

def _arch(quant: dict):
    return normalise({**CONFIG, "quantization_config": quant}, "org/m")


def test_the_producer_form_is_read_as_modelopt_whatever_its_method():
    a = _arch(FP8_FILE)
    assert quant_method(a) == "modelopt" and a.quant is not None and a.quant.method == "modelopt_fp8"
    nvfp4 = _arch({"producer": {"name": "modelopt"}, "quantization": {
        "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]}})
    assert nvfp4.quant is not None and nvfp4.quant.method == "modelopt_fp4" and refused_everywhere(nvfp4) == ""
    # vLLM's own names for ModelOpt's classes, written into config.json, are read as ModelOpt too
    alias = _arch({"quant_method": "modelopt_fp4", "quant_algo": "NVFP4"})
    assert alias.quant is not None and alias.quant.method == "modelopt_fp4" and quant_method(alias) == "modelopt"
    # a modelopt producer sets the method whatever the file says (_normalize_quantization_config)
    named = _arch({**FP8_FILE, "quant_method": "fp8"})
    assert quant_method(named) == "modelopt" and named.quant is not None and named.quant.method == "modelopt_fp8"
    # without a modelopt producer the file names no method: not read as ModelOpt
    other = _arch({"producer": {"name": "other"}, "quantization": {"quant_algo": "FP8"}})
    assert other.quant is not None and other.quant.method == "unknown"


@pytest.mark.parametrize("algo", ["MXFP8", "MIXED_PRECISION", "W4A16_AWQ", 5])
def test_an_algorithm_the_producer_form_does_not_take_is_served_nowhere(algo):
    # "Unknown ModelOpt quant algo" (model_arch_config_convertor.py): only FP8's three and NVFP4 are named there
    a = _arch({"producer": {"name": "modelopt"}, "quantization": {
        "quant_algo": algo, "kv_cache_quant_algo": None, "exclude_modules": [],
        "quantized_layers": {"model.layers.0.mlp.down_proj": {"quant_algo": "FP8"}}}})
    assert re.search(rf"quant_algo {algo}, which a modelopt producer's config may not name", refused_everywhere(a))


@pytest.mark.parametrize("quant", [{"producer": "modelopt", "quant_method": "fp8"},
                                   {"producer": None, "quant_method": "fp8"},
                                   {"producer": {"name": "modelopt"}, "quantization": "FP8"},
                                   {"producer": {"name": "modelopt"}, "quantization": None}])
def test_a_malformed_producer_form_is_served_nowhere(quant):
    # vLLM reads q.get("producer", {}).get("name") and q.get("quantization", {}).get("quant_algo"): AttributeError
    assert refused_everywhere(_arch(quant)).startswith("fails to read this quantization_config: its ")


def test_a_multimodal_config_is_judged_by_its_quantization_config():
    # the file lands at the top of a wrapper's config, whose text config the layers are read from: vLLM reads the
    # top-level quantization_config first (get_quantization_config), so its rules apply to the wrapper too
    record = load_record(DEFAULT_SNAPSHOT_DIR, "google/gemma-3-27b-it")
    assert record is not None
    a = normalise(merge_quant_file(record.config(), FP8_FILE), record.id)
    assert a.quant is not None and a.quant.method == "modelopt_fp8" and quant_method(a) == "modelopt"
    assert quant_capability(a).least == 8.9 and fp8_kv_cache(a) == "kv_cache_quant_algo"
    # a text_config's own quantization_config is read where the top level has none
    text = dict(record.config())
    text["text_config"] = {**text["text_config"], "quantization_config": FP8_FILE}
    b = normalise(text, record.id)
    assert b.quant is not None and b.quant.method == "modelopt_fp8" and quant_capability(b).least == 8.9


def test_awq_bits_of_zero_is_one_clear_error():
    with pytest.raises(ConfigError, match=r"quantization_config.bits.*must be a number of bits"):
        _arch({"quant_method": "awq", "bits": 0})


def test_mixed_precision_layers_from_the_file_are_served():
    own = {**CONFIG, "quantization_config": {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}}
    layers = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": {
        f"model.layers.{i}.mlp.{p}": {"quant_algo": "FP8"} for i in range(2) for p in ("gate_proj", "up_proj")}}}
    without = normalise(own, "org/m")
    assert "names no quantized_layers" in refused_everywhere(without)
    record = ModelRecord(id="org/m", config_json=json.dumps(own), quant_config_json=json.dumps(layers))
    a = normalise(record.config(), "org/m")
    assert refused_everywhere(a) == "" and a.quant is not None and dict(a.quant.roles)["mlp"] == "modelopt_fp8"


# --- the snapshot's two repos, against their config's dimensions -------------------------------------------------

def test_the_snapshot_prices_llama_70b_fp8_as_its_modelopt_export():
    record = load_record(DEFAULT_SNAPSHOT_DIR, LLAMA_FP8)
    assert record is not None and json.loads(record.quant_config_json) == FP8_FILE
    report = report_for_record(record, SETTINGS)
    # 80 layers of 7 FP8 Linears (1 B a weight, an fp32 weight and input scale each), the embedding and the excluded
    # lm_head in bf16, 161 RMSNorms of 8,192 (Llama-3.1-70B: hidden 8,192, 64/8 heads of 128, MLP 28,672)
    linears = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672
    expected = 80 * (linears + 7 * 8) + 2 * 128256 * 8192 * 2 + 161 * 8192 * 2
    assert report.memory.serve_weight_bytes == expected == 72_656_376_192
    # vLLM keeps its KV cache in FP8 (kv_cache_quant_algo): 1 B an element, 80 layers x 8 heads x 128 x (k, v)
    assert report.memory.kv_bytes_per_token == 80 * 8 * 128 * 2
    assert not any(x.check == "quantization" and x.severity == "warning" for x in report.findings)
    # FP8 under ModelOpt needs compute capability 8.9: no T4, no A100 among the serving plans
    served = {s.gpu_model for s in report.serving}
    assert served and not any(m.startswith(("T4", "A100")) for m in served), served


def test_the_snapshot_prices_qwen3_235b_nvfp4_with_its_routers_in_bf16():
    record = load_record(DEFAULT_SNAPSHOT_DIR, QWEN_NVFP4)
    assert record is not None
    report = report_for_record(record, SETTINGS)
    # Qwen3-235B-A22B: hidden 4,096, 94 layers, 64 q / 4 kv heads of 128, 128 experts of 1,536, vocab 151,936.
    # NVFP4: half a byte a weight, an e4m3 scale per 16, two fp32 per Linear; the 94 routers excluded, in bf16.
    attention = 2 * 4096 * 8192 + 2 * 4096 * 512
    experts = 128 * 3 * 4096 * 1536
    layer = (attention + experts) * 9 // 16 + (4 + 384) * 8 + 4096 * 128 * 2 + (2 * 4096 + 2 * 128) * 2
    expected = 94 * layer + 2 * 151936 * 4096 * 2 + 4096 * 2
    assert report.memory.serve_weight_bytes == expected == 134_101_651_392


def test_the_page_names_where_the_quantization_settings_come_from():
    record = load_record(DEFAULT_SNAPSHOT_DIR, LLAMA_FP8)
    page = render_model_page(report_for_record(record, SETTINGS), record, SETTINGS, standalone=False)
    assert "Quantization settings (hf_quant_config.json, read as vLLM reads it): github:ai-dynamo/aiconfigurator@" \
        in page


def test_a_repo_named_fp8_without_the_file_keeps_its_warning():
    record = load_record(DEFAULT_SNAPSHOT_DIR, "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8")
    assert record is not None and record.quant_config_json == ""
    warning = [x for x in report_for_record(record, SETTINGS).findings if x.check == "quantization"]
    assert warning and warning[0].severity == "warning" and "no hf_quant_config.json" in warning[0].message


def test_the_snapshot_reader_checks_the_field():
    data = record_to_dict(ModelRecord(id="org/m", config_json="{}", quant_config_json="{}", quant_config_source="x"))
    assert record_from_dict(data).quant_config_json == "{}"
    for key, value in (("quant_config_json", 3), ("quant_config_source", ["x"])):
        with pytest.raises(RecordError, match=key):
            record_from_dict({**data, key: value})
    del data["quant_config_json"], data["quant_config_source"]  # a record written before the field: none
    assert record_from_dict(data).quant_config_json == ""


# --- the crawl and `neurarch-trace org/name` against a local Hub --------------------------------------------------

def _models() -> list[FakeModel]:
    config = _bytes(CONFIG)
    own = _bytes({**CONFIG, "quantization_config": {"quant_method": "fp8"}})
    models = [
        FakeModel(id="org/with-file", sha=fake_sha("w"), config=config, downloads=60,
                  files={QUANT_CONFIG_FILE: _bytes(FP8_FILE)}),
        FakeModel(id="org/own-config", sha=fake_sha("o"), config=own, downloads=50,
                  files={QUANT_CONFIG_FILE: _bytes(FP8_FILE)}),  # config.json's own wins: the file is not asked for
        FakeModel(id="org/no-file", sha=fake_sha("n"), config=config, downloads=40),
        FakeModel(id="org/file-fails", sha=fake_sha("f"), config=config, downloads=30,
                  files={QUANT_CONFIG_FILE: _bytes(FP8_FILE)}, file_fault="error"),
        FakeModel(id="org/file-junk", sha=fake_sha("j"), config=config, downloads=20,
                  files={QUANT_CONFIG_FILE: b"[1, 2, 3]"}),
        FakeModel(id="org/file-gone", sha=fake_sha("g"), config=config, downloads=10,
                  files={QUANT_CONFIG_FILE: _bytes(FP8_FILE)}, file_fault="missing"),  # listed, but 404
    ]
    for model in models:
        model.params = {"BF16": 1000}
    return models


def _asked(hub: FakeHub) -> set[str]:
    return {m.id for m in hub.models if hub.count(None, f"{m.id}/resolve/{m.sha}/{QUANT_CONFIG_FILE}")}


def test_the_crawl_fetches_the_file_only_where_vllm_reads_it(sleeps, monkeypatch, tmp_path):
    snap = tmp_path / "snap"
    with FakeHub(_models()) as hub:
        code, out = crawl(monkeypatch, hub, snap)
        assert code == 0
        assert _asked(hub) == {"org/with-file", "org/file-fails", "org/file-junk", "org/file-gone"}
        got = load_record(snap, "org/with-file")
        assert got.quant_config_json.encode() == _bytes(FP8_FILE)
        assert got.quant_config_source == f"Hub file {QUANT_CONFIG_FILE} at revision {fake_sha('w')}"
        assert got.config()["quantization_config"] == FP8_FILE and got.problems == ()
        assert load_record(snap, "org/own-config").quant_config_json == ""
        assert load_record(snap, "org/no-file").quant_config_json == ""
        failed = load_record(snap, "org/file-fails")
        assert failed.config_json.encode() == _bytes(CONFIG) and failed.quant_config_json == ""
        assert any(p.startswith(f"{QUANT_CONFIG_FILE}: server error") and p.endswith("retried on the next crawl")
                   for p in failed.problems)
        junk = load_record(snap, "org/file-junk")
        assert junk.quant_config_json == "" and f"{QUANT_CONFIG_FILE} is not a JSON object: not read" in junk.problems
        gone = load_record(snap, "org/file-gone")
        assert gone.quant_config_json == "" and gone.problems == (f"{QUANT_CONFIG_FILE} not found (404)",)
        assert f"problem: {QUANT_CONFIG_FILE} not read" in out
        # the next crawl asks again for the transient fault alone (not the 404, not the junk); a refresh keeps the
        # file; once served, the record holds it
        hub.model("org/file-fails").file_fault = None
        hub.reset_log()
        crawl(monkeypatch, hub, snap)
        assert hub.count(None, "/resolve/") == hub.count(None, "org/file-fails/resolve/") > 0
        assert load_record(snap, "org/with-file") == got
        assert load_record(snap, "org/file-fails").quant_config_json.encode() == _bytes(FP8_FILE)
        assert load_record(snap, "org/file-fails").problems == ()


def test_a_record_without_the_file_fetches_it_and_a_transient_fault_keeps_the_last(sleeps, monkeypatch, tmp_path):
    snap = tmp_path / "snap"
    with FakeHub(_models()) as hub:
        crawl(monkeypatch, hub, snap)
        # a record crawled before the file was read: the same sha, the file listed, none kept
        old = load_record(snap, "org/with-file")
        write_record(snap, replace(old, quant_config_json="", quant_config_source=None))
        crawl(monkeypatch, hub, snap)  # (the file at that sha comes from the HF cache)
        assert load_record(snap, "org/with-file") == old
        # a new commit whose file fails for now: the last good record stands (its older sha), tried again next time
        moved = hub.model("org/with-file")
        moved.sha, moved.file_fault = fake_sha("w", "v2"), "error"
        crawl(monkeypatch, hub, snap)
        kept = load_record(snap, "org/with-file")
        assert kept.sha == old.sha and kept.quant_config_json == old.quant_config_json
        assert any(p.startswith(f"{QUANT_CONFIG_FILE}: server error") for p in kept.problems)
        moved.file_fault = None
        crawl(monkeypatch, hub, snap)
        assert load_record(snap, "org/with-file").sha == moved.sha
        assert load_record(snap, "org/with-file").quant_config_json == old.quant_config_json


def test_the_file_is_refused_where_the_two_files_together_pass_a_configs_limit(sleeps, monkeypatch, tmp_path):
    from generator.hub import client as client_mod

    monkeypatch.setattr(client_mod, "MAX_CONFIG_BYTES", len(_bytes(CONFIG)) + 100)
    with FakeHub(_models()) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        record = fetch_record("org/with-file")
    assert record.quant_config_json == ""
    assert any(p.startswith(f"{QUANT_CONFIG_FILE} of org/with-file is {len(_bytes(FP8_FILE)):,} bytes, larger "
                            "than 100 bytes: refused before downloading it") for p in record.problems)


def test_fetching_one_model_reads_its_file_and_then_the_cache(sleeps, monkeypatch):
    import huggingface_hub.constants

    with FakeHub(_models()) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        record = fetch_record("org/with-file")
        assert record.config()["quantization_config"] == FP8_FILE and record.problems == ()
        assert record.quant_config_source.startswith(f"Hub file {QUANT_CONFIG_FILE} at revision {fake_sha('w')}")
        hub.reset_log()
        assert fetch_record("org/no-file").quant_config_json == "" and hub.count(None, QUANT_CONFIG_FILE) == 0
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        hub.reset_log()
        offline = fetch_record("org/with-file")
        assert offline.quant_config_json == record.quant_config_json and hub.count() == 0
        assert fetch_record("org/no-file").quant_config_json == ""  # not in the cache: no file, no fault


def test_a_local_folder_reads_the_file_beside_its_config(tmp_path, capsys):
    from generator.cli import main

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_bytes(_bytes(CONFIG))
    assert resolve_model(str(folder), None).quant_config_json == ""
    (folder / QUANT_CONFIG_FILE).write_bytes(_bytes(FP8_FILE))
    for arg in (str(folder), str(folder / "config.json")):
        record = resolve_model(arg, None)
        assert record.config()["quantization_config"] == FP8_FILE
        assert record.quant_config_source == f"local {QUANT_CONFIG_FILE}"
    other = tmp_path / "model" / "other.json"  # a file not named config.json is read alone
    other.write_bytes(_bytes(CONFIG))
    assert resolve_model(str(other), None).quant_config_json == ""
    capsys.readouterr()
    assert main([str(folder)]) == 0
    assert "ModelOpt FP8" in capsys.readouterr().out
    for text, why in (("[1]", "must hold a JSON object"), (b"\xff\xfe", "is not UTF-8 text")):
        (folder / QUANT_CONFIG_FILE).write_bytes(text.encode() if isinstance(text, str) else text)
        assert main([str(folder)]) == 2
        err = capsys.readouterr().err
        assert str(folder) in err and QUANT_CONFIG_FILE in err and why in err, err
