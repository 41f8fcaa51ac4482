"""The names `--lora-targets` accepts are the names transformers gives the model's Linears: every name the estimator
lists for a model type is a Linear (or GPT-2's Conv1D) of a decoder layer of that model built on the meta device from
its class-default config (data/measurements/configs), so a LoRA target a run names is found where peft finds it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from generator.errors import JobError
from generator.estimator.graph.nodes import build_graph
from generator.estimator.memory.lora import target_roles
from generator.estimator.memory.target_names import PEFT_DEFAULT_TARGETS
from generator.estimator.normalise import normalise
from generator.measure.build import causal_only_as_multimodal, model_kind
from generator.measure.setup import shrink

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "measurements" / "configs"
# Model types whose layers the estimator lays out in roles of its own: their names are not transformers' modules
# (cpmant's project_q/k/v and w_0/w_1/w_out, xlnet's two-stream layer_1/layer_2, moshi's depth decoder, zaya's
# current/delayed values, axk2's and hy_v4's indexer attention, modernbert-decoder's Wi/Wo shared by attention and
# MLP); a target on them is checked by peft at run time, not here.
OWN_LAYOUT = {"cpmant", "xlnet", "moshi", "zaya", "axk2", "hy_v4", "modernbert-decoder"}
LAYER = re.compile(r"\.(layers|h|blocks|layer|block|albert_layers)\.\d+\.")  # T5's stacks: block


def _configs() -> list[Path]:
    return sorted(CONFIGS.glob("families/*.json")) + sorted(CONFIGS.glob("encoders/*.json")) + sorted(CONFIGS.glob("*.json"))


def _our_names(cfg: dict) -> set[str]:
    a = normalise(cfg, "m")
    with pytest.raises(JobError) as err:
        target_roles(a, build_graph(a), "__no_such_module__", "m")
    return set(str(err.value).split("its names: ")[1].rstrip(")").split(", ")) - {"mlp", "all-linear"}


@pytest.mark.parametrize("path", _configs(), ids=lambda p: p.stem)
def test_every_accepted_name_is_a_linear_of_the_model(path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from huggingface_hub.errors import StrictDataclassClassValidationError
    from transformers.pytorch_utils import Conv1D

    cfg = shrink(json.loads(path.read_text(encoding="utf-8")), 2)[0]
    if cfg.get("model_type") in OWN_LAYOUT:
        pytest.skip("the estimator's own roles")
    ours = _our_names(cfg)  # before transformers' config class reads (and normalises) the nested dicts in place
    try:
        config = transformers.AutoConfig.for_model(**json.loads(json.dumps(cfg)))
        # a vision-language checkpoint is built whole, as the harness builds it (measure/build.model_kind)
        auto = transformers.AutoModelForImageTextToText if model_kind(config) == "vision" \
            or causal_only_as_multimodal(config.model_type) else \
            transformers.AutoModelForMaskedLM if any("MaskedLM" in x for x in config.architectures or ()) else \
            transformers.AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else \
            transformers.AutoModelForCausalLM
        with torch.device("meta"):
            model = auto.from_config(config)
    except (ValueError, TypeError, KeyError, StrictDataclassClassValidationError) as exc:
        pytest.skip(f"transformers does not build this class-default config at 2 layers: {exc}")
    # a layer's Linears; in a vision-language model every Linear but the head (its towers' and projector's are
    # targets too: families/tower_linears.py)
    vision = model_kind(config) == "vision"
    linears = [name for name, module in model.named_modules() if isinstance(module, (torch.nn.Linear, Conv1D))
               and (LAYER.search(name) or vision and name != "lm_head")]
    # peft's match: a key is a module's whole name or its end after a dot (lora/model.py _check_target_module_exists)
    missing = sorted(n for n in ours if not any(name == n or name.endswith("." + n) for name in linears))
    assert not missing, (cfg["model_type"], missing, sorted({name.split(".")[-1] for name in linears}))


def test_the_renamed_families_take_their_modules_names():
    """Persimmon's query_key_value (it was read as qkv_proj, refused), CodeGen's fc_in/fc_out, MPT's Wqkv (peft's
    default target for mpt, refused before) and LFM2's w1/w2/w3."""
    for stem, names in (("persimmon", {"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"}),
                        ("codegen", {"out_proj", "fc_in", "fc_out"}), ("mpt", {"Wqkv", "out_proj"}),
                        ("lfm2", {"w1", "w2", "w3", "out_proj"})):
        cfg = shrink(json.loads((CONFIGS / "families" / f"{stem}.json").read_text(encoding="utf-8")), 2)[0]
        assert names <= _our_names(cfg), stem
    mpt = shrink(json.loads((CONFIGS / "families" / "mpt.json").read_text(encoding="utf-8")), 2)[0]
    a = normalise(mpt, "m")
    assert target_roles(a, build_graph(a), PEFT_DEFAULT_TARGETS["mpt"], "m") == frozenset({"qkv"})
