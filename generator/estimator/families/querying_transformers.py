"""Q-Former vision-language models (BLIP-2, InstructBLIP, InstructBLIP-Video) and BLIP's captioning decoder.

BLIP-2 and its descendants (modeling_blip_2.Blip2ForConditionalGeneration, modeling_instructblip.py,
modeling_instructblipvideo.py): a ViT vision tower (vision_towers.blip), num_query_tokens learned queries read by a
Q-Former (BERT-style post-norm layers whose every cross_attention_frequency-th layer cross-attends to the vision
tower's patches), a language_projection to the text width and a language model of any family (text_config; OPT by
default), which keeps its own embedding tie. One image adds num_query_tokens tokens to the text sequence.
BLIP (modeling_blip.BlipForConditionalGeneration): the vision tower and a BERT-style text decoder with
cross-attention over the patches (modeling_blip_text.BlipTextLMHeadModel).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader, architectures_of
from ..graph.layout import standard_block
from ..graph.parts import Part, attention_part, linear, mlp_part, norm_part
from .assembly import Builder, TextReader, Wrapper, assemble
from .encoders import EncoderTraits, heads
from .vision_language import text_tower
from .vision_towers import vision_activations, vision_tower, vision_transient

# The vision and Q-Former config classes each wrapper's config class fixes (sub_configs).
VISION = {"blip-2": "blip_2_vision_model", "instructblip": "instructblip_vision_model",
          "instructblipvideo": "instructblipvideo_vision_model", "blip": "blip_vision_model"}
QFORMER = {"blip-2": "blip_2_qformer", "instructblip": "instructblip_qformer",
           "instructblipvideo": "instructblipvideo_qformer"}


def qformer(q: Reader, mt: str, encoder_width: int, queries: int) -> tuple[Part, int]:
    """(Q-Former part with the query tokens, activation elements per query per layer).

    modeling_blip_2.Blip2QFormerLayer: self-attention (query/key/value/dense with biases, LayerNorm); on layers
    whose index is a multiple of cross_attention_frequency, cross-attention whose key/value read the vision width
    (configuration_blip_2.Blip2Config sets encoder_hidden_size to it); intermediate_query/output_query (biased,
    LayerNorm), and the text path's intermediate/output when use_qformer_text_input. Blip2QFormerModel adds a
    LayerNorm. InstructBLIP (modeling_instructblip.InstructBlipQFormerLayer) always has the text path, and its
    InstructBlipQFormerEmbeddings hold word and position embeddings and the LayerNorm."""
    h, n, inter = q.int("hidden_size"), q.int("num_hidden_layers"), q.int("intermediate_size")
    every = q.int("cross_attention_frequency", 2)
    text_path = mt != "blip-2" or q.flag("use_qformer_text_input", False)
    attn = 4 * linear(h, h, True) + 2 * h
    cross = 2 * linear(h, h, True) + 2 * linear(encoder_width, h, True) + 2 * h
    ffn = linear(h, inter, True) + linear(inter, h, True) + 2 * h
    crossing = (n + every - 1) // every
    params = queries * h + n * (attn + ffn * (2 if text_path else 1)) + crossing * cross + 2 * h
    if mt != "blip-2":
        params += (q.int("vocab_size") + q.int("max_position_embeddings")) * h
    matmul = n * (4 * h * h + 2 * h * inter) + crossing * 2 * h * h
    return Part("QFormer", f"Q-Former ({n} layers, {queries} queries)", params, matmul=matmul), n * (8 * h + 2 * inter)


def querying_vlm(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """A Q-Former VLM: the vision tower, the Q-Former and its queries, language_projection (Linear with bias,
    Q-Former width -> text width) and the language model of text_config."""
    mt = str(cfg.get("model_type"))
    text = text_tower(cfg, model, mt, read_text)
    spec = text.spec
    r = Reader(cfg, model, mt)
    tower, patches, vh, per_patch = vision_tower(r.sub("vision_config") or {}, r, VISION[mt])
    queries = r.int("num_query_tokens", 32)
    q = r.child(r.sub("qformer_config") or {}, QFORMER[mt], prefix="qformer_config.")
    former, per_query = qformer(q, mt, vh, queries)
    qh = q.int("hidden_size")
    proj = Part("Projector", "Linear projector", linear(qh, spec.hidden, True), matmul=qh * spec.hidden)
    new = dataclasses.replace(spec, embed=(*spec.embed, tower, former, proj), image_tokens=queries,
                              vision_act=vision_activations(tower, patches, per_patch, vh) + queries * per_query,
                              vision_transient=vision_transient(patches, per_patch, vh))
    return dataclasses.replace(text, model_type=mt, family=mt, spec=new, uses=tuple(r.uses) + text.uses,
                               architectures=architectures_of(cfg, model))


def blip(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_blip.BlipForConditionalGeneration: the vision tower and text_decoder (BlipTextLMHeadModel): word and
    position embeddings with a LayerNorm, post-norm BERT layers with biased self-attention, cross-attention over the
    vision width (when is_decoder; configuration_blip.BlipConfig sets encoder_hidden_size to it) and a biased MLP,
    and BERT's prediction head (transform, decoder tied to the word embeddings, bias). Either config's
    tie_word_embeddings ties (each PreTrainedModel ties its own _tied_weights_keys)."""
    r = Reader(cfg, model, "blip")
    tower, patches, vh, per_patch = vision_tower(r.sub("vision_config") or {}, r, VISION["blip"])
    t = r.child(r.sub("text_config") or {}, "blip_text_model", prefix="text_config.")
    h, n, nh, vocab = t.int("hidden_size"), t.int("num_hidden_layers"), t.int("num_attention_heads"), t.int("vocab_size")
    inter, ctx = t.int("intermediate_size"), t.int("max_position_embeddings", 512)
    crossing = t.flag("is_decoder", True)
    top, own = r.flag("tie_word_embeddings", True), t.flag("tie_word_embeddings", True)
    tie = top or own
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h),
             Part("Position_Embedding", "Embedding", ctx * h), norm_part("Embedding_LayerNorm", "layernorm", h), tower]
    blocks = []
    for i in range(1, n + 1):
        attn = attention_part(f"Attention_{i}", "Multi-Head Attn", h, nh, nh, h // nh, qkv_bias=True, o_bias=True,
                              rope=False)
        cross = attention_part(f"Cross_Attention_{i}", "Cross Attn", h, nh, nh, h // nh, qkv_bias=True, o_bias=True,
                               rope=False, window=-1, extra=2 * (vh - h) * h) if crossing else None
        blocks.append(standard_block(i, [], attn, mlp_part(f"FFN_{i}", "MLP", h, inter, False, True), "layernorm", h,
                                     norms=("post_attn", "post_mlp"), cross=cross))
    head = [*heads(EncoderTraits(), t, "mlm", h, h, vocab, tie, cfg), Part("Output", "Output", width=vocab)]
    arch = assemble(cfg, model, r, hidden=h, layers=n, heads=nh, kv=nh, head_dim=h // nh, inter=inter, vocab=vocab,
                    ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head, position="learned", image_tokens=0,
                    vision_act=vision_activations(tower, patches, per_patch, vh),
                    vision_transient=vision_transient(patches, per_patch, vh))
    return arch


BUILDERS: dict[str, Builder] = {"blip": blip}

WRAPPERS: dict[str, Wrapper] = dict.fromkeys(QFORMER, querying_vlm)
