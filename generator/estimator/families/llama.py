"""llama and the decoders that descend from it: traits per model_type (transformers 5.24 modeling_<type>.py), and HRM-Text and Dory, which vary its layer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader
from ..config.windows import RULES
from ..graph.layout import standard_block
from ..graph.parts import (
    Block,
    Part,
    attention_part,
    attention_type,
    linear,
    lm_head_part,
    mlp_part,
    norm_part,
)
from .assembly import Builder, assemble
from .decoder import DecoderTraits, Dims, build, partial_rotary
from .shared_layer_encoders import shared_pass

ALL_LAYERS = RULES["mistral"]  # every layer uses config.sliding_window


def _stablelm_layout(d: Dims) -> tuple[tuple[str, ...], bool]:
    return (("pre_attn",), True) if d.f("use_parallel_residual") else (("pre_attn", "pre_mlp"), False)


LLAMA = DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias")


def _xielu(d: Dims) -> int:
    # modeling_apertus.py: the xIELU activation holds alpha_p and alpha_n (one scalar each).
    return 2 if (d.r.str("hidden_act", "xielu") or "") == "xielu" else 0


def _hyperclovax_layout(d: Dims) -> tuple[tuple[str, ...], bool]:
    # modeling_hyperclovax.py HyperCLOVAXDecoderLayer: post_norm1 / post_norm2 (RMSNorm) on the attention's and the
    # MLP's output before each residual add when use_post_norm (else nn.Identity): norms that save their input too.
    post = d.f("use_post_norm", True)
    return (("pre_attn", "post_attn", "pre_mlp", "post_mlp") if post else ("pre_attn", "pre_mlp")), False


def moshi(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_moshi.py (MoshiForCausalLM): gated fc1 (hidden -> ffn_dim = 2 x width) / fc2 (width -> hidden),
    # an embedding of vocab_size + 1 rows, an untied head of vocab_size.
    r = Reader(cfg, model, "moshi")
    t = DecoderTraits(fused_gate_up=True, inter_key="intermediate_size", top_extra=lambda d: d.hidden, never_tie=True)
    return build(dict(cfg, intermediate_size=r.int("ffn_dim") // 2), model, "moshi", t)


def hrm_text(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_hrm_text.py: two stacks (L and H modules) of num_layers_per_stack layers with gated
    attention (gate_proj hidden -> hidden) and SwiGLU, a learned z_L_init, and parameter-free RMSNorms
    (HrmTextRMSNorm: x.float() times its rsqrt, its fp32 input saved) after attention and the MLP and at the end of
    every pass of a stack (HrmTextStack.final_norm).
    HrmTextModel.forward runs, per H cycle, the L stack L_cycles times and then the H stack once, each pass a cache
    slot (H_cycles x (L_cycles + 1) x num_layers_per_stack of them, num_hidden_layers): every pass is a layer of
    the graph, the first of each stack holding its parameters, the later ones shared (shared_pass). Of a cycle's L
    passes only the last L_bp_cycles[h] (padded with 1s at the front to H_cycles) run with gradients; the earlier
    ones run under torch.no_grad (Spec.no_grad): no activations kept, no backward."""
    r = Reader(cfg, model, "hrm_text")
    h, heads, hd, inter, vocab = (r.int("hidden_size"), r.int("num_attention_heads"), r.int("head_dim"),
                                  r.int("intermediate_size"), r.int("vocab_size"))
    per = r.int("num_layers_per_stack")
    kv = r.int("num_key_value_heads", heads)
    ab, mb = r.flag("attention_bias", False), r.flag("mlp_bias", False)
    cycles_h, cycles_l = r.int("H_cycles", 2), r.int("L_cycles", 2)
    raw = r.list("L_bp_cycles", int) or [2]  # HrmTextConfig.__post_init__'s default
    if any(x < 0 for x in raw):  # 0: every L pass of that cycle without gradients (HRM-Text-1B's [0, 3])
        raise ConfigError(model, "L_bp_cycles", raw, "must be whole numbers of 0 or more")
    grads = [1] * max(0, cycles_h - len(raw)) + raw  # HrmTextModel.L_bp_cycles_padded

    def stack(first: int) -> list[Block]:  # one stack's layers, numbered from its first pass
        out = []
        for i in range(first, first + per):
            attn = attention_part(f"Attention_{i}", attention_type(heads, kv), h, heads, kv, hd, qkv_bias=ab,
                                  o_bias=ab, extra=linear(h, heads * hd, ab), extra_linears=((h, heads * hd),))
            out.append(standard_block(i, [], attn, mlp_part(f"FFN_{i}", "SwiGLU", h, inter, True, mb),
                                      "rmsnorm_noparams", h, norms=("post_attn", "post_mlp")))
        # every pass of a stack ends in its final_norm (HrmTextStack.forward)
        last = out[-1]
        out[-1] = Block(last.index, last.kind, (*last.parts, norm_part(f"Stack_Norm_{last.index}", "rmsnorm_noparams",
                                                                       h)), last.stack)
        return out

    made: dict[str, list[Block]] = {}  # each stack's layers as its first pass built them
    blocks: list[Block] = []
    no_grad: set[int] = set()
    for c in range(cycles_h):
        for pass_ in range(cycles_l + 1):  # the L stack's passes, then the H stack's
            name = "H" if pass_ == cycles_l else "L"
            if pass_ < cycles_l - grads[c]:  # under torch.no_grad
                no_grad.update(range(len(blocks), len(blocks) + per))
            first = name not in made
            layers = made.setdefault(name, stack(len(blocks) + 1))
            blocks += layers if first else [shared_pass(b, len(blocks) + k + 1) for k, b in enumerate(layers)]
    tie = r.flag("tie_word_embeddings", False)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h), Part("Z_L_Init", "Parameters", h)]
    head = [lm_head_part(vocab, h, tie), Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=len(blocks), heads=heads, kv=kv, head_dim=hd, inter=inter,
                    vocab=vocab, ctx=r.int("max_position_embeddings", 2048), tie=tie, embed=embed, blocks=blocks,
                    head=head, no_grad=frozenset(no_grad))


def dory(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_dory.py: nGPT-style layers on the unit sphere. Parameter-free L2 norms (four per layer, q/k,
    sub-norms, final); attention q/k/v/o (attention_bias) plus a gate_proj (hidden -> heads x head_dim) and
    sqk/s_gate scales (heads x head_dim each); a SwiGLU MLP with suv_gate/suv_up scales (intermediate each);
    per-layer lambda_1/lambda_2 (hidden each); an lm_head with a logit_scale (vocab). Released configs list
    each layer as ("<attention>", "mlp") blocks: configuration_dory.__post_init__ halves layer_types and the
    layer counts, as here. Sliding layers: layer_types, or every 4th layer global. The recurrent section
    (n_recurrent_layers) runs n_recurrent_loops times; compute and activations count one pass."""
    r = Reader(cfg, model, "dory")
    types = cfg.get("layer_types")
    src = dict(cfg)
    if isinstance(types, list) and "mlp" in types:
        src["layer_types"] = types[::2]
        src["num_hidden_layers"] = r.int("num_hidden_layers") // 2
    t = DecoderTraits(norm="layernorm_noparams", norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"),
          qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias",
          attn_linears=lambda d: ((d.hidden, d.heads * d.hd),), attn_extra=lambda d: 2 * d.heads * d.hd,
          mlp_extra=lambda d: 2 * d.inter, layer_extra=lambda d: 2 * d.hidden, extra_head=lambda d: d.vocab,
          window_rule=lambda r, n, w: [0 if (i + 1) % 4 == 0 else w for i in range(n)])
    return build(src, model, "dory", t)


TRAITS: dict[str, DecoderTraits] = {
    # llama and its first descendants (modeling_llama.py, modeling_mistral.py, modeling_qwen2.py, ...)
    "llama": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias"),
    "mistral": DecoderTraits(),
    "qwen2": DecoderTraits(qkv_bias=True),
    "qwen3": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="head"),
    "phi3": DecoderTraits(fused_qkv=True, fused_gate_up=True),
    "olmo": DecoderTraits(norm="layernorm_noparams", qkv_bias="attention_bias", o_bias="attention_bias"),
    "olmo2": DecoderTraits(norms=("post_attn", "post_mlp"), qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="flat"),
    "stablelm": DecoderTraits(norm="layernorm", qkv_bias="use_qkv_bias", qk_norm="head", qk_norm_kind="layernorm_nobias",
                  qk_norm_key="qk_layernorm", layout=_stablelm_layout, o_in_hidden=True, rotary=partial_rotary(0.25)),
    "starcoder2": DecoderTraits(norm="layernorm", mlp="plain", qkv_bias="use_bias", o_bias="use_bias", mlp_bias="use_bias",
                    tie=True, act_default="gelu_pytorch_tanh", defaults={"use_bias": True}),
    "cohere": DecoderTraits(norm="layernorm_nobias", norms=("pre_attn",), parallel=True, qkv_bias="attention_bias",
                o_bias="attention_bias", qk_norm="per_head", qk_norm_key="use_qk_norm", tie=True),
    # modeling_llama.py descendants with llama's keys
    "arcee": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias", mlp="plain"),
    "cwm": DecoderTraits(mlp_bias="mlp_bias"),
    "exaone": LLAMA,
    "internlm3": LLAMA,
    "iquestcoder": LLAMA,
    "helium": DecoderTraits(qkv_bias="attention_bias", mlp_bias="mlp_bias"),
    "granite": LLAMA,
    "ministral": DecoderTraits(),
    "ministral3": DecoderTraits(),
    "smollm3": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias", tie=True),
    "emu3": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias", text_config=True),
    # modeling_apertus.py: up/down MLP with xIELU, q/k RMSNorm over head_dim
    "apertus": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", mlp="plain", qk_norm="head", mlp_extra=_xielu),
    "apertus1p5_text": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", mlp="plain", qk_norm="head",
                         mlp_extra=_xielu),
    "ernie4_5": DecoderTraits(qkv_bias="use_bias", o_bias="use_bias", mlp_bias="use_bias", tie=True),
    "exaone4": DecoderTraits(norms=("post_attn", "post_mlp"), qk_norm="head"),
    "glm": DecoderTraits(qkv_bias="attention_bias", fused_gate_up=True),
    "glm4": DecoderTraits(norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"), qkv_bias="attention_bias", fused_gate_up=True),
    # modeling_granite_swa.py: per-head attention sinks
    "granite_swa": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias", tie=True,
                     attn_extra=lambda d: d.heads),
    "jais2": DecoderTraits(norm="layernorm", qkv_bias="attention_bias", o_bias="attention_bias", mlp="plain", mlp_bias="mlp_bias"),
    # modeling_nanochat.py: RMSNorm without weights, fc1/fc2 MLP, parameter-free q/k norm
    "nanochat": DecoderTraits(norm="layernorm_noparams", qkv_bias="attention_bias", o_bias="attention_bias", mlp="plain",
                  qk_norm="noscale"),
    "olmo3": DecoderTraits(norms=("post_attn", "post_mlp"), qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="flat"),
    "seed_oss": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_out_bias", mlp_bias="mlp_bias"),
    "vaultgemma": DecoderTraits(norms=("pre_attn", "pre_mlp"), qkv_bias="attention_bias", o_bias="attention_bias", tie=True),
    # modeling_diffllama.py: lambda_q1, lambda_k1, lambda_q2, lambda_k2 of head_dim each
    "diffllama": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", attn_extra=lambda d: 4 * d.hd),
    # modeling_bitnet.py: sub-norms before o_proj (hidden) and down_proj (intermediate)
    "bitnet": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", attn_extra=lambda d: d.hidden,
                mlp_extra=lambda d: d.inter),
    "cohere2": DecoderTraits(norm="layernorm_nobias", norms=("pre_attn",), parallel=True, qkv_bias="attention_bias",
                 o_bias="attention_bias", tie=True),
    "persimmon": DecoderTraits(norm="layernorm", mha=True, qkv_bias=True, o_bias=True, mlp="plain", mlp_bias=True, qk_norm="head",
                   qk_norm_key="qk_layernorm", fused_qkv=True),
    "hyperclovax": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias",
                          layout=_hyperclovax_layout),
    "cohere_compass_text": DecoderTraits(norm="layernorm_nobias", norms=("pre_attn",), parallel=True, qkv_bias="attention_bias",
                             o_bias="attention_bias", tie=True),
    # modeling_doge.py: q/k RMSNorm, dynamic-mask A (K/V heads) and dt_proj (K/V heads x head_dim -> K/V heads,
    # biased with attention_bias); residual scales
    "doge": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias", qk_norm="head",
              attn_extra=lambda d: d.kv + (d.kv if d.f("attention_bias") else 0),
              attn_linears=lambda d: ((d.kv * d.hd, d.kv),),
              layer_extra=lambda d: 2 * d.hidden),
    # modeling_voxtral_realtime.VoxtralRealtimeTextDecoderLayer: llama without biases, every layer windowed by
    # sliding_window, plus ada_rms_norm (linear1 hidden -> 32, linear2 32 -> hidden, no bias)
    "voxtral_realtime_text": DecoderTraits(layer_extra=lambda d: 2 * 32 * d.hidden, window_rule=ALL_LAYERS),
}

BUILDERS: dict[str, Builder] = {
    "moshi": moshi,
    "hrm_text": hrm_text,
    "dory": dory,
}
