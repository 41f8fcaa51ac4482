"""The dropouts and eager softmax of BART-like encoder-decoders and BERT-like encoders (FINDINGS.md F35), against
their modeling files (transformers 5.24) and CPU-simulated steps of the site's opus-mt-en-fr (Marian),
bert-base-uncased and distilbert-base-uncased (data/measurements/cpu-sim-extra.jsonl; the harness builds a
masked LM with its masked-LM class)."""

from __future__ import annotations

import pytest

from generator.estimator.memory.activations import regime
from generator.estimator.memory.attention import AUTOCAST_SOFTMAX, score_bytes
from generator.estimator.memory.dropouts import embed_dropouts, layer_dropouts
from tests.conftest import measured_rows, priced_errors, snapshot_model


def test_bart_likes_drop_on_dropout_and_activation_dropout():
    """modeling_marian.py (copied from modeling_bart.py): config.dropout after each residual branch and on each
    stack's embeddings, config.activation_dropout between fc1's activation and fc2; each read on its own."""
    arch, g = snapshot_model("Helsinki-NLP/opus-mt-en-fr")
    encoder, decoder = g.spec.blocks[0], g.spec.blocks[-1]
    assert layer_dropouts(arch, encoder) == (2, 0) and layer_dropouts(arch, decoder) == (3, 0)
    assert embed_dropouts(arch) == 2
    act, g1 = snapshot_model("Helsinki-NLP/opus-mt-en-fr", activation_dropout=0.1)
    assert layer_dropouts(act, g1.spec.blocks[0]) == (2, 1)


def test_simulated_marian_steps_are_priced():
    """Six CPU-simulated steps of opus-mt-en-fr (full, LoRA, checkpointed LoRA, activation dropout 0.1, batch 4):
    each within 1%. Its LoRA read -1.9% before the BART-like dropouts were priced."""
    rows = [r for r in measured_rows("cpu-sim-extra") if r["model"] == "Helsinki-NLP/opus-mt-en-fr"]
    assert len(rows) == 6
    for error, row in priced_errors(rows):
        assert abs(error) < 0.01, (error, row["setup"])


def test_bert_likes_drop_on_hidden_dropout_prob():
    """modeling_bert.py: BertSelfOutput and BertOutput drop their dense output, BertEmbeddings its sum;
    modeling_distilbert.py: the FFN drops lin2's output, the embeddings theirs (the attention's out_lin none)."""
    bert, g = snapshot_model("google-bert/bert-base-uncased")
    assert layer_dropouts(bert, g.spec.blocks[0]) == (2, 0) and embed_dropouts(bert) == 1
    distil, g = snapshot_model("distilbert/distilbert-base-uncased")
    assert layer_dropouts(distil, g.spec.blocks[0]) == (1, 0) and embed_dropouts(distil) == 1


@pytest.mark.parametrize("cpu, kept", [(False, 4 + 1 + 2), (True, 2 + 2 + 2)])
def test_bert_eager_softmax_names_no_dtype(cpu, kept):
    """softmax(scores) with no dtype: CUDA autocast runs it in fp32 (kept by its backward), the dropout keeps a
    bool mask, the AV matmul a bf16 cast; CPU autocast leaves the softmax in bf16 and its mask in bf16."""
    bert, _ = snapshot_model("google-bert/bert-base-uncased")
    assert bert.model_type in AUTOCAST_SOFTMAX
    assert score_bytes(bert, 2, regime("lora", "amp", cpu=cpu)) == kept


def test_simulated_bert_steps_are_priced():
    """Ten CPU-simulated steps of bert-base-uncased and distilbert-base-uncased as masked LMs (full, LoRA,
    checkpointed LoRA, batch 4, eager LoRA): each within 1.5%. Before their dropouts and softmax were priced, LoRA
    read -1.1% to -1.9% and eager LoRA +6.4% to +8.4%."""
    models = ("google-bert/bert-base-uncased", "distilbert/distilbert-base-uncased")
    rows = [r for r in measured_rows("cpu-sim-extra") if r["model"] in models]
    assert len(rows) == 10
    for error, row in priced_errors(rows):
        assert abs(error) < 0.015, (error, row["model"], row["setup"])


def test_a_classifier_shares_its_embeddings_with_nothing():
    """XLMRobertaForSequenceClassification (bge-reranker) has no LM head: tie_word_embeddings ties nothing, so a full
    fine-tune has no tied-embedding gradient moment (two vocab x hidden gradients and their sum), which had priced
    4-layer bge-reranker-large 13% over. Five CPU-simulated steps of the two rerankers, built with their own class
    (one label per sequence), read within 2%."""
    arch, g = snapshot_model("BAAI/bge-reranker-large")
    assert arch.tie and not g.spec.tied
    mlm, g_mlm = snapshot_model("google-bert/bert-base-uncased")
    assert g_mlm.spec.tied  # BertForMaskedLM's decoder is the word embedding
    rows = [r for r in measured_rows("cpu-sim-extra") if r["model"].startswith("BAAI/bge-reranker")]
    assert len(rows) == 5
    for error, row in priced_errors(rows):
        assert abs(error) < 0.02, (error, row["model"], row["setup"])
