"""Classic decoders with their own config keys (GPT-2 era): each builder follows its modeling file."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from .arch import Arch
from .assemble import assemble, standard_block
from .spec import attention_type, lm_head_part
from .reader import Reader
from .registry import register
from .spec import Block, Part, attention_part, linear, mlp_part, norm_part

GPT2_ALIASES = {"hidden_size": ("n_embd",), "num_hidden_layers": ("n_layer",), "num_attention_heads": ("n_head",),
                "max_position_embeddings": ("n_positions",), "intermediate_size": ("n_inner",)}


def _head(norm: str | None, hidden: int, vocab: int, tie: bool, bias: bool = False) -> list[Part]:
    out = [norm_part("Final_LayerNorm", norm, hidden)] if norm else []
    return out + [lm_head_part(vocab, hidden, tie, bias), Part("Output", "Output", width=vocab)]


def _embed(vocab: int, hidden: int, positions: int, pos_name: str = "Position_Embedding") -> list[Part]:
    out = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * hidden)]
    out.append(Part(pos_name, "Embedding", positions * hidden) if positions else Part("Sinusoidal", "Positions"))
    return out


def _simple(cfg: Mapping[str, Any], model: str, mt: str, *, aliases: Mapping[str, tuple[str, ...]] = GPT2_ALIASES,
            positions: int | None = None, qkv_bias: bool = True, o_bias: bool = True, mlp_bias: bool = True,
            fused: bool = False, kv: int | None = None, norms: tuple[str, ...] = ("pre_attn", "pre_mlp"),
            final_norm: bool = True, head_bias: bool = False, inter_x4: bool = True, norm: str = "layernorm",
            rope: bool = False, windows: tuple[int, ...] = (), inter: int | None = None,
            parallel: bool = False, **kw: Any) -> Arch:
    """Learned/sinusoidal positions, LayerNorm, fc1/fc2 MLP: the GPT-2 block and its relatives."""
    r = Reader(cfg, model, mt, aliases)
    h, n, heads = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("num_attention_heads")
    vocab, ctx = r.int("vocab_size"), r.int("max_position_embeddings", kw.pop("ctx_default", None))
    inter = inter or r.int("intermediate_size", 4 * h if inter_x4 else None)
    kv_heads = kv or heads
    hd = h // heads
    tie = r.flag("tie_word_embeddings", True)
    blocks = []
    for i in range(1, n + 1):
        w = windows[i - 1] if windows else 0
        attn = attention_part(f"Attention_{i}", attention_type(heads, kv_heads), h, heads, kv_heads, hd,
                              qkv_bias=qkv_bias, o_bias=o_bias, fused_qkv=fused, rope=rope, window=w)
        ffn = mlp_part(f"FFN_{i}", "MLP", h, inter, False, mlp_bias)
        if parallel:  # one norm feeds attention and MLP (GPT-J)
            parts = (norm_part(f"LayerNorm_{i}_1", norm, h), attn, ffn, Part(f"Add_{i}", "Add"))
            blocks.append(Block(i, "attention", parts))
        else:
            blocks.append(standard_block(i, [], attn, ffn, norm, h, norms=norms, kind="sliding" if w else "attention"))
    pos = ctx + kw.pop("pos_offset", 0) if positions is None else positions
    return assemble(cfg, model, r, hidden=h, layers=n, heads=heads, kv=kv_heads, head_dim=hd, inter=inter,
                    vocab=vocab, ctx=ctx, tie=tie, embed=_embed(vocab, h, pos) if not rope else
                    [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h), Part("RoPE", "RoPE")],
                    blocks=blocks, head=_head(norm if final_norm else None, h, vocab, tie, head_bias),
                    windows=windows, position="rope" if rope else "learned" if pos else "sinusoidal", **kw)


@register("gpt_bigcode")
def gpt_bigcode(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_gpt_bigcode.py: c_attn emits q + one shared K/V head when multi_query.
    r = Reader(cfg, model, "gpt_bigcode", GPT2_ALIASES)
    heads = r.int("num_attention_heads")
    return _simple(cfg, model, "gpt_bigcode", fused=True, kv=1 if r.flag("multi_query", True) else heads)


@register("gpt_neo")
def gpt_neo(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_gpt_neo.py: q/k/v without bias, out_proj with; "local" layers attend to window_size.
    aliases = {"num_hidden_layers": ("num_layers",), "num_attention_heads": ("num_heads",)}
    r = Reader(cfg, model, "gpt_neo", aliases)
    types = r.list("attention_layers")
    w = r.int("window_size", 256)
    n = r.int("num_hidden_layers")
    windows = tuple(w if types and i < len(types) and types[i] == "local" else 0 for i in range(n))
    return _simple(cfg, model, "gpt_neo", aliases=aliases, qkv_bias=False, windows=windows)


@register("codegen")
def codegen(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_codegen.py: GPT-J's parallel block, fused qkv_proj and out_proj without bias, biased head.
    return _simple(cfg, model, "codegen", qkv_bias=False, o_bias=False, fused=True, parallel=True, head_bias=True,
                   rope=True)


@register("openai-gpt")
def openai_gpt(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_openai.py: post-norm blocks (ln after attention and after MLP), no final norm, tied head.
    return _simple(cfg, model, "openai-gpt", fused=True, norms=("post_attn", "post_mlp"), final_norm=False)


@register("ctrl")
def ctrl(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_ctrl.py: sinusoidal positions, Wq/Wk/Wv/dense with bias, ffn of dff, tied head with a bias.
    return _simple(cfg, model, "ctrl", aliases={**GPT2_ALIASES, "intermediate_size": ("dff",)}, positions=0,
                   head_bias=True)


@register("xglm")
def xglm(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_xglm.py: sinusoidal positions (a buffer), pre-norm fairseq block, final layer_norm.
    aliases = {"hidden_size": ("d_model",), "num_hidden_layers": ("num_layers",),
               "num_attention_heads": ("attention_heads",), "intermediate_size": ("ffn_dim",)}
    return _simple(cfg, model, "xglm", aliases=aliases, positions=0)


@register("biogpt")
def biogpt(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_biogpt.py: learned positions with fairseq's offset of 2, tied output_projection.
    return _simple(cfg, model, "biogpt", aliases={}, pos_offset=2)


@register("mpt")
def mpt(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_mpt.py: ALiBi, Wqkv and out_proj without bias, up_proj of 4 x d_model, LayerNorm without bias.
    aliases = {"hidden_size": ("d_model",), "num_hidden_layers": ("n_layers",), "num_attention_heads": ("n_heads",),
               "max_position_embeddings": ("max_seq_len",)}
    r = Reader(cfg, model, "mpt", aliases)
    h = r.int("hidden_size")
    return _simple(cfg, model, "mpt", aliases=aliases, positions=0, qkv_bias=False, o_bias=False, mlp_bias=False,
                   fused=True, norm="layernorm_nobias" if r.flag("no_bias", True) else "layernorm", inter=4 * h)


@register("gpt_neox_japanese")
def gpt_neox_japanese(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_gpt_neox_japanese.py: fused qkv and MLP without bias; only the last layer's attention
    # has a dense_bias (hidden); intermediate = hidden x intermediate_multiple_size.
    r = Reader(cfg, model, "gpt_neox_japanese")
    h = r.int("hidden_size")
    arch = _simple(cfg, model, "gpt_neox_japanese", aliases={}, positions=0, qkv_bias=False, o_bias=False,
                   mlp_bias=False, fused=True, rope=True, inter=h * r.int("intermediate_multiple_size", 4))
    spec = arch.spec
    extra = Part("Dense_Bias", "Parameters", h)
    last = spec.blocks[-1]
    blocks = (*spec.blocks[:-1], Block(last.index, last.kind, (*last.parts, extra), last.stack))
    return dataclasses.replace(arch, spec=dataclasses.replace(spec, blocks=blocks))


__all__ = ["linear"]
