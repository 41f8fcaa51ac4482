"""EncoderDecoderModel (modeling_encoder_decoder.py): an encoder and a decoder of any families, from nested configs.

EncoderDecoderModel builds `encoder` with AutoModel (the bare model: BertModel keeps its pooler) and `decoder` with
AutoModelForCausalLM (BertLMHeadModel: with add_cross_attention, every layer has a cross-attention over the
encoder's output); when the two hidden sizes differ and the decoder sets no cross_attention_hidden_size,
enc_to_dec_proj (encoder hidden -> decoder hidden, bias) maps the encoder's output. Nothing is shared between the
two (each keeps its own embeddings; the decoder's own tie_word_embeddings ties its head). Each side is read by its
own family; an encoder whose family is not an encoder-only one, or a decoder asked for cross-attention its family
does not lay out, is refused.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import KeyUse, Reader, architectures_of, model_type_of
from ..config.transformers_defaults import ARCHITECTURE_TYPES
from ..graph.parts import Block, Part, dense_linear_part
from .assembly import TextReader, Wrapper, assemble


def _class_of(r: Reader, side: str, model_type: str) -> str:
    """The class EncoderDecoderModel builds for one side: the bare model (AutoModel) for the encoder, the causal
    LM (AutoModelForCausalLM: `...ForCausalLM`, else `...LMHeadModel`, else `...Decoder`) for the decoder."""
    names = sorted((c for c, t in ARCHITECTURE_TYPES.items() if t == model_type), key=len)
    if side == "encoder":
        found = ([c for c in names if c.endswith("Model") and "For" not in c and not c.endswith("LMHeadModel")]
                 or [c for c in names if c.endswith("Encoder")])  # BertGenerationEncoder
    else:
        found = ([c for c in names if c.endswith("ForCausalLM")] or [c for c in names if c.endswith("LMHeadModel")]
                 or [c for c in names if c.endswith("Decoder")])  # BertGenerationDecoder
    if not found:
        raise ConfigError(r.model, f"{side}.model_type", model_type,
                          f"has no {'bare model' if side == 'encoder' else 'causal-LM'} class for EncoderDecoderModel")
    return found[0]


def _renumber(b: Block, index: int, stack: str) -> Block:
    """Layer b as layer `index` of the combined model, in `stack`: every name's own number moved."""
    parts = tuple(p._replace(name=re.sub(rf"_{b.index}(?=_|$)", f"_{index}", p.name, count=1)) for p in b.parts)
    return Block(index, b.kind, parts, stack)


def _side(cfg: Mapping[str, Any], r: Reader, side: str, read_text: TextReader) -> Arch:
    sub = r.sub(side)
    if sub is None:
        raise ConfigError(r.model, side, None, "EncoderDecoderModel needs the encoder and decoder configs")
    mt = model_type_of(sub, r.model)
    return read_text(dict(sub, architectures=[_class_of(r, side, mt)]), r.model)


def check_cross_decoder(model: str, dec: Arch, dec_cfg: Mapping[str, Any]) -> None:
    """Refuse a decoder side its family does not read as a decoder, or whose config asks for a cross-attention
    (add_cross_attention) its family does not lay out (EncoderDecoderModel's and VisionEncoderDecoderModel's)."""
    crossed = any(p.type == "Cross Attn" for b in dec.spec.blocks for p in b.parts)
    if dec.kind != "decoder" or (dec_cfg.get("add_cross_attention") and not crossed):
        raise ConfigError(model, "decoder.model_type", dec.model_type,
                          "is not read as a decoder with cross-attention (add_cross_attention) yet")


def encoder_decoder(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    r = Reader(cfg, model, "encoder-decoder")
    enc, dec = _side(cfg, r, "encoder", read_text), _side(cfg, r, "decoder", read_text)
    if enc.kind != "encoder":
        raise ConfigError(model, "encoder.model_type", enc.model_type,
                          f"is read as a {enc.kind} model; EncoderDecoderModel's encoder is read only from encoder-only families")
    dec_sub = r.sub("decoder") or {}
    check_cross_decoder(model, dec, dec_sub)
    es, ds = enc.spec, dec.spec
    embed: list[Part] = [p for p in es.embed]
    # the encoder's pooler and closing norms run after its layers, before the decoder reads its output
    embed += [p._replace(name=f"Encoder_{p.name}") for p in es.head if p.type != "Output"]
    blocks = [_renumber(b, i, "encoder") for i, b in enumerate(es.blocks, 1)]
    if enc.hidden != dec.hidden and dec_sub.get("cross_attention_hidden_size") is None:
        embed.append(dense_linear_part("Enc_To_Dec_Proj", "Linear", enc.hidden, dec.hidden, True))
    embed += [p._replace(name=f"Decoder_{p.name}") for p in ds.embed if p.type != "Input"]
    blocks += [_renumber(b, len(blocks) + i, "decoder") for i, b in enumerate(ds.blocks, 1)]
    arch = assemble(cfg, model, r, hidden=dec.hidden, layers=len(blocks), heads=dec.heads, kv=dec.kv_heads,
                    head_dim=dec.head_dim, inter=dec.intermediate, vocab=dec.vocab, ctx=min(enc.max_context, dec.max_context),
                    tie=dec.tie, embed=embed, blocks=blocks, head=list(ds.head), kind="encoder-decoder",
                    windows=(0,) * len(es.blocks) + tuple(dec.layer_windows), logits=ds.logits, position=dec.position,
                    act=dec.act)
    nested = tuple(KeyUse(f"{side}.{u.name}", u.value, u.source) for side, a in (("encoder", enc), ("decoder", dec))
                   for u in a.uses)
    return dataclasses.replace(arch, uses=tuple(r.uses) + nested, architectures=architectures_of(cfg, model))


WRAPPERS: dict[str, Wrapper] = {"encoder-decoder": encoder_decoder}
