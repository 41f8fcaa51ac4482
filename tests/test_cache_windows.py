"""The KV cache's window per layer against transformers' own cache: DynamicCache windows a layer that the config's
layer_types (or, without them, its sliding_window) name sliding (cache_utils.get_layer_types_and_kwargs), and keeps
every token of the others, whatever their attention masks. Every class-default config the estimator reads, per
decoder layer: the estimator's cached window (Part.window) is transformers' cache window."""

from __future__ import annotations

import warnings

import pytest

transformers = pytest.importorskip("transformers")

from generator.estimator.config.transformers_defaults import CLASS_DEFAULTS  # noqa: E402
from generator.estimator.normalise import normalise  # noqa: E402

# Where they differ, and why (each left as it is, over-priced: the estimator caches every token, transformers
# keeps the window):
DIFFERENT = {
    "idefics": "its cross-attention layers' cache (the image states) has no window (-1 in the estimator)",
    "mllama": "its cross-attention layers' cache (the image states) has no window (-1 in the estimator)",
    "mllama_text_model": "its cross-attention layers' cache (the image states) has no window (-1 in the estimator)",
    "moshi": "MoshiConfig.sliding_window (3,000) windows its cache; the estimator caps none",
    "moshi_depth": "its depth decoder's sliding_window (8) windows its cache; the estimator caps none",
    "blt_patcher": "BltPatcherConfig.sliding_window (512) windows its cache; the estimator caps none",
    "voxtral_realtime_encoder": "its streaming encoder's sliding_window (750) windows its cache; the estimator "
                                "caps none",
}


def _windows(model_type: str) -> tuple[list[int | None], list[int | None]] | None:
    from transformers import CONFIG_MAPPING
    from transformers.cache_utils import get_layer_types_and_kwargs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            config = CONFIG_MAPPING[model_type]()
            decoder = config.get_text_config(decoder=True)
            kwargs = get_layer_types_and_kwargs(decoder)[1]
            arch = normalise(config.to_dict(), model_type)
        except Exception:  # noqa: BLE001 - a class default that transformers or the estimator refuses: elsewhere
            return None
    ours = [max((w for w, _ in b.kv), default=None) for b in arch.spec.blocks if b.stack != "encoder"]
    theirs = [k.get("sliding_window") for k in kwargs]
    return ours, theirs


def test_the_cache_keeps_what_transformers_cache_keeps() -> None:
    differ = {}
    compared = 0
    for model_type in sorted(CLASS_DEFAULTS):
        pair = _windows(model_type)
        if pair is None:
            continue
        ours, theirs = pair
        compared += 1
        bad = [(i, w, t) for i, (w, t) in enumerate(zip(ours, theirs, strict=False))
               if w is not None and (w or None) != (t or None)]
        if bad:
            differ[model_type] = bad[:3]
    assert compared > 300
    assert set(differ) == set(DIFFERENT), {k: v for k, v in differ.items() if k not in DIFFERENT}


def test_gpt_neo_caches_every_token_of_its_local_layers() -> None:
    """GPTNeoConfig names window_size, not sliding_window, and no layer_types: transformers' cache keeps every token
    of its "local" layers, which mask the rest (modeling_gpt_neo.GPTNeoSelfAttention). The estimator did cap them at
    the window, so HF generate's cache read too little (cpu-sim-extra.jsonl's gpt_neo generate rows, FINDINGS.md
    F105)."""
    ours, theirs = _windows("gpt_neo")
    assert set(ours) == {0} and set(theirs) == {None}
    arch = normalise(transformers.CONFIG_MAPPING["gpt_neo"]().to_dict(), "gpt_neo")
    assert set(arch.layer_windows) == {0, 256}  # the local layers still attend to the window (the page says so)
