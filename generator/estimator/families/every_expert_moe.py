"""MoE decoders whose experts all run on every token: Llama 4's text decoder (transformers 5.24 modeling_llama4.py),
its traits, read by the decoder.

Llama4TextDecoderLayer: GQA attention whose RoPE layers normalise q and k with a weight-less L2 norm, then a
Llama4TextMoe on the layers moe_layers names (else every interleave_moe_layer_step-th) and a gated MLP of
intermediate_size_mlp on the others. Llama4TextMoe runs every expert on every token: the router's top-k scores
weigh a copy of the hidden states repeated once per expert, and Llama4TextExperts multiplies all of them with torch.bmm
(there is no grouped-matmul path in 5.24), so its saved tensors and working set grow with num_local_experts, not
with the top-k. Parameters are those of any routed MoE (graph/parts.moe_part); only the per-token tensors differ.
"""

from __future__ import annotations

from ..graph.parts import Part
from .decoder import DecoderTraits, Dims, ExpertTraits, StackRule, attention
from .mixture_of_experts import _width


def rope_layers(d: Dims) -> list[int]:
    """Per layer, 1 where it applies RoPE, 0 on a NoPE layer: no_rope_layers where the config writes it, else a NoPE
    layer every no_rope_layer_interval-th (default 4), as configuration_llama4.py and configuration_mistral_large4.py
    fill it."""
    return d.r.list("no_rope_layers", int, d.layers) or [int((j + 1) % d.k("no_rope_layer_interval", 4) != 0)
                                                         for j in range(d.layers)]


def _attention(t: DecoderTraits, d: Dims, n: int, window: int) -> Part:
    """modeling_llama4.Llama4TextAttention: on the layers that apply RoPE (rope_layers), use_qk_norm runs
    Llama4TextL2Norm on q and on k after the rotation: x.float() * rsqrt(mean(x^2) + eps) with no weight, which saves
    the fp32 copy and one fp32 factor per head (act32)."""
    p = attention(t, d, n, window)
    if not d.f("use_qk_norm", True) or not rope_layers(d)[n - 1]:
        return p
    return p._replace(act32=p.act32 + (d.heads + d.kv) * (d.hd + 1))


def _sparse(d: Dims) -> list[bool]:
    # configuration_llama4.py: moe_layers, else every interleave_moe_layer_step-th layer.
    layers = d.r.list("moe_layers", int)
    if layers is None:
        step = d.k("interleave_moe_layer_step", 1)
        return [(i - (step - 1)) % step == 0 and i >= step - 1 for i in range(d.layers)]
    return [i in layers for i in range(d.layers)]


def _every_expert(p: Part, d: Dims) -> Part:
    """Llama4TextMoe.forward's tensors per token, with E = num_local_experts, I = the experts' width, S = the shared
    expert's (intermediate_size), k = top-k, h = hidden (read off the live tensors of CPU-simulated steps, LoRA and
    an AMP full fine-tune, FINDINGS.md F42):
    - the router: its sigmoid's fp32 output (E, act32 as moe_part has it), the transposed scores' clone (E) and
      topk's int64 indices (k, 4 units of 2 B);
    - `hidden_states.repeat(E, 1)`, saved by the scores' mul: E x h in the residual stream's dtype (fp32 in an AMP
      full fine-tune: counted as 2 units of the compute dtype, so pure bf16 reads E x h x 2 B over);
    - where the experts train, bmm's bf16 input (E x h) and the gate-up product's input to down_proj (E x I);
    - gate_up's bmm output (2 x E x I: silu reads gate, the product reads up) and silu's output (E x I);
    - the shared expert: a frozen or trained gated MLP (3 or 4 x S), as moe_part has it.
    Serving holds, per token of a prefill, the repeated input and its weighted copy, gate_up, the product and the
    experts' output before the sum: E x (3 I + 2 h) beside the shared expert's 3 S. Every expert runs on every token,
    so the part's top_k (the experts each token runs, graph/parts.Part) becomes E: memory/experts.py prices the
    backward's expert-wide gradients from it; the parameters counted active stay the top-k's."""
    experts, hidden, inter = p.mats[1][0], p.mats[0][1], p.mats[0][2]
    shared = p.linears[0][1] if p.linears else 0  # the shared expert's width, as moe_part laid it out
    router = experts + 4 * p.top_k
    return p._replace(top_k=experts, act=experts * (4 * inter + 3 * hidden) + 4 * shared + router,
                      act_frozen=experts * (3 * inter + hidden) + 3 * shared + router,
                      transient=experts * (3 * inter + 2 * hidden) + 3 * shared + hidden)


TRAITS: dict[str, DecoderTraits] = {
    "llama4_text": DecoderTraits(qkv_bias="attention_bias", o_bias="attention_bias", attn=_attention,
                                 moe=ExpertTraits(experts="num_local_experts", inter="intermediate_size",
                                                  shared=_width("intermediate_size"),
                                                  sparse=StackRule(_sparse), dense_inter="intermediate_size_mlp",
                                                  part=_every_expert)),
}
