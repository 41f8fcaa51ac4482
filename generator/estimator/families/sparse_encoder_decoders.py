"""Encoder-decoders with routed experts in some layers: Switch Transformers (modeling_switch_transformers.py), NLLB-MoE
(modeling_nllb_moe.py).

- Switch Transformers: T5 layers (encoder_decoders.t5); in each stack, layer i (0-based) is sparse when
  i % sparse_step == 1 (or sparse_step is 1), where sparse_step is encoder_sparse_step / decoder_sparse_step,
  which SwitchTransformersConfig derives as num_layers // num_sparse_encoder_layers (the layer count itself when
  there are none). A sparse SwitchTransformersLayerFF holds SwitchTransformersSparseMLP: a Top1Router
  (classifier d_model -> num_experts, router_bias) and num_experts wi/wo experts without biases; a dense one
  wi/wo. tie_word_embeddings is honoured (untied: the shared table, each stack's embed_tokens and lm_head).
- NLLB-MoE: M2M100's pre-norm layers (sinusoidal positions as a buffer, a LayerNorm closing each stack); layer i
  (0-based) is sparse when (i + 1) % sparse_step == 0; NllbMoeSparseMLP has a Top2Router (classifier
  d_model -> num_experts, router_bias) and num_experts fc1/fc2 experts with biases; a dense layer fc1/fc2.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.parts import LINEAR_EXPERTS_PART, Part, mlp_part, moe_part
from .assembly import Builder
from .encoder_decoders import BartTraits, T5Traits, bart_like, t5


def _switch_step(r: Reader, stack: str) -> int:
    # configuration_switch_transformers.SwitchTransformersConfig.__post_init__; a stored step wins
    key = "encoder_sparse_step" if stack == "encoder" else "decoder_sparse_step"
    stored = r.opt_int(key)
    if stored is not None:
        return stored
    layers = r.int("num_hidden_layers") if stack == "encoder" else r.int("num_decoder_layers", r.int("num_hidden_layers"))
    sparse = r.int(f"num_sparse_{stack}_layers", 3, minimum=0)
    return layers // sparse if sparse > 0 else layers


def _switch_ffn(r: Reader, stack: str, j: int, i: int, d: int, ff: int, gated: bool) -> Part:
    # modeling_switch_transformers.SwitchTransformersBlock: is_sparse = i % sparse_step == 1 or sparse_step == 1
    step = _switch_step(r, stack)
    if step > 0 and (j % step == 1 or step == 1):
        return moe_part(f"FFN_{i}", d, r.int("num_experts", 8), 1, ff, gated=False,
                        router_bias=r.flag("router_bias", False))._replace(type=LINEAR_EXPERTS_PART)
    return mlp_part(f"FFN_{i}", "MLP", d, ff, False, False)


def _nllb_ffn(r: Reader, stack: str, j: int, i: int, d: int, ffn: int) -> Part:
    # modeling_nllb_moe.NllbMoeEncoder / NllbMoeDecoder: is_sparse = (i + 1) % sparse_step == 0
    step = r.int(f"{stack}_sparse_step", 4, minimum=0)
    if step > 0 and (j + 1) % step == 0:
        return moe_part(f"FFN_{i}", d, r.int("num_experts", 128), 2, ffn, gated=False, bias=True,
                        router_bias=r.flag("router_bias", False))._replace(type=LINEAR_EXPERTS_PART)
    return mlp_part(f"FFN_{i}", "MLP", d, ffn, False, True)


SWITCH = T5Traits(read_tie=True, ffn=_switch_ffn)
NLLB_MOE = BartTraits(pos_offset=None, pre_norm=True, embed_norm=False, final_norm=True, table_params=False,
                      ffn=_nllb_ffn)


def _routed(arch: Arch, experts_key: str, default: int, top_k: int) -> Arch:
    """The Arch with its routed-expert count and experts per token (the report's MoE line, setups.py)."""
    return dataclasses.replace(arch, experts=Reader(arch.raw, "", arch.model_type).int(experts_key, default),
                               experts_per_token=top_k)


def switch_transformers(cfg: Mapping[str, Any], model: str) -> Arch:
    return _routed(t5(cfg, model, "switch_transformers", SWITCH), "num_experts", 8, 1)


def nllb_moe(cfg: Mapping[str, Any], model: str) -> Arch:
    return _routed(bart_like(cfg, model, "nllb-moe", NLLB_MOE), "num_experts", 128, 2)


BUILDERS: dict[str, Builder] = {"switch_transformers": switch_transformers, "nllb-moe": nllb_moe}
