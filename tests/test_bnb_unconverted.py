"""QLoRA on a model whose Linears transformers' bitsandbytes conversion leaves as they are (FINDINGS.md F60):
transformers 5 replaces a module only where its type is nn.Linear, and Falcon's layers are FalconLinear, a subclass.
Its QLoRA step is LoRA on the base as it loads: bf16, or fp32 after prepare_model_for_kbit_training."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from generator.accuracy_rows import estimate_bytes
from generator.estimator import estimate
from generator.estimator.graph.nodes import build_graph
from generator.estimator.inputs import Assumptions
from generator.estimator.memory.job import job_memory
from generator.estimator.memory.job_options import Job, resolve
from generator.estimator.memory.storage import BNB_UNCONVERTED, bnb_leaves_linears
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import ROOT, measured_rows

S = Assumptions()
FALCON = json.loads((ROOT / "data" / "measurements" / "configs" / "falcon.json").read_text(encoding="utf-8"))
FALCON = {**FALCON, "num_hidden_layers": 2, "vocab_size": 1024}
QLORA = dict(method="qlora", grad_ckpt=True, lora_targets="query_key_value", tokens=1024, attention="sdpa")


def _peak(cfg, **job):
    a = normalise(cfg, "m")
    return job_memory(a, build_graph(a), S, Job(**job), "m").peak_bytes


def test_falcon_qlora_is_lora_on_the_base_as_it_loads():
    """The CPU simulation peaks at exactly the LoRA step's bytes: 1.678 GiB both on a bf16 base, 2.533 GiB both
    after the upcast (measure --method qlora [--kbit-prep] vs --method lora [--weights fp32], falcon.json, 2 layers,
    1,024 tokens)."""
    lora = {**QLORA, "method": "lora"}
    assert _peak(FALCON, **QLORA) == _peak(FALCON, **lora)
    assert _peak(FALCON, **QLORA, upcast_fp32=True) == _peak(FALCON, **lora, weights="fp32")
    a = normalise(FALCON, "m")
    priced = resolve(Job(**QLORA, double_quant=True), a)
    assert (priced.method, priced.storage, priced.double_quant) == ("lora", "bf16", False)


def test_where_the_conversion_does_quantise():
    a = normalise(FALCON, "m")
    # transformers 4 took isinstance(module, nn.Linear); LitGPT's own model code builds plain nn.Linear
    assert resolve(Job(**QLORA, transformers_version="4.44.2"), a).method == "qlora"
    assert resolve(Job(**QLORA, loss="litgpt-chunked"), a).method == "qlora"
    assert _peak(FALCON, **QLORA, transformers_version="4.44.2") < _peak(FALCON, **QLORA)
    # GPTQ and fp8 checkpoints are not bitsandbytes' conversion; a Llama's Linears are nn.Linear
    assert bnb_leaves_linears(a, "gptq-int4") == ""
    assert bnb_leaves_linears(normalise({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                                         "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128},
                                        "m"), "nf4") == ""


def test_the_page_says_so():
    st = load_settings()
    report = estimate(FALCON, model_id="tiiuae/falcon-7b", assumptions=st.assumptions, cards=st.cards, gpus=st.gpus)
    notes = {f.check: f.message for f in report.findings}
    assert "FalconLinear" in notes["qlora_unquantised"]


def test_the_simulated_steps():
    """Falcon-7B's shapes, 2 layers, QLoRA on query_key_value, checkpointed: -25.5% and -49.6% before F60. The
    upcast step, LoRA on an fp32 base, then read +11.9%: at the math kernel's attention backward (Falcon's
    multi-query attention) the recomputed layer's later Linears (the MLP, dense) have run their backward and freed
    their weights' bf16 copies; only query_key_value's is left (job.py's ckpt_copies[-1])."""
    s = load_settings().assumptions
    rows = [r for r in measured_rows("cpu-sim-extra") if r["model_type"] == "falcon" and r["setup"]["method"] == "qlora"]
    errors = [estimate_bytes(r, s) / r["measured"]["peak_bytes"] - 1 for r in rows]
    assert len(errors) == 2 and all(abs(e) < 0.02 for e in errors), errors


def test_the_table_is_transformers_own():
    """Every nn.Linear subclass transformers' models define is either in BNB_UNCONVERTED (a model whose layers are
    built from it) or named here with why it is not; and the conversion still tests the exact type."""
    transformers = pytest.importorskip("transformers")
    from transformers.integrations import bitsandbytes as bnb_integration

    assert "type(module) is nn.Linear" in inspect.getsource(bnb_integration.replace_with_bnb_linear)
    assert int(transformers.__version__.split(".")[0]) >= 5
    found = {}
    for path in sorted((Path(inspect.getfile(transformers)).parent / "models").glob("*/modeling_*.py")):
        for name in re.findall(r"^class (\w+)\((?:nn|torch\.nn)\.Linear\):", path.read_text(encoding="utf-8"), re.M):
            found[name] = path.parent.name
    not_layers = {
        "DeepseekV4GroupedLinear": "o_a_proj alone, left out of LoRA's targets too (F48)",
        "DoryLMHead": "the LM head, which the conversion leaves out anyway",
        "EsmFoldLinear": "ESMFold's folding trunk, not a language model's layers",
        "IdeficsDecoupledLinear": "IDEFICS-1's decoupled LM head",
        "Llama4Router": "the router, a hidden x experts matrix",
        "PhimoeTopKRouter": "the router, a hidden x experts matrix",
    }
    for name, model_type in found.items():
        assert BNB_UNCONVERTED.get(model_type) == name or name in not_layers, (name, model_type)
    for model_type, name in BNB_UNCONVERTED.items():
        assert found.get(name) == model_type


def test_the_harness_quantises_what_transformers_does():
    """generator/measure/build.py's QLoRA base mirrors replace_with_bnb_linear: GPT-2's Conv1D layers are converted
    (their weight transposed), Falcon's FalconLinear are not, and the head never is. Before, the harness left
    Conv1D in bf16, and GPT-2's simulated QLoRA read -10% and -12% for it."""
    transformers = pytest.importorskip("transformers")
    from generator.measure.build import _linears

    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=128,
                                                                n_positions=64))
    converted = _linears(gpt2)
    assert len(converted) == 8 and {name for _, name, _ in converted} == {"c_attn", "c_fc", "c_proj"}
    falcon = transformers.FalconForCausalLM(transformers.FalconConfig(hidden_size=64, num_hidden_layers=2,
                                                                      num_attention_heads=4, vocab_size=128))
    assert _linears(falcon) == []


def test_gpt2_qlora_steps():
    """GPT-2 (2 layers, a 1,024-token vocabulary), QLoRA on c_attn, checkpointed, its Conv1D layers quantised as
    transformers converts them: -2.6% (its attention dropout sends the CPU to SDPA's math kernel), and -0.5% after
    prepare_model_for_kbit_training, whose fp32 MLP runs gelu_new in Python (tanh, mul, add, each fp32: -7.1%
    while they were priced in bf16)."""
    s = load_settings().assumptions
    rows = [r for r in measured_rows("cpu-sim-extra") if r["model_type"] == "gpt2" and r["setup"]["method"] == "qlora"]
    errors = {r["setup"]["upcast_fp32"]: estimate_bytes(r, s) / r["measured"]["peak_bytes"] - 1 for r in rows}
    assert len(rows) == 2 and -0.03 < errors[False] < 0 and abs(errors[True]) < 0.01, errors
