"""Every family the estimator reads, one module per family; their tables merged here, each model_type once.

A family module ends in its tables: TRAITS (model_type -> decoder traits, read by the one decoder builder in
decoder.py), BUILDERS (model_type -> a builder for a family that lays out its own layers) and, for wrappers
around a language model of any family, WRAPPERS. normalise.py is the only reader of this package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import (
    bert_descendants,
    document_ocr,
    encoder_decoders,
    encoders,
    gemma,
    gpt2_era,
    kosmos,
    latent_attention,
    linear_attention,
    llama,
    mamba,
    mamba_hybrids,
    mixture_of_experts,
    perceiver_resamplers,
    querying_transformers,
    recurrent,
    short_convolution,
    vision_encoder_decoders,
    vision_language,
    vision_language_action,
)
from .assembly import Builder, Wrapper
from .decoder import DecoderTraits


def merged(*tables: Mapping[str, Any]) -> dict[str, Any]:
    """One table from several; a model_type named twice is an error, never a silent last-write-wins."""
    out: dict[str, Any] = {}
    for table in tables:
        for key, value in table.items():
            if key in out:
                raise ValueError(f"model_type {key!r} is registered twice")
            out[key] = value
    return out


DECODERS: dict[str, DecoderTraits] = merged(gpt2_era.TRAITS, llama.TRAITS, gemma.TRAITS, mixture_of_experts.TRAITS,
                                latent_attention.TRAITS, linear_attention.TRAITS, mamba_hybrids.TRAITS,
                                short_convolution.TRAITS)
BUILDERS: dict[str, Builder] = merged(gpt2_era.BUILDERS, llama.BUILDERS, gemma.BUILDERS, mixture_of_experts.BUILDERS,
                                      latent_attention.BUILDERS, mamba.BUILDERS, mamba_hybrids.BUILDERS,
                                      short_convolution.BUILDERS, recurrent.BUILDERS, encoders.BUILDERS, bert_descendants.BUILDERS,
                                      encoder_decoders.BUILDERS, vision_language.BUILDERS,
                                      querying_transformers.BUILDERS, perceiver_resamplers.BUILDERS,
                                      vision_encoder_decoders.BUILDERS, kosmos.BUILDERS)
WRAPPERS: dict[str, Wrapper] = merged(vision_language.WRAPPERS, querying_transformers.WRAPPERS,
                                          perceiver_resamplers.WRAPPERS, vision_encoder_decoders.WRAPPERS,
                                          vision_language_action.WRAPPERS, document_ocr.WRAPPERS)
# Every model_type read, by whichever table: the three never share one.
KNOWN: frozenset[str] = frozenset(merged(DECODERS, BUILDERS, WRAPPERS))
