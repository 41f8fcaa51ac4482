"""Inkling-2's layers as its modeling files run them (modeling_inkling2.py, modeling_inkling2_loop.py): the tensors
its attention, block attention residuals and softcapped experts keep, the gathered position bias's index, the fp32
soft-capped logits, and the looped variant's passes.

CPU-simulated (data/measurements/cpu-sim-extra.jsonl, FINDINGS.md F97): Inkling-2-Loop's class default at 6 layers
read -12.1% and at 12 layers, its loop run three times, -20.6%, where each loop layer was priced once and Inkling's
own tensors as a plain layer's."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from transformers import CONFIG_MAPPING

from generator.accuracy_rows import estimate_bytes
from generator.estimator.graph.nodes import build_graph
from generator.estimator.graph.parts import Block
from generator.estimator.inputs import Assumptions
from generator.estimator.memory.activations import adapter_activation_bytes, regime
from generator.estimator.memory.attention import eager_layer_terms, score_bytes
from generator.estimator.memory.ends import head_activation_bytes
from generator.estimator.memory.job_options import layer_input_bytes
from generator.estimator.memory.lora import block_lora_params
from generator.estimator.normalise import normalise
from generator.settings import load_settings
from tests.conftest import measured_rows

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "measurements" / "configs"


def _loop(**changes):
    return normalise({**CONFIG_MAPPING["inkling2_loop_text"]().to_dict(), **changes}, "loop")


def test_every_pass_of_the_loop_is_a_layer() -> None:
    """The class default loops layers 6-17 three times: 6 + 3 x 12 + 6 layers, the first pass holding the loop's
    weights (its message gates idle), the later two shared passes whose gates run; the layers after the loop
    follow the passes, and the KV cache has a slot for every pass (Inkling2LoopTextModel.forward's cache copies)."""
    a = _loop()
    blocks = a.spec.blocks
    assert len(blocks) == a.layers == 48 and [b.index for b in blocks] == list(range(1, 49))
    gates = {b.index: next(p for p in b.parts if p.type == "Message gates") for b in blocks[6:42]}
    assert all(g.params and g.matmul and g.active_matmul == 0 and not g.act and not g.act32
               for i, g in gates.items() if i <= 18)
    assert all(not g.params and not g.matmul and g.active_matmul == gates[7].matmul and g.act and g.act32
               for i, g in gates.items() if i > 18)
    assert all(b.params for b in blocks[:18]) and not any(b.params for b in blocks[18:42])
    assert all(b.params for b in blocks[42:])
    assert blocks[18].parts[1].name == "Attention_19" and blocks[42].parts[1].name == "Attention_43"
    # a later pass of loop layer 7 keeps what its first pass keeps, and its gates' and messages' tensors
    assert blocks[18].act32 > blocks[6].act32 and blocks[18].act > blocks[6].act
    assert sum(p.kv for b in blocks for p in b.parts) == 3 * sum(p.kv for b in blocks[6:18] for p in b.parts) \
        + sum(p.kv for b in blocks[:6] + blocks[42:] for p in b.parts)
    one = _loop(loop_num_passes=1)
    assert len(one.spec.blocks) == 24 and build_graph(one).params_total == build_graph(a).params_total
    assert normalise({**CONFIG_MAPPING["inkling2_text"]().to_dict()}, "i").layers == 48


def test_a_loop_beyond_the_layers_runs_none() -> None:
    """Shrunk below the loop's start (the harness's --max-layers 6), no layer loops, as self.layers[6:18] is
    empty; a loop cut short by the layers runs the layers there are."""
    assert len(_loop(num_hidden_layers=6, layer_types=None).spec.blocks) == 6
    assert len(_loop(num_hidden_layers=12, layer_types=None).spec.blocks) == 12 + 2 * 6


def test_what_the_model_keeps_outside_its_layers() -> None:
    """The class default (24 layers, blocks of 6, layers 6-17 looped three times): final_input stacks the 4 block
    states and the hidden state; each of the 24 later-pass loop layers' message_input stacks 2 (the previous pass's
    states past its first, and its last hidden state) with 4 queries. Checkpointed, the layers take as inputs the
    block-states tensors each boundary layer makes (1 + 3 x (2 + 3) + 4 rows) and the messages (4 rows each)."""
    a = _loop()
    h = a.hidden
    query = a.spec.head[0]
    assert query.name == "Final_Input_Query" and query.params == h
    assert query.act == (5 + 1 + 24 * (4 + 2)) * h and query.act32 == (5 + 24 * 2) * (h + 1)
    assert a.spec.input_rows == 1 + 3 * (2 + 3) + 4 + 4 * 24
    plain = normalise({**CONFIG_MAPPING["inkling2_text"]().to_dict()}, "i")  # 48 layers, no loop
    assert plain.spec.head[0].act == (8 + 1 + 1) * plain.hidden and plain.spec.input_rows == sum(range(1, 9))
    s, r = Assumptions(), regime("lora", "amp")
    g = build_graph(a)
    bare = dataclasses.replace(a.spec, head=(query._replace(act=0, act32=0), *a.spec.head[1:]))
    assert head_activation_bytes(a, g, r, s) - head_activation_bytes(a, build_graph(dataclasses.replace(a, spec=bare)),
                                                                     r, s) == 2 * query.act + 4 * query.act32
    assert layer_input_bytes(g, r) == 2 * h + 2 * h * a.spec.input_rows // 48


def test_a_block_state_no_layer_reads_is_not_kept() -> None:
    """Blocks of one layer, layers 1-2 looped twice (4 layers): every layer appends a block state, but the one the
    loop's last layer appends before the second pass starts again from the states before the loop is read by no
    layer. Kept: 1 + 2 (the first pass), 2 + 3 (the second), and 4 rows of messages for each of the two layers of
    the second pass; the message stack is the previous pass's one state past its first, and its hidden state."""
    a = _loop(num_hidden_layers=4, layer_types=None, n_layers_per_attn_res_block=1, loop_layer_index_start=1,
              loop_layer_index_end=3, loop_num_passes=2)
    assert len(a.spec.blocks) == 6 and a.spec.input_rows == (1 + 2) + (2 + 3) + 2 * 4
    assert a.spec.head[0].act == (5 + 1 + 2 * (4 + 2)) * a.hidden


def test_the_first_pass_gates_hold_adapters_that_see_no_input() -> None:
    """peft adapts the message gates' Linears (all-linear): their LoRA weights are counted once, on the loop's first
    pass, which does not run them; only the later passes keep their inputs."""
    a = _loop()
    first, later = a.spec.blocks[6], a.spec.blocks[18]
    r = regime("lora", "amp")
    gates = next(p for p in first.parts if p.type == "Message gates")
    without = Block(first.index, first.kind, tuple(p for p in first.parts if p is not gates), first.stack)
    assert adapter_activation_bytes(first, None, 16, r) == adapter_activation_bytes(without, None, 16, r)
    assert adapter_activation_bytes(later, None, 16, r) > adapter_activation_bytes(first, None, 16, r)
    assert block_lora_params(first, 16, None) > block_lora_params(without, 16, None)
    assert block_lora_params(later, 16, None) == 0


def test_block_residuals_grow_with_the_block_states() -> None:
    """Layer i reads ceil((i - 1) / 6) block states and the partial state at each residual; a block's first layer
    one more at its MLP input: 2 x (states + 1) fp32 rows of hidden (and a statistic each) from the second layer
    of a block on."""
    a = normalise({**CONFIG_MAPPING["inkling2_text"]().to_dict()}, "i")
    h = a.hidden
    sliding = [b for b in a.spec.blocks if b.kind == "sliding"]
    by_index = {b.index: b for b in sliding}
    assert by_index[3].act32 - by_index[2].act32 == 0  # the same block
    assert by_index[9].act32 - by_index[3].act32 == 2 * (h + 1)  # one block state more at each residual
    assert by_index[13].act32 - by_index[9].act32 == h + 1  # a block's first layer: one more at its MLP input
    assert by_index[14].act32 - by_index[13].act32 == h + 1  # the block state layer 13 appended, at both


def test_the_gathered_bias_keeps_an_index_and_a_mask_per_layer() -> None:
    """Inkling2RelativePositionBias: gather keeps its int64 index (T x T) and masked_fill its bool mask, in every
    layer, beside the heads x T x T scores; a model without it keeps neither."""
    a = _loop(num_hidden_layers=6, layer_types=None)
    b = a.spec.blocks[0]
    r = regime("lora", "amp")
    heads = next(p.heads for p in b.parts if p.attends)
    assert eager_layer_terms(a, b, 2, False, r)[1] == heads * score_bytes(a, 2, r) + 9
    llama = normalise(json.loads((CONFIGS / "llama.json").read_text()), "llama")
    lb = llama.spec.blocks[0]
    assert eager_layer_terms(llama, lb, 2, False, r)[1] == llama.heads * score_bytes(llama, 2, r)


def test_capped_logits_upcast_first_keep_an_fp32_tanh() -> None:
    """Inkling2ForCausalLM casts the logits to fp32 before Inkling2Softcap: tanh keeps 4 bytes a logit, where
    gemma2's bf16 logits keep 2."""
    s, r = Assumptions(), regime("lora", "amp")
    a = _loop(num_hidden_layers=6, layer_types=None)
    capped = head_activation_bytes(a, build_graph(a), r, s)
    plain = head_activation_bytes(*(lambda x: (x, build_graph(x)))(_loop(num_hidden_layers=6, layer_types=None,
                                                                         final_logit_softcapping=None)), r, s)
    assert capped - plain == 4 * a.spec.logits
    g2 = normalise(json.loads((CONFIGS / "gemma2.json").read_text()), "g2")
    assert head_activation_bytes(g2, build_graph(g2), r, s) - head_activation_bytes(
        *(lambda x: (x, build_graph(x)))(normalise({**g2.raw, "final_logit_softcapping": None}, "g2")), r, s) \
        == 2 * g2.spec.logits


SIMULATED = ("inkling2_text", "inkling2_loop_text")


def test_the_simulated_steps() -> None:
    """Inkling-2 and Inkling-2-Loop, LoRA with and without checkpointing and a full fine-tune, within 1.5%."""
    s = load_settings().assumptions
    errors: dict[str, list[float]] = {}
    for r in measured_rows("cpu-sim-extra"):
        if r["model_type"] in SIMULATED:
            errors.setdefault(r["model_type"], []).append(estimate_bytes(r, s) / r["measured"]["peak_bytes"] - 1)
    assert set(errors) == set(SIMULATED), errors
    assert all(abs(e) < 0.015 for es in errors.values() for e in es), errors
