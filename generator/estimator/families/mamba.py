"""State-space mixers (Mamba, Mamba-2) and the pure-SSM models (mamba, falcon_mamba, mamba2).

Mamba (Gu & Dao 2023, arXiv:2312.00752; modeling_mamba.MambaMixer), inner = expand x hidden:
in_proj hidden -> 2 inner, depthwise conv1d (inner x kernel + bias), x_proj inner -> dt_rank + 2 state,
dt_proj dt_rank -> inner (+ bias), A_log inner x state, D inner, out_proj inner -> hidden.
Mamba-2 (Dao & Gu 2024, arXiv:2405.21060; modeling_mamba2.Mamba2Mixer): in_proj hidden ->
2 inner + 2 groups x state + heads, conv1d over inner + 2 groups x state, dt_bias / A_log / D per
head, a gated RMSNorm of inner, out_proj inner -> hidden.
Serving: no KV cache; each sequence holds a fixed recurrent state per layer (MambaCache /
Mamba2Cache): conv state (conv channels x kernel) + SSM state (inner x state, or heads x head_dim x
state). Saved activations per token are an estimate: the projections' outputs, the conv output, the
scan output and the gate (the fused scan kernel recomputes its internals in backward).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.parts import Block, Part, add_part, linear, lm_head_part, norm_part
from .assembly import Builder, assemble


def mamba_part(name: str, hidden: int, inner: int, state: int, kernel: int, dt_rank: int, *, bias: bool = False,
               conv_bias: bool = True, extra: int = 0, typ: str = "Mamba", heads: int = 1) -> Part:
    """`heads` > 1: Zamba's multi-head mixer (modeling_zamba.ZambaMambaMixer), whose x_proj and dt_proj are
    per-head parameters (x_proj_weight, dt_proj_weight), not nn.Linears a LoRA adapter can wrap; the per-head
    sizes multiply back to the same totals (dt_rank and state are per head)."""
    params = (linear(hidden, 2 * inner, bias) + inner * kernel + (inner if conv_bias else 0)
              + linear(inner, dt_rank + 2 * state) + linear(dt_rank, inner, True) + inner * state + inner
              + linear(inner, hidden, bias) + extra)
    mats = ((hidden, 2 * inner), (inner, dt_rank + 2 * state), (dt_rank, inner), (inner, hidden))
    lin = mats if heads == 1 else (mats[0], mats[3])
    x_out = heads * (dt_rank + 2 * state)  # each head's x_proj output, per token
    return Part(name, typ, params, matmul=sum(i * o for i, o in mats), linears=lin,
                act=7 * inner + x_out, act32=0, transient=3 * inner + x_out,
                state=inner * kernel + inner * state, scan=(1, inner, state, heads))


def ssm_state_fp32(r: Reader, key: str) -> bool:
    """Whether a served sequence keeps its SSM (or Gated DeltaNet) recurrent state in float32: vLLM reads each
    family's own key, mamba_ssm_cache_dtype for Nemotron-H (whose transformers class defaults it to float32) and
    mamba_ssm_dtype for Qwen3.5, and sizes the state's page by it (vllm/model_executor/models/config.py, v0.19.1);
    transformers' torch path runs the delta rule in float32 too. Part.state counts elements at the cache's 2 B, so
    such a state counts twice."""
    return r.str(key) in ("float32", "fp32")


def mamba2_part(name: str, hidden: int, inner: int, heads: int, head_dim: int, groups: int, state: int,
                kernel: int, *, bias: bool = False, conv_bias: bool = True, norm: bool = True, extra: int = 0,
                typ: str = "Mamba-2", chunk: int = 256, state_fp32: bool = False) -> Part:
    """`chunk`: the SSD algorithm's chunk length (config chunk_size / mamba_chunk_size), which sizes its torch
    path's per-chunk tensors (memory.recurrence). `state_fp32`: ssm_state_fp32."""
    conv = inner + 2 * groups * state
    proj = 2 * inner + 2 * groups * state + heads
    params = (linear(hidden, proj, bias) + conv * kernel + (conv if conv_bias else 0) + 3 * heads
              + (inner if norm else 0) + linear(inner, hidden, bias) + extra)
    lin = ((hidden, proj), (inner, hidden))
    return Part(name, typ, params, matmul=hidden * proj + inner * hidden, linears=lin,
                act=proj + conv + 4 * inner, act32=heads, transient=proj + conv + inner,
                state=conv * kernel + (2 if state_fp32 else 1) * heads * head_dim * state,
                scan=(2, inner, state, heads, groups, chunk, kernel))


def ssm_model(cfg: Mapping[str, Any], model: str, mt: str, v2: bool) -> Arch:
    r = Reader(cfg, model, mt)
    h, n, vocab = r.int("hidden_size"), r.int("num_hidden_layers"), r.int("vocab_size")
    expand = r.int("expand", 2)
    state, kernel = r.int("state_size"), r.int("conv_kernel", 4)
    bias, conv_bias = r.flag("use_bias", False), r.flag("use_conv_bias", True)
    blocks = []
    if v2:
        heads, hd, groups = r.int("num_heads"), r.int("head_dim"), r.int("n_groups", 1)
        inner = r.derived("intermediate_size", expand * h, "expand x hidden_size")
        chunk = r.int("chunk_size", 256)
        mixer = lambda i: mamba2_part(f"Mamba2_{i}", h, inner, heads, hd, groups, state, kernel, bias=bias,  # noqa: E731
                                      conv_bias=conv_bias, chunk=chunk)
    else:
        inner = r.int("intermediate_size", expand * h)
        rank = cfg.get("time_step_rank")
        dt_rank = -(-h // 16) if rank in (None, "auto") else r.int("time_step_rank")
        mixer = lambda i: mamba_part(f"Mamba_{i}", h, inner, state, kernel, dt_rank, bias=bias,  # noqa: E731
                                     conv_bias=conv_bias)
    for i in range(1, n + 1):
        blocks.append(Block(i, "mamba2" if v2 else "mamba",
                            (norm_part(f"RMSNorm_{i}_1", "rmsnorm", h), mixer(i), add_part(f"Add_{i}"))))
    tie = r.flag("tie_word_embeddings", not v2)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h)]
    head = [norm_part("Final_RMSNorm", "rmsnorm", h), lm_head_part(vocab, h, tie), Part("Output", "Output", width=vocab)]
    # No positions: an SSM has no context limit; its "context" is the serving length we are asked about.
    ctx = r.int("max_position_embeddings", 1 << 20)
    return assemble(cfg, model, r, hidden=h, layers=n, heads=1, kv=1, head_dim=h, inter=inner, vocab=vocab, ctx=ctx,
                    tie=tie, embed=embed, blocks=blocks, head=head, position="none")


def mamba(cfg: Mapping[str, Any], model: str) -> Arch:
    return ssm_model(cfg, model, str(cfg.get("model_type")), False)


def mamba2(cfg: Mapping[str, Any], model: str) -> Arch:
    return ssm_model(cfg, model, "mamba2", True)

BUILDERS: dict[str, Builder] = {
    "mamba": mamba,
    "falcon_mamba": mamba,
    "mamba2": mamba2,
}
