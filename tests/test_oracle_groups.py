"""The oracle for encoders, encoder-decoders and vision-language models, each with its own Auto class.

Same rule as the CausalLM oracle (test_oracle_causal.py): defaults and sparse form of each config
class, built by transformers on the meta device; our graph must match exactly (no known gaps here).
`architectures` names the Auto class's model class, which selects the head our encoder builders add.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.test_oracle_support import outcome  # noqa: E402

ENCODERS = ["bert", "roberta", "xlm-roberta", "distilbert", "deberta-v2", "modernbert", "electra", "camembert",
            "data2vec-text", "ernie", "megatron-bert", "roberta-prelayernorm", "xlm-roberta-xl", "xmod", "roformer",
            "rembert", "roc_bert", "big_bird", "albert", "funnel", "convbert", "deberta", "luke", "fnet", "flaubert",
            "gte", "nomic_bert", "jina_embeddings_v3", "esmc", "ultrabert", "neomme", "squeezebert", "mobilebert",
            "perceiver"]
CLASSIFIERS = ["bert", "roberta", "xlm-roberta", "distilbert", "deberta-v2", "modernbert", "electra"]
ENCODER_DECODERS = ["t5", "mt5", "umt5", "bart", "mbart", "pegasus", "marian", "blenderbot", "blenderbot-small",
                    "plbart", "mvp", "bigbird_pegasus", "prophetnet", "fsmt", "led", "longt5", "pegasus_x",
                    "switch_transformers", "nllb-moe", "t5gemma", "t5gemma2", "encoder-decoder"]
VLMS = ["llava", "llava_next", "qwen2_vl", "qwen2_5_vl", "gemma3", "paligemma", "idefics3", "smolvlm", "mllama",
        "mistral3"]


def _mapping(name: str) -> dict[str, str]:
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, name)


GROUPS = {
    "AutoModelForMaskedLM": (ENCODERS, "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    "AutoModelForSequenceClassification": (CLASSIFIERS, "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    "AutoModel": (["bert", "roberta", "xlm-roberta"], "MODEL_MAPPING_NAMES"),
    "AutoModelForSeq2SeqLM": (ENCODER_DECODERS, "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    "AutoModelForImageTextToText": (VLMS, "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"),
}
CASES = [pytest.param(auto, t, form, id=f"{auto.removeprefix('AutoModel')}-{t}-{form}")
         for auto, (types, _) in GROUPS.items() for t in types for form in ("defaults", "sparse")]


@pytest.mark.parametrize("auto,model_type,form", CASES)
def test_group_count_equals_meta_device_count(auto, model_type, form):
    arch_class = _mapping(GROUPS[auto][1])[model_type]
    kind, detail = outcome(model_type, form, auto, arch_class)
    assert kind == "exact", detail
