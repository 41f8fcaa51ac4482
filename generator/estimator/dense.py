"""Dense decoder-only families of families.py (llama, qwen2, gpt2, falcon, ...): Arch → Spec.

Parameter formulas follow the transformers modeling files named in families.py: a Linear(in, out)
holds in*out weights (+out bias); RMSNorm w, LayerNorm 2w (weight, bias); Embedding rows*width.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .families import ATTENTION_TYPE
from .spec import Block, Part, Spec, add_part, attention_part, linear, mlp_part, norm_params, norm_part

if TYPE_CHECKING:
    from .config import Arch


def attention_type(heads: int, kv_heads: int) -> str:
    if kv_heads == heads:
        return ATTENTION_TYPE["mha"]
    return ATTENTION_TYPE["mqa"] if kv_heads == 1 else ATTENTION_TYPE["gqa"]


def ffn_type(gated: bool, act: str) -> str:
    if gated:
        return "SwiGLU" if act in ("silu", "swish") else "GeGLU" if act.startswith("gelu") else "GLU"
    return "MLP"


def qk_norm_params(a: Arch) -> int:
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    if a.qk_norm == "head":  # one norm over head_dim, shared by all heads (qwen3, gemma3, phi)
        return 2 * norm_params(a.qk_norm_kind, a.head_dim)
    if a.qk_norm in ("flat", "head_per_head"):  # olmo2 norms heads*head_dim; cohere/stablelm per head
        return norm_params(a.qk_norm_kind, q) + norm_params(a.qk_norm_kind, kv)
    return 0


def dense_spec(a: Arch) -> Spec:
    """Nodes in forward order, as the structure table shows them."""
    h = a.hidden
    norm_type = "RMSNorm" if a.norm == "rmsnorm" else "LayerNorm"
    embed: list[Part] = [Part("Input", "Input", width=-1),
                         Part("Embedding", "Embedding", a.vocab * a.embed_dim, width=a.embed_dim)]
    if a.embed_dim != h:
        embed.append(Part("Project_In", "Linear", linear(a.embed_dim, h), matmul=a.embed_dim * h))
    if a.position == "learned":
        embed.append(Part("Position_Embedding", "Embedding", a.learned_positions * h))
    elif a.position == "rope":
        embed.append(Part("RoPE", "RoPE"))
    else:
        embed.append(Part("ALiBi", "ALiBi"))
    if a.embed_norm:
        embed.append(norm_part(f"Embedding_{norm_type}", a.norm, h))

    # stablelm's o_proj is Linear(hidden, hidden) whatever heads*head_dim is (modeling_stablelm.py).
    o_in = h if a.family == "stablelm" else 0
    attn_t, ffn_t = attention_type(a.heads, a.kv_heads), ffn_type(a.mlp == "gated", a.act)
    blocks = []
    layers: dict[int, Block] = {}  # one layer per window size, numbered per layer (names hold "#")
    for n in range(1, a.layers + 1):
        window = a.layer_windows[n - 1] if len(a.layer_windows) >= n else 0
        if window in layers:
            blocks.append(layers[window].numbered(n))
            continue
        i = "#"
        attn = attention_part(f"Attention_{i}", attn_t, h, a.heads, a.kv_heads, a.head_dim, qkv_bias=a.qkv_bias,
                              o_bias=a.o_bias, extra=qk_norm_params(a), fused_qkv=a.fused_qkv, o_in=o_in,
                              rope=a.position == "rope", window=window)
        ffn = mlp_part(f"FFN_{i}", ffn_t, h, a.intermediate, a.mlp == "gated", a.mlp_bias, fused=a.fused_gate_up)
        parts: list[Part] = []
        k = 0

        def norm() -> None:
            nonlocal k
            k += 1
            parts.append(norm_part(f"{norm_type}_{i}_{k}", a.norm, h))

        if a.parallel:
            for _ in a.layer_norms:
                norm()
            parts += [attn, ffn, add_part(f"Add_{i}")]
        else:
            if "pre_attn" in a.layer_norms:
                norm()
            parts.append(attn)
            if "post_attn" in a.layer_norms:
                norm()
            parts.append(add_part(f"Add_{i}_attn"))
            if "pre_mlp" in a.layer_norms:
                norm()
            parts.append(ffn)
            if "post_mlp" in a.layer_norms:
                norm()
            parts.append(add_part(f"Add_{i}_ffn"))
        layers[window] = Block(n, "sliding" if window else "attention", tuple(parts))
        blocks.append(layers[window].numbered(n))

    head: list[Part] = []
    if a.final_norm:
        head.append(norm_part(f"Final_{norm_type}", a.norm, h))
    if a.embed_dim != h:
        head.append(Part("Project_Out", "Linear", linear(h, a.embed_dim), width=a.embed_dim, matmul=h * a.embed_dim))
    head.append(lm_head_part(a.vocab, a.embed_dim, a.tie, a.lm_head_bias))
    head.append(Part("Output", "Output", width=a.vocab))
    return Spec("decoder", h, a.vocab, tuple(embed), tuple(blocks), tuple(head), a.vocab, tied=a.tie)


def lm_head_part(vocab: int, width: int, tied: bool, bias: bool = False, name: str = "LM_Head") -> Part:
    """The output projection; a tied head shares the embedding's weight (counted there once)."""
    return Part(name, "Linear", (0 if tied else vocab * width) + (vocab if bias else 0), width=vocab,
                matmul=vocab * width)
