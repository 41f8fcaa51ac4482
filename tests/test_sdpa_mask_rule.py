"""When transformers 5.24 hands SDPA a mask tensor in a training step, and the CPU simulation's agreement with it."""

from __future__ import annotations

from unittest import mock

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from transformers import MistralConfig, masking_utils  # noqa: E402

from generator.measure import run  # noqa: E402

WINDOW = 64


def _masks(tokens: int, batch: int = 2) -> tuple:
    """(create_causal_mask, create_sliding_window_causal_mask) for a training forward without a cache and without
    a 2D attention mask (the harness's model(input_ids, labels) under gradient checkpointing)."""
    config = MistralConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
                           vocab_size=64, sliding_window=WINDOW)
    config._attn_implementation = "sdpa"
    embeds = torch.zeros(batch, tokens, 32)
    positions = torch.arange(tokens).unsqueeze(0)
    kwargs = dict(config=config, inputs_embeds=embeds, attention_mask=None, cache=None, position_ids=positions)
    return (masking_utils.create_causal_mask(**kwargs),
            masking_utils.create_sliding_window_causal_mask(**kwargs))


def test_a_real_step_passes_no_mask_under_the_window_and_a_full_one_from_it():
    # masking_utils._ignore_causal_mask_sdpa: no padding and q_length == kv_length -> None (SDPA's is_causal),
    # unless `local_attention_size is not None and kv_length >= local_attention_size` (sliding layers only:
    # create_causal_mask passes no local_size). The estimator's masked_sdpa_terms charges exactly from the window on.
    full, sliding = _masks(WINDOW - 1)
    assert full is None and sliding is None
    full, sliding = _masks(WINDOW)
    assert full is None and tuple(sliding.shape) == (2, 1, WINDOW, WINDOW) and sliding.dtype == torch.bool


def test_fake_tensors_took_unpacked_position_ids_for_packed_ones_and_the_harness_answers_for_them():
    # find_packed_sequence_indices returns its tensor when is_tracing() (True on a FakeTensor) stops it reading the
    # values: the simulation then built the mask for every layer type at any length (FINDINGS.md F13).
    with FakeTensorMode(allow_non_fake_inputs=True):
        full, sliding = _masks(WINDOW // 2)
    assert tuple(full.shape) == tuple(sliding.shape) == (2, 1, WINDOW // 2, WINDOW // 2)
    with FakeTensorMode(allow_non_fake_inputs=True), mock.patch.object(
            masking_utils, "find_packed_sequence_indices", run._unpacked):
        full, sliding = _masks(WINDOW // 2)
    assert full is None and sliding is None
