"""Arch: one config.json, normalised. Top-level facts every builder fills, plus the layer spec."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..graph.parts import Spec
from .reader import KeyUse


@dataclass(frozen=True)
class Quant:
    """A quantised checkpoint (`quantization_config`): how its weights are stored."""

    method: str  # gptq, awq, bitsandbytes, fp8, mxfp4, compressed-tensors, ...
    bits: float  # stored bits per quantised weight (4, 8; 4.25 for MXFP4 with its scales)
    packed_per_element: int  # logical weights per stored element (int32 of 8 x int4: 8; U8 of 2 x fp4: 2)
    group_size: int  # weights per scale (0: per channel / per tensor)
    scale_bytes: float  # bytes of scales/zeros per group
    describes: str  # one line for the page
    fp4_experts: bool = False  # MoE expert tensors stored as packed FP4 (2 per byte) + a 1-byte scale per 32
    # the layers whose self-attention the config's ignore list keeps in 16 bits (-1: every layer; config/modelopt.py
    # ignored), and per kind of Linear (config/modelopt.py ROLES) the format it is stored in where not `method`
    # ("bf16": unquantised; MIXED_PRECISION's per-module algorithms)
    attention_16bit: tuple[int, ...] = ()
    roles: tuple[tuple[str, str], ...] = ()
    # tensors a packed format stores beside its weights and scales where its config asks: "zero_points" (asymmetric),
    # "group_index" (compressed-tensors' actorder "group")
    extras: tuple[str, ...] = ()


@dataclass(frozen=True)
class Arch:
    """A model, normalised: what every builder fills. All sizes are element counts; the layers are in `spec`."""

    model_type: str  # as written in config.json
    family: str  # the family whose semantics we applied
    architectures: tuple[str, ...]
    custom_code: bool
    text_tower_only: bool  # read from a nested text_config; the rest of the model is not counted
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_context: int
    tie: bool
    spec: Spec  # the layer graph's parts, grouped in blocks
    act: str = "silu"  # the MLP's activation (activations.py prices the Python-written GELUs)
    qk_norm: str | None = None  # q/k norms inside attention: "head", "flat", "per_head", or "noscale" (no weight)
    # (activations.py prices their saved tensors)
    position: str = "rope"  # "rope", "learned", "alibi", ...
    embed_dim: int = 0  # width of the token embedding when it differs from hidden (OPT's word_embed_proj_dim)
    rotary_dims: int = 0  # rotated dims per head (partial rotary for phi, neox, stablelm, gptj)
    uses: tuple[KeyUse, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict)  # the (text) config the values were read from
    kind: str = "decoder"  # "decoder", "encoder", "encoder-decoder"
    layer_windows: tuple[int, ...] = ()  # per layer: sliding window (0 = full attention)
    approximate: str | None = None  # why the estimate is not exact (None: exact under transformers)
    quant: Quant | None = None
    # the quantization_config vLLM reads: the top-level config's, else its text_config's (quantization.quant_config)
    quant_config: Mapping[str, Any] | None = None
    experts: int = 0  # routed experts per MoE layer (0: dense)
    experts_per_token: int = 0

    def used(self) -> dict[str, dict[str, Any]]:
        return {u.name: {"value": u.value, "source": u.source} for u in self.uses}

    def setting(self, key: str) -> Any:
        """The config's `key`, else its decoder's, where an encoder-decoder nests its stacks' settings (T5Gemma's
        attn_logit_softcapping and final_logit_softcapping, which its decoder's config holds)."""
        value, nested = self.raw.get(key), self.raw.get("decoder")
        return nested.get(key) if value is None and isinstance(nested, Mapping) else value

    @property
    def window(self) -> int:
        """The sliding window where every windowed layer shares one (0: none)."""
        return max(self.layer_windows, default=0)
