"""Inkling-2 and its looped variant (modeling_inkling2.py, modeling_inkling2_loop.py): text towers and VLM wrappers.

A layer is relative-position attention (gated output, per-head sinks, short convolutions on K and V: static ones on
"hybrid_sliding" layers, dynamic ones on full layers), a routed MoE without shared experts, and block attention
residuals (learned queries); the looped variant adds message gates on the layers it loops.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader, architectures_of
from ..graph.layout import standard_block
from ..graph.parts import Block, Part, attention_part, linear, lm_head_part, moe_part, norm_part
from .assembly import Builder, TextReader, Wrapper, assemble
from .shared_layer_encoders import shared_pass
from .vision_towers import vit_layer


def _attention(r: Reader, i: int, sliding: bool) -> Part:
    """modeling_inkling2.Inkling2SlidingAttention / Inkling2FullAttention of layer i (from 1): q_proj (linear and
    a per-head scale), k_proj / v_proj (linear and a depthwise short convolution without bias; on full layers a
    dynamic one: static taps plus weight_proj hidden -> kv heads x kernel), a gated o_proj (gate_proj, linear),
    sink_proj (hidden -> heads) and the relative position bias (linear hidden -> heads x d_rel, a per-head scale
    and a bank of d_rel x extent profiles; the extent is the window on sliding layers, else rel_extent)."""
    h, pre = r.int("hidden_size"), "swa_" if sliding else ""
    heads, kv, hd = r.int(pre + "num_attention_heads"), r.int(pre + "num_key_value_heads"), r.int(pre + "head_dim")
    kernel, d_rel, window = r.int("conv_kernel_size"), r.int("d_rel"), r.int("sliding_window_size")
    extent = window if sliding else r.int("rel_extent")
    conv = 2 * kv * hd * kernel + (0 if sliding else 2 * linear(h, kv * kernel))
    extra = heads * hd + conv + h * heads * hd + h * heads + linear(h, heads * d_rel) + heads * d_rel + d_rel * extent
    dynamic = () if sliding else ((h, kv * kernel),) * 2  # the dynamic convolutions' weight_proj Linears
    return attention_part(f"Attention_{i}", "Relative Attn", h, heads, kv, hd, window=window if sliding else 0,
                          extra=extra, extra_linears=((h, heads * hd), (h, heads), (h, heads * d_rel), *dynamic))


def _saved(r: Reader, i: int, sliding: bool, heads: int, kv: int, hd: int) -> tuple[int, int, int]:
    """(compute-dtype, fp32, trained) elements per token layer i (from 1) saves beyond a plain eager layer, read off
    modeling_inkling2.py and the live tensors of CPU-simulated LoRA and full steps (FINDINGS.md F97):
    - attention: the fp32 scaled query (Inkling2ScaledL2Clip), the fp32 key and value norms' inputs, the fp32 gate
      sigmoid and attention output of Inkling2GatedOutputProjection, the relative bias's fp32 scaled states and its
      per-head bias profiles (rel_logits, heads x extent, which gather keeps), the norms' per-head statistics and the
      sink's softmax column; a static short convolution's input cast (sliding layers) or a dynamic one's fp32 taps
      and windows (Inkling2DynamicShortConvolution, full layers);
    - the block attention residuals (Inkling2BlockAttentionResidual): each stacks the block states so far with the
      partial state in fp32 (its norm's input), and its matmuls keep a compute-dtype copy of the stack and of the
      queries; layer i reads ceil((i - 1) / n_layers_per_attn_res_block) block states, a block's first layer one
      more at its MLP input;
    - the post-attention and post-MLP convolutions' input casts;
    - where the weights train (compute-dtype elements, two an fp32 one): the query's and the bias states' fp32 inputs
      to their trained scales, and each residual's stack cast again for its trained queries' gradient."""
    h, kernel, block = r.int("hidden_size"), r.int("conv_kernel_size"), r.int("n_layers_per_attn_res_block")
    extent = r.int("sliding_window_size") if sliding else r.int("rel_extent")
    f32 = 3 * heads * hd + 2 * kv * hd + heads * r.int("d_rel") + 9 * heads + (0 if sliding else 4 * kv * hd * kernel)
    comp = heads * extent + (2 * kv * hd if sliding else 0)
    states = -(-(i - 1) // block)  # block states at the layer's input
    attn_in = states + 1 if i > 1 else 0
    mlp_in = states + 1 + (1 if (i - 1) % block == 0 else 0)
    queries = (1 if sliding else 3) if i > 1 else 0
    f32 += (attn_in + mlp_in) * (h + 1)
    comp += (attn_in + queries + mlp_in + 1) * h + 2 * h
    return comp, f32, 2 * heads * (hd + r.int("d_rel")) + (attn_in + mlp_in) * h


def _layer(r: Reader, i: int, sliding: bool, looped: bool, at: int) -> Block:
    """Decoder layer i (from 1): attention, an MoE (router weight, 3-D experts), the block attention residual
    queries (attention_input from the second layer on: three on full layers; mlp_input), RMSNorms (full layers
    normalise q, k and v inputs apart), two depthwise convolutions of hidden x kernel after attention and the MLP;
    a looped layer (modeling_inkling2_loop.Inkling2LoopMessageGate, four) adds down_proj 2 hidden -> rank and
    forget/message gates rank -> hidden, which run from the loop's second pass on (_message_pass). `at`: the
    layer's place in the graph, where a loop's passes come before the layers after it. Inkling2SoftcappedSwiGLU
    keeps six fp32 tensors per routed token and intermediate unit (both softcaps' tanh and product, the sigmoid, the
    gated product) in place of a SwiGLU's three; each routed token's weighted expert output is kept, and, where the
    experts train, its gathered input and the down projection's input (F97)."""
    h, kernel = r.int("hidden_size"), r.int("conv_kernel_size")
    experts, top_k, inter = r.int("n_routed_experts"), r.int("num_experts_per_tok"), r.int("moe_intermediate_size")
    ffn = moe_part(f"MoE_{at}", h, experts, top_k, inter)
    k = ffn.top_k
    ffn = ffn._replace(type=f"MoE ({experts} experts, top-{top_k})", act=2 * k * h + k * inter, act_frozen=k * h,
                       act32=ffn.act32 + 6 * k * inter)
    pre = "swa_" if sliding else ""
    attn = _attention(r, at, sliding)
    comp, f32, trained = _saved(r, i, sliding, r.int(pre + "num_attention_heads"), r.int(pre + "num_key_value_heads"),
                                r.int(pre + "head_dim"))
    attn = attn._replace(act=attn.act + comp + trained, act_frozen=attn.frozen_act + comp, act32=attn.act32 + f32)
    block = standard_block(at, [], attn, ffn, "rmsnorm", h, kind="sliding" if sliding else "attention")
    queries = (0 if i == 1 else h if sliding else 3 * h) + h
    extra = [Part(f"Residual_Queries_{at}", "Parameters", queries), Part(f"Short_Convs_{at}", "Conv1d", 2 * h * kernel)]
    if not sliding:
        extra += [norm_part(f"K_Input_RMSNorm_{at}", "rmsnorm", h), norm_part(f"V_Input_RMSNorm_{at}", "rmsnorm", h)]
    if looped:  # held here, run by the later passes only (no compute in the first)
        rank = r.int("loop_gate_rank")
        lin = ((2 * h, rank), (rank, h), (rank, h)) * 4
        extra.append(Part(f"Message_Gates_{at}", "Message gates", sum(linear(a, b) for a, b in lin),
                          matmul=sum(a * b for a, b in lin), active_matmul=0, linears=lin))
    return dataclasses.replace(block, parts=(*block.parts, *extra))


def _message_pass(b: Block, r: Reader, sliding: bool, at: int) -> Block:
    """Loop layer `b` run again as layer `at` (shared_pass), its message gates now running: per token, each of the
    four Inkling2LoopMessageGate keeps its hidden and message inputs cast to fp32, both tanh gates and 1 - forget in
    the compute dtype (its fp32 Linears' autocast output) and two norm statistics; a sliding layer's q, k and v gate
    outputs are normed apart, two fp32 norm inputs more than the first pass's one (modeling_inkling2_loop.py, F97)."""
    h = r.int("hidden_size")
    f32 = 4 * (2 * h + 2) + (2 * (h + 1) if sliding else 0)
    again = shared_pass(b, at).parts
    parts = tuple(p._replace(active_matmul=src.matmul, act=12 * h, act32=f32) if src.type == "Message gates" else p
                  for src, p in zip(b.parts, again, strict=True))
    return Block(at, b.kind, parts, b.stack)


def _outside(r: Reader, n: int, looped: range, passes: int) -> tuple[int, int, int]:
    """(compute-dtype, fp32, checkpointed-input) rows of hidden width per token the model keeps outside its layers
    (Inkling2TextModel.forward, Inkling2LoopTextModel.forward):
    - final_input, a block attention residual over the last pass's block states and the hidden state (fp32 stack,
      its compute-dtype copy, the query's);
    - each later pass's message_input per loop layer (Inkling2LoopMessageAttentionResidual: the previous pass's
      block states past the first it appended, and its last hidden state, stacked in fp32, their copy, four
      queries');
    - under checkpointing, the layers' inputs beside the hidden state: each block-states tensor a boundary layer
      appends (read by the layers up to the next boundary), and each later pass's messages (four rows a layer)."""
    block = r.int("n_layers_per_attn_res_block")
    final = sum(1 for i in range(n) if i % block == 0) + 1
    stacked = max(sum(1 for i in looped if i % block == 0) - 1, 0) + 1  # past the first it appended; its hidden
    messages = (passes - 1) * len(looped)
    order = [*range(min(looped.start, n)), *[i for _ in range(passes) for i in looped], *range(looped.stop, n)]
    states = rows = 0
    for k, i in enumerate(order):  # a later pass starts again from the block states before the loop
        if looped and k and i == looped.start and order[k - 1] != i - 1:
            states = -(-looped.start // block)
        if i % block == 0:  # a new tensor, kept where the next layer to run reads it (a later pass restarts)
            states += 1
            rows += states if k + 1 < len(order) and order[k + 1] == i + 1 else 0
    comp = final + 1 + messages * (4 + stacked)
    return comp, final + messages * stacked, rows + 4 * messages


def _text(cfg: Mapping[str, Any], model: str, model_type: str, loop: bool) -> Arch:
    """modeling_inkling2.Inkling2ForCausalLM (Inkling2LoopForCausalLM): an RMS-normed embedding of vocab_size, the
    layers ("hybrid_sliding" unless every 6th), a final RMSNorm and final_input query, and an untied head of
    unpadded_vocab_size; the looped model adds message_input queries (looped layers x 4 x hidden)."""
    r = Reader(cfg, model, model_type)
    h, n, vocab, out = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("vocab_size"), r.int("unpadded_vocab_size")
    types = r.list("layer_types", str, length=n) or ["hybrid" if (i + 1) % 6 == 0 else "hybrid_sliding" for i in range(n)]
    start, end = (r.int("loop_layer_index_start"), r.int("loop_layer_index_end")) if loop else (0, 0)
    if loop and end < start:
        raise ConfigError(model, "loop_layer_index_end", end, f"is below loop_layer_index_start {start}")
    passes = r.int("loop_num_passes", 3) if loop else 1
    looped = range(start, min(end, n))
    extra = (passes - 1) * len(looped)  # the later passes' layers, laid out before the layers after the loop
    blocks = [_layer(r, i + 1, types[i] == "hybrid_sliding", i in looped, i + 1 + (extra if i >= end else 0))
              for i in range(n)]
    again = [_message_pass(blocks[i], r, types[i] == "hybrid_sliding", start + (k + 1) * len(looped) + j + 1)
             for k in range(passes - 1) for j, i in enumerate(looped)]
    blocks = blocks[:end] + again + blocks[end:]
    kinds = [types[i] for i in range(n) if i < end] + [types[i] for _ in range(passes - 1) for i in looped] \
        + [types[i] for i in range(end, n)]
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h), Part("RoPE", "RoPE"),
             norm_part("Embedding_RMSNorm", "rmsnorm", h)]
    if loop:
        embed.append(Part("Message_Queries", "Parameters", (end - start) * 4 * h))
    comp, f32, rows = _outside(r, n, looped if loop else range(0), passes)
    head = [Part("Final_Input_Query", "Parameters", h, act=comp * h, act32=f32 * (h + 1)),
            norm_part("Final_RMSNorm", "rmsnorm", h),
            lm_head_part(out, h, False), Part("Output", "Output", width=out)]
    window = r.int("sliding_window_size")
    return assemble(cfg, model, r, hidden=h, layers=len(blocks), heads=r.int("num_attention_heads"),
                    kv=r.int("num_key_value_heads"), head_dim=r.int("head_dim"), inter=r.int("moe_intermediate_size"),
                    vocab=vocab, ctx=r.int("max_position_embeddings"), tie=False, embed=embed, blocks=blocks,
                    head=head, windows=tuple(window if t == "hybrid_sliding" else 0 for t in kinds),
                    experts=r.int("n_routed_experts"), top_k=r.int("num_experts_per_tok"), logits=out, input_rows=rows)


def inkling2_text(cfg: Mapping[str, Any], model: str) -> Arch:
    return _text(cfg, model, "inkling2_text", loop=False)


def inkling2_loop_text(cfg: Mapping[str, Any], model: str) -> Arch:
    return _text(cfg, model, "inkling2_loop_text", loop=True)


def _vision(r: Reader, vc: Mapping[str, Any], th: int) -> tuple[Part, Part, int]:
    """modeling_inkling2.Inkling2VisionModel: a Linear patch embedding (channels x patch^2 -> hidden, no bias),
    posemb_grid_size^2 learned positions, class and class-position embeddings, pre-LayerNorm, LayerNorm layers with
    biased q/k/v/out and fc1/fc2 (intermediate_size, else hidden x mlp_ratio) and layer scales; the merger
    (Inkling2VisionMerger: linear_1 m^2 v -> projection_hidden_dim, linear_2 -> text_hidden_size, projector_bias)."""
    v = r.child(vc, "inkling2_vision", prefix="vision_config.")
    h, n, p = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("patch_size")
    inter = v.opt_int("intermediate_size") or int(h * v.number("mlp_ratio", 4.0, high=1e6))
    grid, m, mid, bias = v.int("posemb_grid_size"), v.int("spatial_merge_size"), v.int("projection_hidden_dim"), \
        v.flag("projector_bias")
    out = v.int("text_hidden_size", th)
    params = v.int("num_channels", 3) * p * p * h + grid * grid * h + 2 * h + 2 * h + n * vit_layer(h, inter, extra=2 * h)
    tower = Part("Vision_Tower", f"Vision transformer ({n} layers)", params, matmul=n * (4 * h * h + 2 * h * inter))
    wide = m * m * h
    proj = Part("Projector", "Patch merger", linear(wide, mid, bias) + linear(mid, out, bias), matmul=wide * mid + mid * out)
    return tower, proj, (448 // p) ** 2 // (m * m)  # a nominal 448 x 448 image


def inkling2(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_inkling2.Inkling2ForConditionalGeneration (Inkling2LoopForConditionalGeneration alike): the text
    tower of text_config, the vision tower with its merger, and the head of the text tower (never tied)."""
    mt = str(cfg.get("model_type"))
    tt = f"{mt}_text"
    text_cfg = cfg.get("text_config") or {}
    if not isinstance(text_cfg, Mapping):
        raise ConfigError(model, "text_config", text_cfg, "must be a JSON object")
    text = read_text(dict(text_cfg, model_type=tt), model)
    archs = architectures_of(cfg, model)
    if archs and archs[0].endswith("ForCausalLM"):
        return dataclasses.replace(text, model_type=mt, architectures=archs)
    r = Reader(cfg, model, mt)
    tower, proj, tokens = _vision(r, cfg.get("vision_config") or {}, text.hidden)
    spec = dataclasses.replace(text.spec, embed=(*text.spec.embed, tower, proj), image_tokens=tokens)
    return dataclasses.replace(text, model_type=mt, family=mt, spec=spec, uses=tuple(r.uses) + text.uses,
                               architectures=archs)


BUILDERS: dict[str, Builder] = {"inkling2_text": inkling2_text, "inkling2_loop_text": inkling2_loop_text}
WRAPPERS: dict[str, Wrapper] = {"inkling2": inkling2, "inkling2_loop": inkling2}
