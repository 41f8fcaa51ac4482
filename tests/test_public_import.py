"""tools/import_public.py: data/measurements/public.jsonl is exactly what it makes from public.tsv and the amendments,
and an amendment it cannot apply is refused by name."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "measurements"


def _importer():
    spec = importlib.util.spec_from_file_location("import_public", ROOT / "tools" / "import_public.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tsv_rows() -> dict[str, dict]:
    with open(DATA / "public.tsv", encoding="utf-8", newline="") as fh:
        return {r["id"]: r for r in csv.DictReader(fh, delimiter="\t")}


def test_public_jsonl_is_the_importers_output(tmp_path):
    """No row of public.jsonl is edited by hand: the script rebuilds the committed file byte for byte."""
    out = tmp_path / "public.jsonl"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "import_public.py"), "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == (DATA / "public.jsonl").read_bytes()


def test_an_amended_spread_takes_the_rows_gpu_count_and_lifts_only_the_multi_gpu_reason():
    imp, row = _importer(), _tsv_rows()["M426"]  # DeepSpeed ZeRO-3 over 8 GPUs, its unit not stated
    plain = imp.convert(row)
    assert plain["excluded"].startswith("multi-GPU or offload") and "parallel" not in plain
    spread = imp.convert(row, [{"ids": ["M426"], "parallel": {"strategy": "zero3", "offload": "none"}}])
    assert spread["parallel"] == {"gpus": 8, "strategy": "zero3", "offload": "none"}
    assert spread["excluded"] == "unit ambiguous (GB or GiB, +-7%)"  # its other reason stays


def test_amended_notes_append_and_setup_keys_override():
    imp, row = _importer(), _tsv_rows()["M024"]  # a LitGPT row whose TSV notes say it ran out of memory
    got = imp.convert(row, [{"ids": ["M024"], "setup": {"lora_dropout": 0.05}, "notes": "first"},
                            {"ids": ["M024"], "notes": "second"}])
    assert got["notes"] == f"{row['notes']}; first; second" and got["setup"]["lora_dropout"] == 0.05


def test_a_quantised_rows_bitsandbytes_release_comes_from_its_framework():
    imp, rows = _importer(), _tsv_rows()
    assert imp.convert(rows["M021"])["setup"]["bnb_version"] == "0.41.1"  # "lit-gpt ... (PyTorch 2.1, bnb 0.41.1)"
    assert imp.convert(rows["M138"])["setup"]["bnb_version"] == "0.39"  # "... + bitsandbytes 0.39"
    assert "bnb_version" not in imp.convert(rows["M020"])["setup"]  # the same stack's LoRA: no 4-bit base



def test_a_stack_pinned_by_the_framework_amends_the_bitsandbytes_release():
    imp, row = _importer(), _tsv_rows()["M098"]  # "litgpt finetune (Mar 2024)": no release in the framework column
    assert "bnb_version" not in imp.convert(row)["setup"]
    got = imp.convert(row, [{"ids": ["M098"], "setup": {"bnb_version": "0.41.0"}, "notes": "pinned"}])
    assert got["setup"]["bnb_version"] == "0.41.0"



def test_a_cause_the_source_shows_is_carried_to_the_rows_miss():
    """An amendment's `cause` (what the source itself shows differs from the step) rides on the row, and /accuracy/
    names it first: torchtune's QLoRA tutorial gives 9.13 GB reserved at model init beside the 9.29 GB of training."""
    from generator.accuracy import miss_cause, setup_of

    imp, row = _importer(), _tsv_rows()["M129"]
    assert "cause" not in imp.convert(row)
    got = imp.convert(row, [{"ids": ["M129"], "cause": "first"}, {"ids": ["M129"], "cause": "second"}])
    assert got["cause"] == "first; second"
    committed = next(r for r in map(json.loads, (DATA / "public.jsonl").read_text(encoding="utf-8").splitlines())
                     if r["id"] == "M129")
    cause = miss_cause(committed, setup_of(committed))
    assert cause.startswith("torchtune; the source: the reserved training figure (9.29 GB)") and "9.13 GB" in cause
    assert "LinearNF4 saves only the weight" in cause and "MatMul4Bit" not in cause  # torchao, not bitsandbytes

def test_litgpt_config_hub_rows_carry_the_step_their_yaml_runs():
    """The committed rows as the amendments leave them: LitGPT's full.yaml on 4 GPUs accumulates 4 micro-batches
    (global_batch_size 64 // devices 4 // micro_batch_size 4), and the March 2024 table ran bitsandbytes 0.41.0."""
    rows = {r["id"]: r for r in map(json.loads, (DATA / "public.jsonl").read_text(encoding="utf-8").splitlines())}
    for row_id in ("M073", "M076"):
        assert rows[row_id]["setup"]["grad_accum"] == 4 and rows[row_id]["setup"]["loss"] == "litgpt-chunked"
        assert rows[row_id]["parallel"] == {"gpus": 4, "strategy": "fsdp", "offload": "none"}
    for row_id in ("M097", "M098"):
        assert rows[row_id]["setup"]["loss"] == "litgpt-chunked" and rows[row_id]["setup"]["lora_dropout"] == 0.05
    assert rows["M098"]["setup"]["bnb_version"] == "0.41.0" and "bnb_version" not in rows["M097"]["setup"]

def test_a_generate_rows_transformers_release_comes_from_its_columns():
    imp, rows = _importer(), _tsv_rows()
    assert imp.convert(rows["M152"])["setup"]["transformers_version"] == "4.32"  # "eager (transformers ~4.32, ..."
    assert imp.convert(rows["M166"])["setup"]["transformers_version"] == "4.35"  # "(bnb 0.41.1, transformers 4.35)"
    assert "transformers_version" not in imp.convert(rows["M039"])["setup"]  # LitGPT's own generate


def test_a_vllm_row_on_one_gpu_is_not_called_multi_gpu():
    got = _importer().convert(_tsv_rows()["M176"])  # parallelism "TP=1"
    assert "multi-GPU" not in got["excluded"] and got["excluded"].startswith("workload")


@pytest.mark.parametrize("amendment, message", [
    ({"ids": ["M001"], "weights": "bf16"}, "amendment 1: key 'weights'"),
    ({"setup": {"lora_dropout": 0.1}}, "amendment 1: key 'ids'"),
    ({"ids": ["M001"], "setup": {"batch": 4}}, "amendment 1: setup key 'batch'"),
    ({"ids": ["M001"], "parallel": {"strategy": "fsdp"}}, "amendment 1: parallel {'strategy': 'fsdp'}"),
    ({"ids": ["M001"], "inexact": "a cap"}, "amendment 1: inexact 'a cap'"),
])
def test_an_amendment_outside_what_may_be_amended_is_refused(tmp_path, amendment, message):
    path = tmp_path / "amendments.json"
    path.write_text(json.dumps({"amendments": [amendment]}), encoding="utf-8")
    with pytest.raises(SystemExit, match=message.replace("(", r"\(").replace("{", r"\{")):
        _importer().load_amendments(path)


def test_an_amendment_naming_no_row_or_a_row_without_gpu_count_is_refused(tmp_path):
    imp = _importer()
    with pytest.raises(SystemExit, match=r"M001: parallel: 2 amendments"):
        imp.convert(_tsv_rows()["M001"], [{"parallel": {"strategy": "fsdp", "offload": "none"}}] * 2)
    row = dict(_tsv_rows()["M001"], gpus="A100-80GB")
    with pytest.raises(SystemExit, match=r"M001: gpus 'A100-80GB'"):
        imp.convert(row, [{"parallel": {"strategy": "fsdp", "offload": "none"}}])
    path = tmp_path / "amendments.json"
    path.write_text(json.dumps({"amendments": [{"ids": ["M999"], "notes": "x"}]}), encoding="utf-8")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "import_public.py"), "--amendments", str(path),
                           "--out", str(tmp_path / "out.jsonl")], capture_output=True, text=True, cwd=ROOT,
                          check=False)
    assert done.returncode != 0 and "id 'M999': no such row in public.tsv" in done.stderr


def test_an_inexact_amendment_calls_the_stated_length_a_cap():
    imp, row = _importer(), _tsv_rows()["M118"]  # torchtune's README: "Seq Length = 2048", batches padded to longest
    assert "sequence length" not in (imp.convert(row)["excluded"] or "")
    got = imp.convert(row, [{"ids": ["M118"], "inexact": True, "notes": "a cap"}])
    assert "sequence length not exact ('2048'" in got["excluded"] and got["notes"].endswith("a cap")
