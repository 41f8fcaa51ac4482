"""EncoderDecoderModel and VisionEncoderDecoderModel from nested configs of several families: the estimator's count
equals transformers' meta count, a decoder's cross-attention keeps K/V over the encoder's tokens, and an encoder or
decoder the families cannot read as such is refused by name."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from generator.errors import TraceError  # noqa: E402
from tests.test_oracle_support import meta_params, our_count, quiet  # noqa: E402

SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 300}
BART = {"d_model": 48, "decoder_layers": 2, "encoder_layers": 1, "decoder_attention_heads": 4, "decoder_ffn_dim": 64,
        "vocab_size": 300}
GPT2 = {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 300}
XGLM = {"d_model": 64, "num_layers": 2, "attention_heads": 4, "ffn_dim": 96, "vocab_size": 300}
PROPHETNET = {"hidden_size": 64, "num_encoder_layers": 1, "num_decoder_layers": 2, "num_encoder_attention_heads": 4,
              "num_decoder_attention_heads": 4, "encoder_ffn_dim": 96, "decoder_ffn_dim": 96, "vocab_size": 300}
PAIRS = [
    ("bert", SMALL, "bert", dict(SMALL, hidden_size=32, intermediate_size=50)),  # enc_to_dec_proj
    ("roberta", SMALL, "roberta", SMALL),
    ("bert", SMALL, "bart", BART),  # BartForCausalLM keeps its cross-attention
    ("electra", dict(SMALL, embedding_size=32), "bert-generation", SMALL),  # no pooler; BertGenerationDecoder
    ("big_bird", dict(SMALL, attention_type="original_full"), "megatron-bert", SMALL),
    ("distilbert", {"dim": 64, "n_layers": 2, "n_heads": 4, "hidden_dim": 96, "vocab_size": 300}, "xlm-roberta-xl", SMALL),
    # GPT2Block.crossattention (q_attn, c_attn of 2 x n_embd, c_proj) and ln_cross_attn, from the decoder builder
    ("bert", SMALL, "gpt2", GPT2),
    ("bert", dict(SMALL, hidden_size=32, intermediate_size=50), "gpt2", dict(GPT2, n_positions=128)),  # enc_to_dec_proj
    ("roberta", SMALL, "gpt_bigcode", dict(GPT2, multi_query=False)),  # GPTBigCodeBlock: cross-attention without MQA
    ("electra", SMALL, "xglm", XGLM),  # XGLMDecoderLayer.encoder_attn and encoder_attn_layer_norm
    ("bert", SMALL, "gpt-sw3", GPT2),  # GPT2LMHeadModel under another model_type
    ("bert", SMALL, "prophetnet", PROPHETNET),  # ProphetNetForCausalLM: the decoder stack alone
]
# VisionEncoderDecoderModel: a vision tower, then a decoder whose cross-attention reads its patches
VIT = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96, "image_size": 32,
       "patch_size": 8}
VISION_PAIRS = [
    ("vit", VIT, "gpt2", GPT2),
    ("vit", dict(VIT, hidden_size=48), "gpt2", dict(GPT2, tie_word_embeddings=False)),  # enc_to_dec_proj, own head
    ("vit", VIT, "gpt_bigcode", dict(GPT2, multi_query=False)),
    ("deit", VIT, "xglm", XGLM),
    ("vit", VIT, "bert", SMALL),
    ("vit", VIT, "prophetnet", PROPHETNET),
    ("vit", VIT, "trocr", {"d_model": 64, "decoder_layers": 2, "decoder_attention_heads": 4, "decoder_ffn_dim": 96,
                           "vocab_size": 300}),
]
# nlpconnect/vit-gpt2-image-captioning's config.json, written from its known structure: google/vit-base-patch16-224-in21k
# as the encoder, gpt2 (add_cross_attention, is_decoder) as the decoder, the wrapper's tie forced off
VIT_GPT2 = {
    "architectures": ["VisionEncoderDecoderModel"], "model_type": "vision-encoder-decoder", "is_encoder_decoder": True,
    "decoder_start_token_id": 50256, "eos_token_id": 50256, "pad_token_id": 50256, "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "decoder": {"_name_or_path": "gpt2", "activation_function": "gelu_new", "add_cross_attention": True,
                "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1,
                "eos_token_id": 50256, "initializer_range": 0.02, "is_decoder": True, "layer_norm_epsilon": 1e-05,
                "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_inner": None, "n_layer": 12,
                "n_positions": 1024, "reorder_and_upcast_attn": False, "resid_pdrop": 0.1,
                "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True, "use_cache": True,
                "vocab_size": 50257},
    "encoder": {"_name_or_path": "google/vit-base-patch16-224-in21k", "architectures": ["ViTModel"],
                "attention_probs_dropout_prob": 0.0, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
                "hidden_size": 768, "image_size": 224, "initializer_range": 0.02, "intermediate_size": 3072,
                "layer_norm_eps": 1e-12, "model_type": "vit", "num_attention_heads": 12, "num_channels": 3,
                "num_hidden_layers": 12, "patch_size": 16, "qkv_bias": True},
}


def _config(enc_type, enc, dec_type, dec, wrapper="EncoderDecoder"):
    from transformers import CONFIG_MAPPING

    config_class = getattr(transformers, f"{wrapper}Config")
    c = config_class.from_encoder_decoder_configs(CONFIG_MAPPING[enc_type](**enc), CONFIG_MAPPING[dec_type](**dec))
    return c, {**c.to_dict(), "architectures": [f"{wrapper}Model"]}


def _meta_count(config, wrapper="EncoderDecoder"):
    return meta_params(lambda: getattr(transformers, f"{wrapper}Model")(config=config))


@pytest.mark.parametrize("enc_type,enc,dec_type,dec", PAIRS, ids=[f"{e}-{d}" for e, _, d, _ in PAIRS])
def test_pair_count_equals_meta_count(enc_type, enc, dec_type, dec):
    quiet()
    config, cfg = _config(enc_type, enc, dec_type, dec)
    assert our_count(cfg, "pair") == _meta_count(config)


@pytest.mark.parametrize("enc_type,enc,dec_type,dec", VISION_PAIRS, ids=[f"{e}-{d}" for e, _, d, _ in VISION_PAIRS])
def test_vision_pair_count_equals_meta_count(enc_type, enc, dec_type, dec):
    quiet()
    config, cfg = _config(enc_type, enc, dec_type, dec, "VisionEncoderDecoder")
    assert our_count(cfg, "pair") == _meta_count(config, "VisionEncoderDecoder")


def test_vit_gpt2_captioner_count_and_cross_attention_cache():
    from transformers import VisionEncoderDecoderConfig

    from generator.estimator import Assumptions
    from generator.estimator.memory.profile import kv_bytes_per_sequence, kv_bytes_per_token
    from generator.estimator.normalise import normalise

    quiet()
    config = VisionEncoderDecoderConfig(**{k: v for k, v in VIT_GPT2.items() if k != "model_type"})
    assert our_count(VIT_GPT2, "vit-gpt2") == _meta_count(config, "VisionEncoderDecoder") == 239_195_904
    a, s = normalise(VIT_GPT2, "vit-gpt2"), Assumptions()
    per_token = 12 * 2 * 768 * s.kv_bytes  # GPT2Attention: K and V of n_embd per layer, per generated token
    patches = (224 // 16) ** 2 + 1  # ViTEmbeddings: the patches and the CLS token, read by every crossattention
    assert kv_bytes_per_token(a, s) == per_token
    assert kv_bytes_per_sequence(a, s, 1000) == (1000 + patches) * per_token


def test_plain_gpt2_reads_no_cross_attention():
    from transformers import CONFIG_MAPPING

    from generator.estimator.normalise import normalise

    for cfg in (dict(GPT2, model_type="gpt2"), CONFIG_MAPPING["gpt2"](**GPT2).to_dict()):
        a = normalise(cfg, "gpt2")
        assert not any(p.type == "Cross Attn" for b in a.spec.blocks for p in b.parts)
        assert "add_cross_attention" not in {u.name for u in a.uses}


@pytest.mark.parametrize("enc_type,enc,dec_type,dec,key", [
    ("t5", {"d_model": 64, "num_layers": 2, "num_heads": 4, "d_ff": 96, "vocab_size": 300}, "bert", SMALL, "encoder"),
    # GPTNeoXLayer has no cross-attention: add_cross_attention is asked of a family that does not lay it out
    ("bert", SMALL, "gpt_neox", SMALL, "decoder"),
])
def test_unreadable_side_is_refused_by_name(enc_type, enc, dec_type, dec, key):
    quiet()
    _, cfg = _config(enc_type, enc, dec_type, dec)
    with pytest.raises(TraceError, match=f"{key}.model_type"):
        our_count(cfg, "pair")


def test_vision_decoder_without_cross_attention_is_refused():
    quiet()
    _, cfg = _config("vit", VIT, "gpt_neox", SMALL, "VisionEncoderDecoder")
    with pytest.raises(TraceError, match="decoder.model_type"):
        our_count(cfg, "pair")


def test_multi_query_bigcode_cross_attention_is_refused():
    # modeling_gpt_bigcode.GPTBigCodeBlock raises NotImplementedError for cross-attention under multi_query
    quiet()
    _, cfg = _config("bert", SMALL, "gpt_bigcode", GPT2)
    with pytest.raises(TraceError, match="multi_query"):
        our_count(cfg, "pair")
