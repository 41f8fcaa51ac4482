"""Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 §2.1; modeling_deepseek_v3.DeepseekV3Attention).

q: hidden -> q_lora_rank (q_a_proj, + RMSNorm) -> heads x (qk_nope + qk_rope) (q_b_proj), or one q_proj
when q_lora_rank is null; kv: hidden -> kv_lora_rank + qk_rope (kv_a_proj_with_mqa, + RMSNorm of
kv_lora_rank) -> heads x (qk_nope + v_head_dim) (kv_b_proj); o_proj heads x v_head_dim -> hidden.
The cache per token per layer is the compressed latent plus the shared rotary key:
kv_lora_rank + qk_rope_head_dim elements (vLLM/SGLang MLA backends, LMCache PR #694), not full K/V.
(transformers' own eager cache stores the expanded K and V; serving engines do not.)
"""

from __future__ import annotations

from .reader import Reader
from .spec import Part, linear


def mla_part(name: str, r: Reader, hidden: int, heads: int, *, bias: bool = False, extra: int = 0,
             q_norm_bias: bool = False, indexer: bool = False, window: int = 0) -> Part:
    q_rank = r.opt_int("q_lora_rank")
    kv_rank = r.int("kv_lora_rank")
    rope = r.int("qk_rope_head_dim")
    nope = r.int("qk_nope_head_dim", minimum=0)
    v_dim = r.int("v_head_dim")
    qk = nope + rope
    lin: list[tuple[int, int]] = []
    params = extra
    if q_rank:
        params += linear(hidden, q_rank, bias) + q_rank * (2 if q_norm_bias else 1) + linear(q_rank, heads * qk)
        lin += [(hidden, q_rank), (q_rank, heads * qk)]
    else:
        params += linear(hidden, heads * qk)
        lin.append((hidden, heads * qk))
    params += linear(hidden, kv_rank + rope, bias) + kv_rank + linear(kv_rank, heads * (nope + v_dim))
    params += linear(heads * v_dim, hidden, bias)
    lin += [(hidden, kv_rank + rope), (kv_rank, heads * (nope + v_dim)), (heads * v_dim, hidden)]
    if indexer:  # DeepSeek-V3.2 sparse-attention indexer (modeling_deepseek_v32.DeepseekV32Indexer)
        ih, idim = r.int("index_n_heads"), r.int("index_head_dim")
        params += linear(q_rank or hidden, ih * idim) + linear(hidden, idim) + 2 * idim + linear(hidden, ih)
    mm = sum(i * o for i, o in lin)
    q_all, kv_all = heads * qk, heads * (nope + v_dim)
    return Part(name, "Multi-head Latent Attn", params, matmul=mm, linears=tuple(lin),
                act=(q_rank or 0) + kv_rank + rope + 3 * q_all + kv_all + heads * v_dim * 2, act32=heads,
                transient=q_all + kv_all + heads * v_dim, kv=kv_rank + rope, window=window,
                attn_flops=2 * heads * (qk + v_dim))
