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
    bert_variants,
    byte_latent,
    deepseek_vision,
    discrete_tokenizers,
    document_ocr,
    dots_towers,
    encoder_decoder_pairs,
    encoder_decoders,
    encoders,
    ergo,
    every_expert_moe,
    gemma,
    gemma_encoder_decoders,
    gpt2_era,
    inkling,
    kolibri,
    kosmos,
    latent_attention,
    linear_attention,
    llama,
    long_document,
    mamba,
    mamba_hybrids,
    mixture_of_experts,
    mobile_encoders,
    multimodal_moe,
    muse,
    omni_models,
    perceiver,
    perceiver_resamplers,
    phi4_multimodal,
    protein_language,
    querying_transformers,
    recurrent,
    rotary_encoders,
    shared_layer_encoders,
    short_convolution,
    sparse_encoder_decoders,
    speech_language,
    speech_transcription,
    vision_bert,
    vision_encoder_decoders,
    vision_language,
    vision_language_action,
    vision_resamplers,
    vision_wrappers,
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
                                short_convolution.TRAITS, multimodal_moe.TRAITS, muse.TRAITS, ergo.TRAITS,
                                kolibri.TRAITS, every_expert_moe.TRAITS)
BUILDERS: dict[str, Builder] = merged(gpt2_era.BUILDERS, llama.BUILDERS, gemma.BUILDERS, mixture_of_experts.BUILDERS,
                                      latent_attention.BUILDERS, mamba.BUILDERS, mamba_hybrids.BUILDERS,
                                      short_convolution.BUILDERS, recurrent.BUILDERS, encoders.BUILDERS, bert_descendants.BUILDERS,
                                      shared_layer_encoders.BUILDERS, rotary_encoders.BUILDERS, bert_variants.BUILDERS,
                                      mobile_encoders.BUILDERS, perceiver.BUILDERS,
                                      encoder_decoders.BUILDERS, long_document.BUILDERS, sparse_encoder_decoders.BUILDERS,
                                      gemma_encoder_decoders.BUILDERS, vision_language.BUILDERS, inkling.BUILDERS,
                                      muse.BUILDERS, multimodal_moe.BUILDERS, phi4_multimodal.BUILDERS,
                                      querying_transformers.BUILDERS, perceiver_resamplers.BUILDERS,
                                      vision_encoder_decoders.BUILDERS, kosmos.BUILDERS,
                                      protein_language.BUILDERS, dots_towers.BUILDERS, byte_latent.BUILDERS)
WRAPPERS: dict[str, Wrapper] = merged(vision_language.WRAPPERS, speech_language.WRAPPERS, inkling.WRAPPERS,
                                      muse.WRAPPERS, encoder_decoder_pairs.WRAPPERS, vision_wrappers.WRAPPERS,
                                      vision_resamplers.WRAPPERS, vision_bert.WRAPPERS, deepseek_vision.WRAPPERS,
                                      omni_models.WRAPPERS, querying_transformers.WRAPPERS,
                                      perceiver_resamplers.WRAPPERS, vision_encoder_decoders.WRAPPERS,
                                      vision_language_action.WRAPPERS, document_ocr.WRAPPERS,
                                      speech_transcription.WRAPPERS, discrete_tokenizers.WRAPPERS)
# Every model_type read, by whichever table: the three never share one.
KNOWN: frozenset[str] = frozenset(merged(DECODERS, BUILDERS, WRAPPERS))
# Config classes read only as a wrapper's sub-config (audio towers, Q-Former): their defaults are read too.
SUB_CONFIGS: frozenset[str] = frozenset((*speech_language.SUB_CONFIGS, *speech_transcription.SUB_CONFIGS,
                                               *discrete_tokenizers.SUB_CONFIGS))
