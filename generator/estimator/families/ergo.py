"""Ergo (transformers 5.25 models/ergo): a gated-residual MoE decoder with per-expert norms, read by the decoder.

modeling_ergo.ErgoForCausalLM, layer by layer (ErgoDecoderLayer): input, post-attention, pre- and post-feed-forward
RMSNorms of hidden width, two ErgoResidualGate weights of hidden width (attention_residual_gate,
feedforward_residual_gate); ErgoAttention: one fused qkv_proj (hidden -> (heads + 2 kv) x head_dim, head_dim always
hidden // heads), q_norm and k_norm of head_dim, o_proj, no biases; rotary embeddings on the sliding layers only
(every global_attention_every_n_layers-th layer attends to the whole context without positions). The first
num_dense_blocks layers (else mlp_layer_types) have ErgoMLP: up_proj / down_proj of first_dense_intermediate_size,
squared ReLU, no gate. The others ErgoMoE: ErgoTopkRouter (a hidden -> num_experts linear; e_score_correction_bias is
a buffer), ErgoExperts (3-D up_proj and down_proj of moe_intermediate_size, squared ReLU, no gate) with
ErgoExpertNorm (a weight of hidden width per expert), ErgoSharedExpert (up/down of shared_intermediate_size, then an
RMSNorm of hidden width). Final RMSNorm; an lm_head that is never tied (ErgoForCausalLM._tied_weights_keys removed).
transformers 5.24 has no ErgoConfig, so config/transformers_defaults.py does not hold its defaults: ERGO_DEFAULTS
below are configuration_ergo.ErgoConfig's (5.25.0), with its attribute_map (local_attention_window ->
sliding_window, the name the released checkpoints use) as an alias.
"""

from __future__ import annotations

from typing import Any

from ..config.reader import Reader
from .decoder import DecoderTraits, ExpertTraits
from .mixture_of_experts import first_k_dense

# configuration_ergo.ErgoConfig's field defaults (transformers 5.25.0); None: derived by __post_init__.
ERGO_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262144, "hidden_size": 8192, "num_hidden_layers": 64, "num_attention_heads": 64,
    "num_key_value_heads": 8, "first_dense_intermediate_size": 32768, "num_dense_blocks": 1,
    "moe_intermediate_size": 4096, "shared_intermediate_size": 8192, "num_experts": 256, "num_experts_per_tok": 8,
    "max_position_embeddings": 524288, "sliding_window": 512, "global_attention_every_n_layers": 4,
    "layer_types": None, "mlp_layer_types": None,
}


def _windows(r: Reader, n: int, w: int) -> list[int]:
    # ErgoConfig.__post_init__: layer i is full attention when (i + 1) % global_attention_every_n_layers == 0
    every = r.int("global_attention_every_n_layers", 4)
    return [w if (i + 1) % every else 0 for i in range(n)]


TRAITS: dict[str, DecoderTraits] = {
    "ergo": DecoderTraits(norms=("pre_attn", "post_attn", "pre_mlp", "post_mlp"), qk_norm="head", fused_qkv=True,
                          head_dim_key=False, mlp="plain", inter_key="first_dense_intermediate_size",
                          act_default="relu2", never_tie=True, layer_extra=lambda d: 2 * d.hidden,
                          window_rule=_windows, aliases={"sliding_window": ("local_attention_window",)},
                          defaults=ERGO_DEFAULTS,
                          moe=ExpertTraits(gated=False, shared=lambda d: d.k("shared_intermediate_size"),
                                           extra=lambda d: d.hidden, expert_extra=lambda d: d.hidden,
                                           sparse=first_k_dense("num_dense_blocks", k0=1),
                                           dense_inter="first_dense_intermediate_size")),
}
