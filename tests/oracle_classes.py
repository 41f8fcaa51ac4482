"""The oracle over every class a config can name: each language-model class transformers ships, built on the meta device.

The universe is every (model_type, class) pair of transformers' auto mappings for language models: causal LMs,
masked LMs, sequence-to-sequence LMs, image-text-to-text models and the bare encoders/decoders (AutoModel) of those
model_types. Each pair is built in four forms:
- `defaults`: the config class's defaults, `architectures` naming the class;
- `sparse`: its `to_diff_dict()`, as many Hub files are written;
- `shrunk`: two layers, a narrow width (64, heads 4, K/V heads 2, head_dim 16 where the class has one), a small
  vocabulary and few experts: what a test fixture or a distilled checkpoint looks like, and what shows a key the
  class default hides;
- `flipped`: the shrunk form with the embedding tie flipped.
transformers builds the named class under torch.device("meta") and counts its parameters (tied tensors once); the
estimator counts the same config. A form transformers itself refuses is no case.
"""

from __future__ import annotations

import copy
import functools
import warnings
from typing import Any

from generator.errors import TraceError
from tests.test_oracle_support import REPAIRS, config_object, meta_params, our_count

# Auto mappings of language models: (mapping name in transformers.models.auto.modeling_auto, what it builds).
MAPPINGS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
            "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES")
FORMS = ("defaults", "sparse", "shrunk", "flipped")

# Shrinking: each key present in a config takes this value (layers, widths, heads, vocabulary, experts).
SHRINK = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers", "encoder_layers",
                     "num_decoder_layers"), 2),
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "dim", "word_embed_proj_dim"), 64),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "d_ff", "n_inner", "encoder_ffn_dim", "decoder_ffn_dim",
                     "dim_ff", "hidden_dim"), 128),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_heads", "encoder_attention_heads",
                     "decoder_attention_heads", "n_heads"), 4),
    **dict.fromkeys(("num_key_value_heads", "num_kv_heads", "n_kv_heads"), 2),
    "head_dim": 16, "vocab_size": 1024, "max_position_embeddings": 512,
    **dict.fromkeys(("moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size"), 32),
    **dict.fromkeys(("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"), 4),
    **dict.fromkeys(("num_experts_per_tok", "moe_topk", "top_k"), 2),
}
NESTED = ("text_config", "vision_config", "encoder", "decoder")


def pairs() -> list[tuple[str, str, str]]:
    """(mapping, model_type, class name) of every language-model class a config can name."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto import modeling_auto

    out = []
    for name in MAPPINGS:
        for model_type, cls in sorted(getattr(modeling_auto, name).items()):
            if model_type in CONFIG_MAPPING and isinstance(cls, str):
                out.append((name, model_type, cls))
    return out


def _shrink(d: dict[str, Any]) -> dict[str, Any]:
    out = dict(d)
    for key, value in SHRINK.items():
        if isinstance(out.get(key), int) and not isinstance(out.get(key), bool):
            out[key] = value
    for key, value in d.items():  # token ids inside the smaller vocabulary (an embedding's padding_idx must be)
        if key.endswith("_token_id") and isinstance(value, int) and not isinstance(value, bool) and value >= 1024:
            out[key] = 1
    for key in ("layer_types", "mlp_layer_types"):  # per-layer lists follow the new layer count
        if isinstance(out.get(key), list) and out[key]:
            out[key] = out[key][:2]
    for key in NESTED:
        if isinstance(out.get(key), dict):
            out[key] = _shrink(out[key])
    return out


def config_form(model_type: str, cls: str, form: str) -> dict[str, Any] | None:
    """The config dict of one form, or None where transformers refuses it."""
    from transformers import CONFIG_MAPPING

    repair = REPAIRS.get(model_type, {})
    try:
        base = CONFIG_MAPPING[model_type](**copy.deepcopy(repair))
        if form == "sparse":
            cfg = {"model_type": model_type, **base.to_diff_dict(), **repair}
        else:
            cfg = {**base.to_dict(), **repair}
        if form in ("shrunk", "flipped"):
            cfg = _shrink(cfg)
            if form == "flipped":
                cfg["tie_word_embeddings"] = not bool(getattr(base, "tie_word_embeddings", True))
            kwargs = {k: v for k, v in cfg.items() if k not in ("model_type", "transformers_version")}
            cfg = {**CONFIG_MAPPING[model_type](**kwargs).to_dict(), "model_type": model_type}
    except Exception:  # noqa: BLE001 - transformers itself refuses this form
        return None
    cfg["architectures"] = [cls]
    return cfg


def meta_count(cfg: dict[str, Any], cls: str) -> int:
    """Parameters of `cls` built from `cfg` on the meta device, shared tensors once."""
    import transformers

    config = config_object(cfg)
    return meta_params(lambda: getattr(transformers, cls)(config))


@functools.lru_cache(maxsize=None)
def outcome(model_type: str, cls: str, form: str) -> tuple[str, str]:
    """("exact" | "mismatch" | "refused" | "no-oracle", detail) for one class in one form."""
    import transformers

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    cfg = config_form(model_type, cls, form)
    if cfg is None:
        return "no-oracle", "transformers refuses this form"
    try:
        meta = meta_count(cfg, cls)
    except Exception as exc:  # noqa: BLE001 - transformers cannot build it: no case
        return "no-oracle", f"{type(exc).__name__}: {str(exc)[:100]}"
    try:
        ours = our_count(cfg, f"{model_type}:{cls}:{form}")
    except TraceError as exc:
        return "refused", str(exc)[:160]
    if ours == meta:
        return "exact", f"{ours:,}"
    return "mismatch", f"ours {ours:,} vs transformers {meta:,} ({(ours - meta) / meta:+.1%})"
