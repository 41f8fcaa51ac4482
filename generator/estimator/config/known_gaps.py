"""Every model_type whose estimate is not exact, with the reason (a pure data module).

KNOWN_GAPS: the parameter count does not follow transformers (no builder yet, or a tower not counted),
or transformers itself cannot build the class's default config, so no oracle exists. The oracle tests
(tests/test_oracle_causal.py, tests/test_oracle_groups.py) fail when a listed model_type starts
matching transformers or an unlisted one fails. APPROXIMATE: the count is exact, but memory or
compute is modelled approximately. The page says "approximate: <reason>" for both (Report
`model.approximate_reason`, set in registry.finish).
"""

from __future__ import annotations

NO_BUILDER = "no layer builder yet"


KNOWN_GAPS: dict[str, str] = {
    # transformers 5.24 cannot build the class's own default config (no oracle)
    "gemma3n": "transformers needs PIL for its TimmWrapper vision tower (not installed); only the text tower is "
               "counted (its vision and audio towers and their embedders are not)",
    "musicgen": "AutoModelForCausalLM cannot build the composite config (MusicgenForCausalLM takes its decoder config)",
    "musicgen_melody": "AutoModelForCausalLM cannot build the composite config (the decoder config is nested)",
    "qwen4_exp": "transformers cannot build its default config (token_budget and compress_ratio are None)",
    "qwen4_exp_text": "transformers cannot build its default config (token_budget and compress_ratio are None)",
    # layers this estimator does not reconstruct yet
    # custom code without a transformers class
    "nemotron-nas": "DeciLM's heterogeneous block_configs (per-layer attention and FFN widths, no-op layers) are "
                    "not modelled: " + NO_BUILDER,
}


APPROXIMATE: dict[str, str] = {
    "blt": "the global transformer runs once per patch of bytes (about patch_size), yet its compute, activations "
           "and KV cache count it once per byte",
    "hrm_text": "the serving speed reads each stack's weights once per token, where every pass of the H/L "
                "recurrence (H_cycles x (L_cycles + 1) stack passes) reads them again",
    "dory": "the recurrent section runs n_recurrent_loops times (and keeps a K/V copy per loop); compute, "
            "activations and the KV cache count one pass",
    "deepseek_v4": "its KV cache holds a sliding window plus compressed entries (1 per compress rate) and the "
                   "indexer's keys: served as a single K=V head per token",
    "inkling_text": "its four short convolutions per layer keep a state of conv_kernel_size - 1 tokens beside the K/V "
                    "cache; serving memory counts the K/V cache only",
    "reformer": "reversible layers recompute their activations in backward, and LSH/local attention works in chunks: "
                "activations and the cache are those of a standard decoder",
    "zaya": "CCA keeps a convolution state of the last cca_time0 + cca_time1 - 2 tokens per layer beside its K/V "
            "cache; serving memory counts the K/V cache only",
    "funnel": "the encoder pools the sequence (halving it) between blocks; activations count every layer at the "
              "full length",
    "perceiver": "the latent layers run over num_latents latents, not the input tokens; activations and compute "
                 "count them per input token",
    "gemma4_assistant": "an MTP drafter: it reads the target model's K/V cache and hidden states, whose memory is "
                        "not counted here",
    "gemma4_unified_assistant": "an MTP drafter: it reads the target model's K/V cache and hidden states, whose "
                                "memory is not counted here",
}
