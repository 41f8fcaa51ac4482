"""Encoder-decoders (BART family: modeling_bart.py and relatives; T5: modeling_t5.py) and their decoders.

BART-style layer: self-attention (q/k/v/out with biases) + LayerNorm, in the decoder cross-attention
over the encoder output + LayerNorm, fc1/fc2 + LayerNorm; post-norm (bart, marian, plbart) or pre-norm
with a final norm per stack (mbart, pegasus, blenderbot). Embeddings are shared by encoder, decoder
and LM head. T5: no biases, RMS-style LayerNorm of weight only, relative attention bias in the first
layer of each stack, gated or plain feed-forward; transformers 5.24 always ties the LM head
(configuration_t5.py forces tie_word_embeddings = True).
Serving (memory.py): the encoder output (tokens x d_model) plus the decoder's self-attention KV and
the cross-attention KV over the encoder's tokens, per sequence.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.layout import standard_block
from ..graph.parts import (
    Block,
    Part,
    attention_part,
    linear,
    lm_head_part,
    mlp_part,
    norm_part,
)
from ..graph.stacks import alike
from .assembly import Builder, assemble, bind

BART_ALIASES = {"hidden_size": ("d_model",)}


@dataclass(frozen=True)
class BartTraits:
    pos_offset: int | None = 2  # learned positions = max_position_embeddings + offset; None: sinusoidal table
    pre_norm: bool = False
    embed_norm: bool = True  # layernorm_embedding
    final_norm: bool = False  # layer_norm at the end of each stack
    bias: bool | str = True
    k_bias: bool = True
    causal_tied: bool = True  # the ForCausalLM head is tied to the decoder embedding
    positions_key: str = "max_position_embeddings"
    decoder_vocab: bool = False  # the decoder-only class embeds decoder_vocab_size rows (Marian)
    table_params: bool = True  # the sinusoidal table is a parameter (pegasus, marian), not a buffer (m2m_100)
    encoder_positions_key: str | None = None  # the encoder's own position count (LED); None: positions_key
    # Hooks of the families that extend this layer (long_document.py, sparse_encoder_decoders.py):
    attn_extra: Any = None  # callable(reader, stack, d) -> extra self-attention parameters (LED's global q/k/v)
    layer_pre: Any = None  # callable(reader, stack, layer, d) -> parts ahead of the layer (PEGASUS-X's global norm)
    ffn: Any = None  # callable(reader, stack, j (0-based in the stack), layer, d, ffn_dim) -> the FFN part
    encoder_extra: Any = None  # callable(reader, d) -> parts of the encoder's embeddings (PEGASUS-X's global tokens)
    local: Any = None  # callable(reader, stack, j (0-based in the stack), d, self-attention) -> its local attention


def is_causal_lm(cfg: Mapping[str, Any]) -> bool:
    archs = cfg.get("architectures")
    return isinstance(archs, list) and bool(archs) and isinstance(archs[0], str) and archs[0].endswith("ForCausalLM")


def _attn(name: str, typ: str, d: int, heads: int, bias: bool, k_bias: bool, *, cross: bool = False,
          cached: bool = True) -> Part:
    return attention_part(name, typ, d, heads, heads, d // heads, qkv_bias=bias, kv_bias=None if k_bias else False,
                          o_bias=bias, rope=False, window=-1 if cross else 0, cached=cached)


def _v_bias_fix(p: Part, d: int, bias: bool, k_bias: bool) -> Part:
    # whisper: k_proj has no bias but v_proj does; attention_part gave k and v the same.
    if bias and not k_bias:
        return p._replace(params=p.params + d)
    return p


def bart_stack(r: Reader, b: BartTraits, stack: str, layers: int, heads: int, ffn: int, d: int, first: int,
               bias: bool) -> list[Block]:
    """Layers first.. of one stack: built once and numbered (graph/stacks.py) unless a hook reads the layer's place."""
    norms = ("pre_attn", "pre_mlp") if b.pre_norm else ("post_attn", "post_mlp")

    def layer(i: int) -> Block:
        attn = _v_bias_fix(_attn(f"Attention_{i}", "Multi-Head Attn", d, heads, bias, b.k_bias,
                                 cached=stack == "decoder"), d, bias, b.k_bias)
        if b.attn_extra:
            attn = attn._replace(params=attn.params + b.attn_extra(r, stack, d))
        attn = b.local(r, stack, i - first, d, attn) if b.local else attn
        cross = _v_bias_fix(_attn(f"Cross_Attention_{i}", "Cross Attn", d, heads, bias, b.k_bias, cross=True), d,
                            bias, b.k_bias) if stack == "decoder" else None
        # fc1/fc2 keep biases even without attention bias
        mlp = b.ffn(r, stack, i - first, i, d, ffn) if b.ffn else mlp_part(f"FFN_{i}", "MLP", d, ffn, False, True)
        pre = b.layer_pre(r, stack, i, d) if b.layer_pre else []
        return standard_block(i, pre, attn, mlp, "layernorm", d, norms=norms, kind=stack, stack=stack, cross=cross)
    numbers = range(first, first + layers)
    return [layer(i) for i in numbers] if b.ffn or b.layer_pre or b.local else alike(numbers, layer)


def _positions(r: Reader, b: BartTraits, d: int, name: str, key: str | None = None) -> Part:
    n = r.int(key or b.positions_key)
    if b.pos_offset is None:  # sinusoidal table kept as an nn.Embedding (pegasus, marian) or a buffer (m2m_100)
        return Part(name, "Embedding", n * d if b.table_params else 0)
    return Part(name, "Embedding", (n + b.pos_offset) * d)


def _embeddings(cfg: Mapping[str, Any], r: Reader, b: BartTraits, d: int, vocab: int) -> tuple[bool, bool, list[Part]]:
    """(decoder-only class, tied head, the input and token-embedding parts) of a BART-style model."""
    causal = is_causal_lm(cfg)
    # Marian's decoder embeds decoder_vocab_size rows (None: vocab_size); its LM head keeps vocab_size
    # (modeling_marian.MarianDecoder, MarianForCausalLM, MarianMTModel).
    dec_vocab = r.int("decoder_vocab_size", vocab) if b.decoder_vocab else vocab
    tie = (b.causal_tied if causal else True) and r.flag("tie_word_embeddings", True)
    # Untied (tie_word_embeddings false), transformers 5.24 keeps the shared table, the encoder's and the decoder's
    # embed_tokens as three tensors (_tied_weights_keys applies only when tying).
    rows = dec_vocab if causal else (vocab if tie else 2 * vocab + dec_vocab)
    return causal, tie, [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", rows * d)]


def bart_like(cfg: Mapping[str, Any], model: str, mt: str, b: BartTraits) -> Arch:
    r = Reader(cfg, model, mt, BART_ALIASES)
    d, vocab = r.int("hidden_size"), r.int("vocab_size")
    bias = r.flag(b.bias, True) if isinstance(b.bias, str) else b.bias
    dec_n, dec_h, dec_f = r.int("decoder_layers"), r.int("decoder_attention_heads"), r.int("decoder_ffn_dim")
    ctx = r.int(b.positions_key)
    causal, tie, embed = _embeddings(cfg, r, b, d, vocab)
    blocks: list[Block] = []
    stack_norms = (2 * d if b.embed_norm else 0) + (2 * d if b.final_norm else 0)
    if not causal:
        enc_n, enc_h, enc_f = r.int("encoder_layers"), r.int("encoder_attention_heads"), r.int("encoder_ffn_dim")
        embed.append(_positions(r, b, d, "Encoder_Positions", b.encoder_positions_key))
        if b.encoder_extra:
            embed += b.encoder_extra(r, d)
        if stack_norms:
            embed.append(Part("Encoder_Norms", "LayerNorm", stack_norms, norm_width=d))
        blocks += bart_stack(r, b, "encoder", enc_n, enc_h, enc_f, d, 1, bias)
    embed.append(_positions(r, b, d, "Position_Embedding"))
    if b.embed_norm:
        embed.append(norm_part("Embedding_LayerNorm", "layernorm", d))
    blocks += bart_stack(r, b, "decoder", dec_n, dec_h, dec_f, d, len(blocks) + 1, bias)
    head: list[Part] = [norm_part("Final_LayerNorm", "layernorm", d)] if b.final_norm else []
    head += [lm_head_part(vocab, d, tie), Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=d, layers=len(blocks), heads=dec_h, kv=dec_h, head_dim=d // dec_h,
                    inter=dec_f, vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head,
                    kind="decoder" if causal else "encoder-decoder", position="learned")


BARTS: dict[str, BartTraits] = {
    "bart": BartTraits(), "mbart": BartTraits(pre_norm=True, final_norm=True), "plbart": BartTraits(), "mvp": BartTraits(),
    "pegasus": BartTraits(pos_offset=None, pre_norm=True, embed_norm=False, final_norm=True),
    "marian": BartTraits(pos_offset=None, embed_norm=False, decoder_vocab=True),
    # modeling_m2m_100.py: sinusoidal positions (a buffer), pre-norm layers, a LayerNorm closing each stack
    "m2m_100": BartTraits(pos_offset=None, pre_norm=True, embed_norm=False, final_norm=True, table_params=False),
    "blenderbot": BartTraits(pos_offset=0, pre_norm=True, embed_norm=False, final_norm=True),
    "blenderbot-small": BartTraits(pos_offset=0),
}


T5_ALIASES = {"hidden_size": ("d_model",), "num_hidden_layers": ("num_layers",), "num_attention_heads": ("num_heads",),
              "intermediate_size": ("d_ff",)}


@dataclass(frozen=True)
class T5Traits:
    per_layer_bias: bool = False  # every layer has its own relative_attention_bias (modeling_umt5.py)
    read_tie: bool = False  # honour tie_word_embeddings (switch); t5/mt5/umt5/longt5 configs force it True
    # Hooks of the families that extend this layout (long_document.py, sparse_encoder_decoders.py):
    encoder_attn_extra: Any = None  # callable(reader, j (0-based), heads, d) -> extra encoder self-attention params
    local: Any = None  # callable(reader, stack, j, d, encoder self-attention part) -> its local attention (Part.keys)
    ffn: Any = None  # callable(reader, stack, j, layer, d, d_ff, gated) -> the FFN part


def t5(cfg: Mapping[str, Any], model: str, mt: str, t: T5Traits) -> Arch:
    r = Reader(cfg, model, mt, T5_ALIASES)
    d, heads, d_kv, ff = r.int("hidden_size"), r.int("num_attention_heads"), r.int("d_kv"), r.int("intermediate_size")
    n_enc = r.int("num_hidden_layers")
    n_dec = r.int("num_decoder_layers", n_enc)
    vocab, buckets = r.int("vocab_size"), r.int("relative_attention_num_buckets", 32)
    proj = r.str("feed_forward_proj", "relu") or "relu"
    gated = proj.startswith("gated")
    # configuration_t5.py: dense_act_fn is feed_forward_proj's last word, and "gated-gelu" runs gelu_new (a
    # Python-written GELU, activations.PYTHON_GELU); the file's own dense_act_fn is recomputed, never read.
    act = "gelu_new" if proj == "gated-gelu" else proj.split("-")[-1]
    tie = r.flag("tie_word_embeddings", True) if t.read_tie else True
    # Untied, the shared table and the encoder's and decoder's embed_tokens are three tensors (as bart_like).
    embed: list[Part] = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", (1 if tie else 3) * vocab * d),
                         Part("Relative_Position_Bias", "Parameters", 0)]
    blocks: list[Block] = []

    def att(name: str, typ: str, first: bool, cross: bool = False) -> Part:
        extra = buckets * heads if (first or t.per_layer_bias) and not cross else 0
        return attention_part(name, typ, d, heads, heads, d_kv, rope=False, extra=extra, window=-1 if cross else 0)

    def layer(stack: str, first: int, i: int) -> Block:
        """Layer i (1-based) of the model, layer i - first (0-based) of the stack starting at layer `first`."""
        j = i - first
        a = att(f"Attention_{i}", "Multi-Head Attn", j == 0)
        if stack == "encoder":
            a = a._replace(kv=0)
            if t.encoder_attn_extra:
                a = a._replace(params=a.params + t.encoder_attn_extra(r, j, heads, d))
            a = t.local(r, stack, j, d, a) if t.local else a
        cross = att(f"Cross_Attention_{i}", "Cross Attn", False, True) if stack == "decoder" else None
        f = t.ffn(r, stack, j, i, d, ff, gated) if t.ffn else \
            mlp_part(f"FFN_{i}", "GeGLU" if gated else "MLP", d, ff, gated, False)
        return standard_block(i, [], a, f, "rmsnorm", d, kind=stack, stack=stack, cross=cross)

    for stack, n in (("encoder", n_enc), ("decoder", n_dec)):
        first = len(blocks) + 1
        # a stack's first layer holds the relative bias (all do with per_layer_bias): the others are alike and
        # numbered (graph/stacks.py), unless a hook reads the layer's place
        own = n if t.encoder_attn_extra or t.ffn else min(n, 0 if t.per_layer_bias else 1)
        blocks += [layer(stack, first, first + j) for j in range(own)]
        blocks += alike(range(first + own, first + n), functools.partial(layer, stack, first))
    encoder_final = Part("Encoder_Final_Norm", "RMSNorm", d, norm_width=d)
    head = [norm_part("Final_RMSNorm", "rmsnorm", d), lm_head_part(vocab, d, tie), Part("Output", "Output", width=vocab)]
    # T5 uses relative positions: no hard context; n_positions (512) is the trained length.
    ctx = r.int("n_positions", 512)
    arch = assemble(cfg, model, r, hidden=d, layers=len(blocks), heads=heads, kv=heads, head_dim=d_kv, inter=ff,
                    vocab=vocab, ctx=ctx, tie=tie, embed=[*embed, encoder_final], blocks=blocks, head=head,
                    kind="encoder-decoder", position="relative", act=act)
    return arch


T5S: dict[str, T5Traits] = {"t5": T5Traits(), "mt5": T5Traits(), "umt5": T5Traits(per_layer_bias=True)}


def trocr(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_trocr.py: a BART-style post-norm decoder; positions learned (+2) or a sinusoidal buffer;
    # cross-attention k/v read cross_attention_hidden_size when set.
    r = Reader(cfg, model, "trocr", {"hidden_size": ("d_model",)})
    d, vocab = r.int("hidden_size"), r.int("vocab_size")
    n, heads, ffn = r.int("decoder_layers"), r.int("decoder_attention_heads"), r.int("decoder_ffn_dim")
    ctx = r.int("max_position_embeddings", 512)
    learned = r.flag("use_learned_position_embeddings", True)
    cross_in = r.int("cross_attention_hidden_size", d)
    embed: list[Part] = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * d),
                         Part("Position_Embedding", "Embedding", (ctx + 2) * d if learned else 0)]
    if r.flag("layernorm_embedding", True):
        embed.append(norm_part("Embedding_LayerNorm", "layernorm", d))
    def layer(i: int) -> Block:
        attn = _attn(f"Attention_{i}", "Multi-Head Attn", d, heads, True, True)
        cross = _attn(f"Cross_Attention_{i}", "Cross Attn", d, heads, True, True, cross=True)
        if cross_in != d:
            cross = cross._replace(params=cross.params + 2 * (cross_in - d) * d)
        mlp = mlp_part(f"FFN_{i}", "MLP", d, ffn, False, True)
        return standard_block(i, [], attn, mlp, "layernorm", d, norms=("post_attn", "post_mlp"), cross=cross)
    blocks = alike(range(1, n + 1), layer)
    tie = r.flag("tie_word_embeddings", True)
    head = [lm_head_part(vocab, d, tie), Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=d, layers=n, heads=heads, kv=heads, head_dim=d // heads, inter=ffn,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head, position="learned")


def whisper(cfg: Mapping[str, Any], model: str) -> Arch:
    # modeling_whisper.py: pre-norm BART layers whose k_proj has no bias; the encoder reads log-mel
    # frames through conv1 (num_mel_bins -> d, k=3) and conv2 (d -> d, k=3) and max_source_positions
    # positions; the decoder learns max_target_positions positions; proj_out is tied.
    b = BartTraits(pos_offset=0, pre_norm=True, embed_norm=False, final_norm=True, k_bias=False,
          positions_key="max_target_positions")
    r = Reader(cfg, model, "whisper", BART_ALIASES)
    d, vocab = r.int("hidden_size"), r.int("vocab_size")
    causal, tie, embed = _embeddings(cfg, r, b, d, vocab)
    blocks: list[Block] = []
    if not causal:
        mels, src = r.int("num_mel_bins"), r.int("max_source_positions")
        embed.append(Part("Audio_Conv", "Conv1d", mels * d * 3 + d + d * d * 3 + d))
        embed.append(Part("Audio_Positions", "Embedding", src * d))
        embed.append(Part("Audio_Final_Norm", "LayerNorm", 2 * d, norm_width=d))
        blocks += bart_stack(r, b, "encoder", r.int("encoder_layers"), r.int("encoder_attention_heads"),
                             r.int("encoder_ffn_dim"), d, 1, True)
    tgt = r.int("max_target_positions")
    embed.append(Part("Position_Embedding", "Embedding", tgt * d))
    heads = r.int("decoder_attention_heads")
    blocks += bart_stack(r, b, "decoder", r.int("decoder_layers"), heads, r.int("decoder_ffn_dim"), d,
                         len(blocks) + 1, True)
    tie = r.flag("tie_word_embeddings", True)
    head = [norm_part("Final_LayerNorm", "layernorm", d), lm_head_part(vocab, d, tie),
            Part("Output", "Output", width=vocab)]
    return assemble(cfg, model, r, hidden=d, layers=len(blocks), heads=heads, kv=heads, head_dim=d // heads,
                    inter=r.int("decoder_ffn_dim"), vocab=vocab, ctx=tgt, tie=tie, embed=embed, blocks=blocks,
                    head=head, kind="decoder" if causal else "encoder-decoder", position="learned")


def fsmt(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_fsmt.py: BART's post-norm layers without layernorm_embedding; each stack's
    SinusoidalPositionalEmbedding is an nn.Embedding of max_position_embeddings + pad_token_id + 1 rows (parameters);
    the encoder embeds src_vocab_size rows, the decoder tgt_vocab_size, and output_projection maps to
    tgt_vocab_size. Tied (FSMTModel._tied_weights_keys), the encoder's table and output_projection are the
    decoder's table, whatever src_vocab_size says."""
    b = BartTraits(pos_offset=None, embed_norm=False)
    r = Reader(cfg, model, "fsmt", BART_ALIASES)
    d, src, tgt = r.int("hidden_size"), r.int("src_vocab_size"), r.int("tgt_vocab_size")
    ctx = r.int("max_position_embeddings")
    rows = ctx + r.int("pad_token_id", 1, minimum=0) + 1
    tie = r.flag("tie_word_embeddings", False)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", (tgt if tie else src + tgt) * d),
             Part("Encoder_Positions", "Embedding", rows * d)]
    blocks = bart_stack(r, b, "encoder", r.int("encoder_layers"), r.int("encoder_attention_heads"),
                        r.int("encoder_ffn_dim"), d, 1, True)
    embed.append(Part("Position_Embedding", "Embedding", rows * d))
    heads, ffn = r.int("decoder_attention_heads"), r.int("decoder_ffn_dim")
    blocks += bart_stack(r, b, "decoder", r.int("decoder_layers"), heads, ffn, d, len(blocks) + 1, True)
    head = [lm_head_part(tgt, d, tie), Part("Output", "Output", width=tgt)]
    return assemble(cfg, model, r, hidden=d, layers=len(blocks), heads=heads, kv=heads, head_dim=d // heads,
                    inter=ffn, vocab=tgt, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head,
                    kind="encoder-decoder", position="learned")


def prophetnet(cfg: Mapping[str, Any], model: str) -> Arch:
    """modeling_prophetnet.py: post-norm layers with biased projections; the decoder's n-gram self-attention
    adds relative_pos_embeddings (hidden -> buckets x heads); ngram embeddings; shared word embeddings and
    a tied head. ForCausalLM is the decoder alone; otherwise encoder + decoder."""
    r = Reader(cfg, model, "prophetnet")
    h, vocab = r.int("hidden_size"), r.int("vocab_size")
    ctx = r.int("max_position_embeddings", 512)
    buckets = r.int("num_buckets", 32)
    causal = is_causal_lm(cfg)
    embed = [Part("Input", "Input", width=-1), Part("Embedding", "Embedding", vocab * h)]
    blocks = []
    if not causal:
        en, eh, ef = r.int("num_encoder_layers"), r.int("num_encoder_attention_heads"), r.int("encoder_ffn_dim")
        embed += [Part("Encoder_Positions", "Embedding", ctx * h),
                  Part("Encoder_LayerNorm", "LayerNorm", 2 * h, norm_width=h)]
        def encoder_layer(i: int) -> Block:
            a = attention_part(f"Attention_{i}", "Multi-Head Attn", h, eh, eh, h // eh, qkv_bias=True, o_bias=True,
                               rope=False, cached=False)
            return standard_block(i, [], a, mlp_part(f"FFN_{i}", "MLP", h, ef, False, True), "layernorm", h,
                                  norms=("post_attn", "post_mlp"), kind="encoder", stack="encoder")
        blocks = alike(range(1, en + 1), encoder_layer)
    dn, dh, df = r.int("num_decoder_layers"), r.int("num_decoder_attention_heads"), r.int("decoder_ffn_dim")
    embed += [Part("Position_Embedding", "Embedding", ctx * h), Part("Ngram_Embedding", "Embedding", r.int("ngram", 2) * h),
              norm_part("Embedding_LayerNorm", "layernorm", h)]
    def decoder_layer(i: int) -> Block:
        a = attention_part(f"Attention_{i}", "N-gram Attn", h, dh, dh, h // dh, qkv_bias=True, o_bias=True, rope=False,
                           extra=linear(h, buckets * dh, True))
        c = attention_part(f"Cross_Attention_{i}", "Cross Attn", h, dh, dh, h // dh, qkv_bias=True, o_bias=True,
                           rope=False, window=-1)
        return standard_block(i, [], a, mlp_part(f"FFN_{i}", "MLP", h, df, False, True), "layernorm", h,
                              norms=("post_attn", "post_mlp"), cross=c)
    blocks += alike(range(len(blocks) + 1, len(blocks) + dn + 1), decoder_layer)
    tie = r.flag("tie_word_embeddings", True)
    if not tie:  # the decoder wrapper's own word embeddings are then a third copy; with an encoder, a fourth too
        embed.append(Part("Decoder_Embedding", "Embedding", (1 if causal else 2) * vocab * h))
    head = [lm_head_part(vocab, h, tie), Part("Output", "Output", width=vocab)]
    arch = assemble(cfg, model, r, hidden=h, layers=len(blocks), heads=dh, kv=dh, head_dim=h // dh, inter=df,
                    vocab=vocab, ctx=ctx, tie=tie, embed=embed, blocks=blocks, head=head,
                    kind="decoder" if causal else "encoder-decoder", position="learned")
    # ProphetNetDecoder runs the main stream and its ngram predicting streams together, (1 + ngram) x tokens through
    # every decoder layer, with fp32 scores over 2 x tokens keys and int64 relative-position gathers, and the loss
    # reads ngram x tokens of logits: priced here as one stream (a CPU step of the class default, two layers of
    # each stack at 256 tokens, LoRA: 47% above the estimate; FINDINGS.md F101)
    return dataclasses.replace(arch, approximate="the decoder's n-gram streams are priced as one: training memory is "
                                                 "understated (a simulated LoRA step read 47% more)")

# modeling_seamless_m4t.SeamlessM4TForTextToText (v2 alike): shared embeddings, a text encoder and a text decoder of
# pre-norm BART layers, sinusoidal positions (a buffer), a LayerNorm closing each stack, the LM head tied to shared.
SEAMLESS = BARTS["m2m_100"]  # modeling_seamless_m4t: the text encoder and decoder are M2M100's layers


def seamless_m4t(cfg: Mapping[str, Any], model: str) -> Arch:
    """The text-to-text model of SeamlessM4T; another class of the model_type (SeamlessM4TModel, the speech
    classes) also holds a speech encoder, a text-to-unit model and a vocoder, which are not counted."""
    mt = str(cfg.get("model_type"))
    arch = bart_like(cfg, model, mt, SEAMLESS)
    if any(a.endswith("ForTextToText") for a in arch.architectures[:1]):
        return arch
    return dataclasses.replace(arch, approximate="only the text encoder and decoder are counted (not the speech "
                                                 "encoder, the text-to-unit model or the vocoder)")


BUILDERS: dict[str, Builder] = {
    **bind(BARTS, bart_like),
    "seamless_m4t": seamless_m4t,
    "seamless_m4t_v2": seamless_m4t,
    **bind(T5S, t5),
    "trocr": trocr,
    "whisper": whisper,
    "prophetnet": prophetnet,
    "fsmt": fsmt,
}
