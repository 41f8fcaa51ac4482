"""Encoder-decoders over images: Pix2Struct (a ViT-style T5 encoder over patches), UDOP (T5 over text and patches),
Florence-2 (a DaViT backbone before a BART), PP-FormulaNet (a SAM encoder before an MBart decoder) and
VisionEncoderDecoderModel (any vision encoder with any decoder).

Pix2Struct (modeling_pix2struct.Pix2StructForConditionalGeneration): the encoder is Pix2StructVisionModel (a Linear
patch projection, row and column embeddings, T5-style pre-norm layers with a gated MLP) and the decoder
Pix2StructTextModel (T5 layers whose q/k/v/o are hidden x hidden, relative attention bias in the first layer, a gated
MLP, its own lm_head). UDOP (modeling_udop.UdopForConditionalGeneration): T5 encoder and decoder stacks (read by
encoder_decoders.t5), with patch embeddings, 2-D cell embeddings and the extra relative biases of
relative_bias_args. Both stacks are laid out as layers; the decoder's cross-attention reads the encoder's output.
Florence-2 (modeling_florence2.Florence2ForConditionalGeneration): a DaViT vision backbone and a projector whose
image tokens join the text at the input of a BART (text_config) of the encoder_decoders family.
VisionEncoderDecoderModel (modeling_vision_encoder_decoder.py): AutoModel of `encoder` (a vision tower here) and
AutoModelForCausalLM of `decoder` (read by its own family), whose cross-attention reads the encoder's patches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError
from ..config.arch import Arch
from ..config.reader import Reader, architectures_of
from ..config.transformers_defaults import ARCHITECTURE_TYPES
from ..graph.layout import standard_block
from ..graph.parts import Block, Part, attention_part, linear, lm_head_part, mlp_part, norm_part
from .assembly import Builder, TextReader, Wrapper, assemble
from .encoder_decoder_pairs import check_cross_decoder
from .encoder_decoders import T5S, t5
from .vision_language import retie, text_tower
from .vision_towers import TOWERS, sam, vision_activations, vision_tower, vision_transient

# The causal-LM class of each model_type (AutoModelForCausalLM), for the decoder's `architectures`.
CAUSAL_CLASS = {t: c for c, t in sorted(ARCHITECTURE_TYPES.items()) if c.endswith(("ForCausalLM", "LMHeadModel"))}


def pix2struct(cfg: Mapping[str, Any], model: str) -> Arch:
    """Pix2StructVisionModel: patch_projection (patch_embed_hidden_size -> hidden, bias), row_embedder and
    column_embedder (seq_len rows each), layers of q/k/v/o (hidden <-> heads x d_kv, no bias), wi_0/wi_1/wo (d_ff,
    no bias) and two weight-only norms, a final norm. Pix2StructTextModel: embed_tokens, layers of self-attention and
    cross-attention (q/k/v/o hidden x hidden, no bias; relative_attention_bias of buckets x heads in layer 0), a gated
    MLP and three norms, final_layer_norm and lm_head, tied by the top-level tie_word_embeddings
    (configuration_pix2struct.Pix2StructConfig copies it into text_config)."""
    r = Reader(cfg, model, "pix2struct")
    v = r.child(r.sub("vision_config") or {}, "pix2struct_vision_model", prefix="vision_config.")
    vh, vn, vheads, vkv, vff = (v.int("hidden_size"), v.int("num_hidden_layers"), v.int("num_attention_heads"),
                                v.int("d_kv"), v.int("d_ff"))
    seq = v.int("seq_len")
    patch = v.int("patch_embed_hidden_size")
    t = r.child(r.sub("text_config") or {}, "pix2struct_text_model", prefix="text_config.")
    h, n, heads, ff, vocab = t.int("hidden_size"), t.int("num_layers"), t.int("num_heads"), t.int("d_ff"), t.int("vocab_size")
    buckets = t.int("relative_attention_num_buckets", 32)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h),
             Part("Patch_Projection", "Linear", linear(patch, vh, True), matmul=patch * vh),
             Part("Patch_Positions", "Embedding", 2 * seq * vh)]
    blocks: list[Block] = []
    for i in range(1, vn + 1):
        a = attention_part(f"Attention_{i}", "Multi-Head Attn", vh, vheads, vheads, vkv, rope=False, cached=False)
        f = mlp_part(f"FFN_{i}", "GeGLU", vh, vff, True)
        blocks.append(standard_block(i, [], a, f, "rmsnorm", vh, kind="encoder", stack="encoder"))
    embed.append(Part("Encoder_Final_Norm", "RMSNorm", vh, norm_width=vh))
    hd = max(1, h // heads)
    for j in range(n):
        i = len(blocks) + 1
        a = attention_part(f"Attention_{i}", "Multi-Head Attn", h, heads, heads, hd, rope=False)
        a = a._replace(params=4 * h * h + (buckets * heads if j == 0 else 0))
        c = attention_part(f"Cross_Attention_{i}", "Cross Attn", h, heads, heads, hd, rope=False, window=-1)
        c = c._replace(params=2 * h * h + 2 * vh * h)
        blocks.append(standard_block(i, [], a, mlp_part(f"FFN_{i}", "GeGLU", h, ff, True), "rmsnorm", h, cross=c))
    tie = r.flag("tie_word_embeddings", False)
    head = [norm_part("Final_RMSNorm", "rmsnorm", h), lm_head_part(vocab, h, tie), Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=h, layers=len(blocks), heads=heads, kv=heads, head_dim=hd, inter=ff,
                    vocab=vocab, ctx=seq, tie=tie, embed=embed, blocks=blocks, head=head, kind="encoder-decoder",
                    position="relative")


def udop(cfg: Mapping[str, Any], model: str) -> Arch:
    """UdopForConditionalGeneration: the T5 stacks and shared embedding (lm_head always tied: configuration_udop
    forces tie_word_embeddings), patch_embed (a conv with bias, num_channels x patch^2 -> d_model; the encoder's is
    the same tensor, the decoder's embed_patches its own), the encoder's cell_2d_embedding (x and y tables of
    max_2d_position_embeddings rows) and, per stack, one relative_attention_bias of (buckets + 2 with prefix_bucket)
    x heads for every relative_bias_args entry after the first (the first is block 0's, tied)."""
    arch = t5(cfg, model, "udop", T5S["t5"])  # configuration_udop forces the tie, as T5's does
    r = Reader(cfg, model, "udop")
    d, heads = arch.hidden, arch.heads
    p, ch = r.int("patch_size"), r.int("num_channels", 3)
    conv = ch * p * p * d + d
    biases = 0
    for args in (r.list("relative_bias_args", dict) or [])[1:]:
        extra = 2 if args.get("prefix_bucket") and not args.get("expand") else 0
        biases += (int(args.get("relative_attention_num_buckets", 32)) + extra) * heads
    parts = (Part("Patch_Embedding", "Conv2d", conv, matmul=ch * p * p * d),
             Part("Decoder_Patch_Embedding", "Conv2d", conv),
             Part("Cell_Embedding", "Embedding", 2 * r.int("max_2d_position_embeddings") * d),
             Part("Relative_Biases", "Parameters", 2 * biases))
    spec = dataclasses.replace(arch.spec, embed=(*arch.spec.embed, *parts))
    return dataclasses.replace(arch, spec=spec, uses=arch.uses + tuple(r.uses))


def davit(v: Reader) -> tuple[Part, int]:
    """modeling_florence2.Florence2VisionBackbone: per stage, a conv embedding (patch_size kernel from the previous
    width, bias; a LayerNorm of the input width when patch_prenorm, else of the output) and depths[stage] blocks, each
    a spatial (window attention) and a channel block alike: two depthwise 3x3 convs with bias, two LayerNorms, a qkv
    (qkv_bias) and a biased proj, an MLP of mlp_ratio with biases. (part, last width)."""
    dims, depths = v.list("embed_dim", int, 1), v.list("depths", int, 1)
    kernels, prenorm = v.list("patch_size", int, 1), v.list("patch_prenorm", bool, 1)
    ratio, bias = v.number("mlp_ratio", 4.0, high=1e3), v.flag("qkv_bias", True)
    params = matmul = 0
    width = v.int("in_channels", 3)
    for s, d in enumerate(dims):
        k = kernels[min(s, len(kernels) - 1)]
        params += width * d * k * k + d + 2 * (width if prenorm[min(s, len(prenorm) - 1)] else d)
        m = int(d * ratio)
        half = 2 * (9 * d + d) + 4 * d + linear(d, 3 * d, bias) + linear(d, d, True) + linear(d, m, True) + linear(m, d, True)
        n = depths[min(s, len(depths) - 1)]
        params += n * 2 * half
        matmul += n * 2 * (4 * d * d + 2 * d * m)
        width = d
    return Part("Vision_Tower", f"DaViT backbone ({sum(depths)} blocks)", params, matmul=matmul), width


def florence2(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """Florence2Model: vision_tower (davit), multi_modal_projector (image_projection last width -> projection_dim
    without bias, image_proj_norm, row and column position embeddings of max_position_embeddings x the last width;
    the temporal embedding is a cosine table) and language_model (a BartModel); lm_head on the top-level model, tied
    to the shared embedding by its tie_word_embeddings."""
    text = text_tower(cfg, model, "florence2", read_text)
    r = Reader(cfg, model, "florence2")
    text = retie(text, r.flag("tie_word_embeddings", True))
    v = r.child(r.sub("vision_config") or {}, "florence_vision", prefix="vision_config.")
    tower, last = davit(v)
    out = v.int("projection_dim")
    proj = Part("Projector", "Linear projector", last * out + 2 * out + v.int("max_position_embeddings") * last,
                matmul=last * out)
    tokens = (768 // 32) ** 2  # a nominal 768 x 768 image: the backbone's strides total 32
    spec = dataclasses.replace(text.spec, embed=(*text.spec.embed, tower, proj), image_tokens=tokens,
                               vision_transient=tokens * 8 * last)
    return dataclasses.replace(text, model_type="florence2", family="florence2", spec=spec,
                               uses=tuple(r.uses) + text.uses, architectures=architectures_of(cfg, model))


def pp_formulanet(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_pp_formulanet.PPFormulaNetForConditionalGeneration: the encoder (PPFormulaNetVisionModel: the SAM
    layout and neck, then PPFormulaNetMultiModalProjector: two stride-2 3x3 convs without bias, post_conv_in ->
    mid -> out channels, linear_1 out -> out and linear_2 out -> decoder_hidden_size, biased), the decoder
    (PPFormulaNetTextModel, an MBartDecoder, read as MBartForCausalLM) and an lm_head never tied (no
    _tied_weights_keys)."""
    r = Reader(cfg, model, "pp_formulanet")
    causal = dict(r.sub("text_config") or {}, architectures=["MBartForCausalLM"])
    text = retie(text_tower(dict(cfg, text_config=causal), model, "pp_formulanet", read_text), False)
    v = r.child(r.sub("vision_config") or {}, "pp_formulanet_vision", prefix="vision_config.")
    tower, patches, vh, per_patch = sam(v, "pp_formulanet_vision")
    cin, mid, out = v.int("post_conv_in_channels"), v.int("post_conv_mid_channels"), v.int("post_conv_out_channels")
    dh = v.int("decoder_hidden_size")
    proj = Part("Projector", "Conv + Linear projector", 9 * cin * mid + 9 * mid * out + linear(out, out, True)
                + linear(out, dh, True), matmul=out * out + out * dh)
    spec = dataclasses.replace(text.spec, embed=(*text.spec.embed, tower, proj), image_tokens=0,
                               encoder_tokens=patches // 16,
                               vision_act=vision_activations(tower, patches, per_patch, vh),
                               vision_transient=vision_transient(patches, per_patch, vh),
                               notes=(f"one image = {patches // 16:,} encoder tokens read by cross-attention",))
    return dataclasses.replace(text, model_type="pp_formulanet", family="pp_formulanet", spec=spec,
                               uses=tuple(r.uses) + text.uses, architectures=architectures_of(cfg, model))


def vision_encoder_decoder(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """VisionEncoderDecoderModel: the encoder (a vision tower: ViT, DeiT or one of vision_towers'), enc_to_dec_proj (a
    biased Linear) when the widths differ and the decoder sets no cross_attention_hidden_size, and the decoder, its
    own tie kept (the wrapper's tie_word_embeddings is forced off; the decoder ties by its own config). Other encoders
    and decoders whose cross-attention is not laid out are refused."""
    r = Reader(cfg, model, "vision-encoder-decoder")
    enc, dec = r.sub("encoder") or {}, r.sub("decoder") or {}
    # configuration_vision_encoder_decoder.VisionEncoderDecoderConfig: a ViT encoder and a BERT decoder by default
    kind = r.child(enc, "vit", prefix="encoder.").str("model_type", "vit")
    if kind not in TOWERS:
        raise ConfigError(model, "encoder.model_type", kind, "is not a supported vision encoder of "
                          "VisionEncoderDecoderModel (supported: " + ", ".join(sorted(TOWERS)) + ")")
    dt = r.child(dec, "bert", prefix="decoder.").str("model_type", "bert")
    if dt not in CAUSAL_CLASS:
        raise ConfigError(model, "decoder.model_type", dt, "has no causal-LM class for VisionEncoderDecoderModel")
    tower, patches, vh, per_patch = vision_tower(enc, r, kind, "encoder")
    text = read_text(dict(dec, model_type=dt, architectures=[CAUSAL_CLASS[dt]]), model)
    check_cross_decoder(model, text, dec)
    parts = [tower]
    d = r.child(dec, dt, prefix="decoder.")
    if vh != text.hidden and d.opt_int("cross_attention_hidden_size") is None:
        parts.append(Part("Projector", "Linear projector", linear(vh, text.hidden, True), matmul=vh * text.hidden))
    spec = dataclasses.replace(text.spec, embed=(*text.spec.embed, *parts), image_tokens=0, encoder_tokens=patches,
                               vision_act=vision_activations(tower, patches, per_patch, vh),
                               vision_transient=vision_transient(patches, per_patch, vh),
                               notes=(f"one image = {patches:,} encoder tokens read by cross-attention",))
    return dataclasses.replace(text, model_type="vision-encoder-decoder", family="vision-encoder-decoder", spec=spec,
                               uses=tuple(r.uses) + text.uses, architectures=architectures_of(cfg, model))


BUILDERS: dict[str, Builder] = {"pix2struct": pix2struct, "udop": udop}

WRAPPERS: dict[str, Wrapper] = {"florence2": florence2, "pp_formulanet": pp_formulanet,
                                 "vision-encoder-decoder": vision_encoder_decoder}
