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
    return attention_part(f"Attention_{i}", "Relative Attn", h, heads, kv, hd, window=window if sliding else 0,
                          extra=extra, extra_linears=((h, heads * hd), (h, heads), (h, heads * d_rel)))


def _layer(r: Reader, i: int, sliding: bool, looped: bool) -> Block:
    """Decoder layer i (from 1): attention, an MoE (router weight, 3-D experts), the block attention residual
    queries (attention_input from the second layer on: three on full layers; mlp_input), RMSNorms (full layers
    normalise q, k and v inputs apart), two depthwise convolutions of hidden x kernel after attention and the MLP;
    a looped layer (modeling_inkling2_loop.Inkling2LoopMessageGate, four) adds down_proj 2 hidden -> rank and
    forget/message gates rank -> hidden."""
    h, kernel = r.int("hidden_size"), r.int("conv_kernel_size")
    experts, top_k = r.int("n_routed_experts"), r.int("num_experts_per_tok")
    ffn = moe_part(f"MoE_{i}", h, experts, top_k, r.int("moe_intermediate_size"))
    ffn = ffn._replace(type=f"MoE ({experts} experts, top-{top_k})")
    block = standard_block(i, [], _attention(r, i, sliding), ffn, "rmsnorm", h, kind="sliding" if sliding else "attention")
    queries = (0 if i == 1 else h if sliding else 3 * h) + h
    extra = [Part(f"Residual_Queries_{i}", "Parameters", queries), Part(f"Short_Convs_{i}", "Conv1d", 2 * h * kernel)]
    if not sliding:
        extra += [norm_part(f"K_Input_RMSNorm_{i}", "rmsnorm", h), norm_part(f"V_Input_RMSNorm_{i}", "rmsnorm", h)]
    if looped:
        rank = r.int("loop_gate_rank")
        extra.append(Part(f"Message_Gates_{i}", "Message gates", 4 * (linear(2 * h, rank) + 2 * linear(rank, h)),
                          matmul=4 * (2 * h * rank + 2 * rank * h)))
    return dataclasses.replace(block, parts=(*block.parts, *extra))


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
    blocks = [_layer(r, i + 1, types[i] == "hybrid_sliding", start <= i < end) for i in range(n)]
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h), Part("RoPE", "RoPE"),
             norm_part("Embedding_RMSNorm", "rmsnorm", h)]
    if loop:
        embed.append(Part("Message_Queries", "Parameters", (end - start) * 4 * h))
    head = [Part("Final_Input_Query", "Parameters", h), norm_part("Final_RMSNorm", "rmsnorm", h),
            lm_head_part(out, h, False), Part("Output", "Output", width=out)]
    window = r.int("sliding_window_size")
    return assemble(cfg, model, r, hidden=h, layers=n, heads=r.int("num_attention_heads"),
                    kv=r.int("num_key_value_heads"), head_dim=r.int("head_dim"), inter=r.int("moe_intermediate_size"),
                    vocab=vocab, ctx=r.int("max_position_embeddings"), tie=False, embed=embed, blocks=blocks,
                    head=head, windows=tuple(window if t == "hybrid_sliding" else 0 for t in types[:n]),
                    experts=r.int("n_routed_experts"), top_k=r.int("num_experts_per_tok"), logits=out)


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
