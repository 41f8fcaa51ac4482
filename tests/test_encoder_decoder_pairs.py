"""EncoderDecoderModel from nested configs of several families: the estimator's count equals transformers' meta count,
and an encoder or decoder the families cannot read as such is refused by name."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from generator.errors import TraceError  # noqa: E402
from tests.test_oracle_support import our_count, quiet  # noqa: E402

SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 300}
BART = {"d_model": 48, "decoder_layers": 2, "encoder_layers": 1, "decoder_attention_heads": 4, "decoder_ffn_dim": 64,
        "vocab_size": 300}
PAIRS = [
    ("bert", SMALL, "bert", dict(SMALL, hidden_size=32, intermediate_size=50)),  # enc_to_dec_proj
    ("roberta", SMALL, "roberta", SMALL),
    ("bert", SMALL, "bart", BART),  # BartForCausalLM keeps its cross-attention
    ("electra", dict(SMALL, embedding_size=32), "bert-generation", SMALL),  # no pooler; BertGenerationDecoder
    ("big_bird", dict(SMALL, attention_type="original_full"), "megatron-bert", SMALL),
    ("distilbert", {"dim": 64, "n_layers": 2, "n_heads": 4, "hidden_dim": 96, "vocab_size": 300}, "xlm-roberta-xl", SMALL),
]


def _config(enc_type, enc, dec_type, dec):
    from transformers import CONFIG_MAPPING, EncoderDecoderConfig

    c = EncoderDecoderConfig.from_encoder_decoder_configs(CONFIG_MAPPING[enc_type](**enc), CONFIG_MAPPING[dec_type](**dec))
    return c, {**c.to_dict(), "architectures": ["EncoderDecoderModel"]}


@pytest.mark.parametrize("enc_type,enc,dec_type,dec", PAIRS, ids=[f"{e}-{d}" for e, _, d, _ in PAIRS])
def test_pair_count_equals_meta_count(enc_type, enc, dec_type, dec):
    import torch

    quiet()
    config, cfg = _config(enc_type, enc, dec_type, dec)
    with torch.device("meta"):
        model = transformers.EncoderDecoderModel(config=config)
    assert our_count(cfg, "pair") == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("enc_type,enc,dec_type,dec,key", [
    ("t5", {"d_model": 64, "num_layers": 2, "num_heads": 4, "d_ff": 96, "vocab_size": 300}, "bert", SMALL, "encoder"),
    ("bert", SMALL, "gpt2", {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 300}, "decoder"),
])
def test_unreadable_side_is_refused_by_name(enc_type, enc, dec_type, dec, key):
    quiet()
    _, cfg = _config(enc_type, enc, dec_type, dec)
    with pytest.raises(TraceError, match=f"{key}.model_type"):
        our_count(cfg, "pair")
