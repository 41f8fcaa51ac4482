"""Build the model a Setup asks for from a config dict: random weights, the right dtypes, LoRA, the optimizer."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import torch

from ..errors import MeasureError
from .setup import Setup


def dtypes(setup: Setup) -> tuple[torch.dtype, torch.dtype, bool]:
    """(dtype of the built weights, dtype of trainable adapters, autocast on) for a Setup.

    full: amp = fp32 weights under bf16 autocast (HF Trainer --bf16); bf16 = everything bf16; fp32.
    lora/qlora: the base is bf16 (qlora: nf4) unless fp32 (the precision, or Setup.weights fp32); adapters are fp32
    under amp (peft's autocast_adapter_dtype, the default) and bf16 under pure bf16.
    inference: bf16 or fp32 weights; amp = fp32 weights under bf16 autocast.
    """
    amp = setup.precision == "amp"
    if setup.precision == "fp32":
        return torch.float32, torch.float32, False
    if setup.method in ("lora", "qlora"):
        base = torch.float32 if setup.weights == "fp32" else torch.bfloat16  # a base loaded in fp32 (the default
        # dtype of from_pretrained before transformers 5)
        if setup.adapter_dtype:  # asked: fp32 = peft's autocast_adapter_dtype=True, bf16 = the base's dtype
            return base, {"fp32": torch.float32, "bf16": torch.bfloat16}[setup.adapter_dtype], amp
        return base, torch.float32 if amp or base == torch.float32 else torch.bfloat16, amp
    return (torch.float32 if amp else torch.bfloat16), torch.float32, amp


def hf_config(config: Mapping[str, Any], attention: str):
    """transformers' config object for a config.json dict; refuses custom code (nothing is downloaded)."""
    from transformers import CONFIG_MAPPING, AutoConfig

    cfg = dict(config)
    model_type = cfg.pop("model_type", None)
    if not isinstance(model_type, str):
        raise MeasureError("config.json has no model_type", key="model_type", value=None)
    if model_type not in CONFIG_MAPPING:
        raise MeasureError("transformers has no such model_type; custom code (auto_map) is never run",
                           key="model_type", value=model_type)
    cfg.pop("auto_map", None)  # a known model_type is built with transformers' own class, as the estimator reads it
    cfg.pop("quantization_config", None)  # weights are random bf16/fp32: a checkpoint's quantisation does not apply
    try:
        hf = AutoConfig.for_model(model_type, **cfg)
    except (ValueError, KeyError) as exc:
        raise MeasureError(f"transformers cannot build this model_type: {exc}", key="model_type",
                           value=model_type) from None
    hf._attn_implementation = attention
    if getattr(hf, "text_config", None) is not None:
        hf.text_config._attn_implementation = attention
    return hf


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


# The class the harness builds per model kind (model_kind), and what its error messages call it.
KIND_WORDS = {"seq2seq": ("seq2seq-LM", "an encoder-decoder"), "masked": ("masked-LM", "a masked LM"),
              "classifier": ("classifier", "a sequence classifier"), "causal": ("causal-LM", "a causal LM"),
              "embedding": ("bare encoder", "an embedding model"),
              "vision": ("image-text-to-text", "a vision-language model")}


def model_kind(hf) -> str:
    """What transformers config `hf` is trained as: "seq2seq" (is_encoder_decoder: T5, BART...), "masked" or
    "classifier" (its architectures end in ForMaskedLM or ForSequenceClassification), "embedding" (a bare encoder:
    BertModel, XLMRobertaModel, as embedding models ship, of a type that has a masked-LM class), "vision" (a
    vision-language checkpoint, its architectures a ForConditionalGeneration of an image-text-to-text class: built
    whole, towers included, where the causal-LM mapping may name its text model alone), else "causal"."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    if getattr(hf, "is_encoder_decoder", False):
        return "seq2seq"
    archs = getattr(hf, "architectures", None) or [""]
    head = archs[0] if isinstance(archs[0], str) else ""
    if head.endswith(("Model", "Encoder")) and not head.endswith("LMHeadModel") \
            and getattr(hf, "model_type", "") in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "embedding"
    if head.endswith("ForConditionalGeneration") and getattr(hf, "vision_config", None) is not None \
            and MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(getattr(hf, "model_type", "")) == head:
        return "vision"
    return "masked" if head.endswith("ForMaskedLM") else "classifier" if head.endswith("ForSequenceClassification") \
        else "causal"


def causal_only_as_multimodal(model_type: str) -> bool:
    """transformers 5.24 registers some causal LMs in the image-text-to-text mapping alone (modeling_auto.py:
    mistral4 -> Mistral4ForCausalLM, with no AutoModelForCausalLM entry), so the harness builds them through it."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    return model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES \
        and MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(model_type, "").endswith("ForCausalLM")


def build_on_meta(config: Mapping[str, Any], setup: Setup, with_lora: bool = True):
    """The model on the meta device (no memory), LoRA applied where asked. Move it with `materialise`. An
    encoder-decoder is built with its seq2seq LM class, whose training step (workload: labels = the input ids) runs
    the decoder over as many tokens as the encoder; a masked LM with its masked-LM class, every token a label; a
    sequence classifier with its own class, one label per sequence; an embedding model as its bare encoder, trained
    on a contrastive loss (run.embedding_loss); a vision-language model whole, fed text (model_kind). None of them
    but a causal LM generates."""
    from transformers import (
        AutoModel,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
        AutoModelForMaskedLM,
        AutoModelForSeq2SeqLM,
        AutoModelForSequenceClassification,
    )

    weight_dtype, adapter_dtype, amp = dtypes(setup)
    hf = hf_config(config, setup.attention)
    kind = model_kind(hf)
    if kind not in ("causal", "vision") and setup.method == "inference":
        raise MeasureError(f"{KIND_WORDS[kind][1]}'s generate is not simulated (the harness prefills a decoder "
                           "alone)", key="--method", value=setup.method)
    auto = {"seq2seq": AutoModelForSeq2SeqLM, "masked": AutoModelForMaskedLM, "embedding": AutoModel,
            "classifier": AutoModelForSequenceClassification, "causal": AutoModelForCausalLM,
            "vision": AutoModelForImageTextToText}[kind]
    if kind == "causal" and causal_only_as_multimodal(str(config.get("model_type"))):
        auto = AutoModelForImageTextToText
    # The default dtype is set before building: .to(bfloat16) on fake tensors fails ("Couldn't swap").
    with default_dtype(weight_dtype), torch.device("meta"):
        try:
            model = auto.from_config(hf, dtype=weight_dtype)  # not config.json's torch_dtype
        except ValueError as exc:
            raise MeasureError(f"no {KIND_WORDS[kind][0]} class for this config: {exc}", key="model_type",
                                   value=config.get("model_type")) from None
    if with_lora and setup.method in ("lora", "qlora"):
        model = apply_lora(model, setup, adapter_dtype)
    return model


def apply_lora(model, setup: Setup, adapter_dtype: torch.dtype, device: str = "meta"):
    """peft LoRA (r, alpha 2r, the Setup's targets and dropout); adapters land on the base weights' device."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise MeasureError("LoRA needs peft: pip install -e '.[measure]' in the repository", key="--method",
                           value=setup.method) from None
    targets: Any = "all-linear" if setup.lora_targets == "all-linear" else [t.strip() for t in setup.lora_targets.split(",")]
    # peft's task types wrap a seq2seq or causal LM; a masked LM or a classifier takes the plain PeftModel
    task = {"seq2seq": "SEQ_2_SEQ_LM", "causal": "CAUSAL_LM", "vision": "CAUSAL_LM"}.get(model_kind(model.config))
    cfg = LoraConfig(r=setup.lora_rank, lora_alpha=2 * setup.lora_rank, lora_dropout=setup.lora_dropout,
                     target_modules=targets, task_type=task)
    # Adapters are made in the default dtype, then peft casts them to fp32 when autocast_adapter_dtype.
    with default_dtype(adapter_dtype), torch.device(device):
        try:
            return get_peft_model(model, cfg, autocast_adapter_dtype=adapter_dtype == torch.float32)
        except ValueError as exc:
            raise MeasureError(f"peft cannot adapt this model: {exc}", key="--lora-targets",
                               value=setup.lora_targets) from None


def materialise(model, device: str, values: bool = False):
    """meta → device with uninitialised storage; re-tie tied weights (to_empty unties them). `values`: real memory
    (CUDA, or real CPU tensors), whose weights are given values."""
    model = model.to_empty(device=device)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    base.tie_weights()
    if device == "cuda" or values:  # real memory: give the weights values, so that no kernel meets NaN/denormal garbage
        with torch.no_grad():
            for p in model.parameters():
                if p.dtype.is_floating_point:
                    p.normal_(0.0, 0.02)
            for b in model.buffers():
                if b.dtype.is_floating_point:
                    b.zero_()
    return model


def _bnb():
    try:
        import bitsandbytes as bnb
    except ImportError:
        raise MeasureError("needs bitsandbytes: pip install -e '.[measure]' in the repository", key="--method",
                           value="qlora") from None
    return bnb


def _linears(model):
    """(parent, name, module) for every module transformers' bnb quantiser converts but the head: a module whose
    type is nn.Linear (not a subclass: Falcon's FalconLinear stays, FINDINGS.md F60) or a Conv1D, GPT-2's
    (integrations/bitsandbytes.py replace_with_bnb_linear, transformers 5.24; the output embedding stays
    unquantised, get_keys_to_not_convert)."""
    from transformers.pytorch_utils import Conv1D

    return [(module, name, child) for module in list(model.modules()) for name, child in list(module.named_children())
            if (type(child) is torch.nn.Linear or isinstance(child, Conv1D)) and name != "lm_head"]


def _in_out(child) -> tuple[int, int]:
    """(in, out) features of a Linear, or of a Conv1D, whose weight is stored transposed ([in, out])."""
    if isinstance(child, torch.nn.Linear):
        return child.in_features, child.out_features
    n_in, n_out = child.weight.shape
    return n_in, n_out


def _linear4bit(bnb, child, double_quant: bool, device: str):
    """The nf4 Linear4bit (compute in bf16, blocks of 64) standing for `child`, its bias carried over."""
    n_in, n_out = _in_out(child)
    q = bnb.nn.Linear4bit(n_in, n_out, bias=child.bias is not None,
                          compute_dtype=torch.bfloat16, quant_type="nf4", compress_statistics=double_quant,
                          device=device)
    if child.bias is not None:
        q.bias = child.bias
    return q


def quantise_nf4(model, double_quant: bool = False) -> int:
    """QLoRA base on CUDA: every Linear but the head becomes a bitsandbytes nf4 Linear4bit in place (quantised on
    its move to the GPU, blocks of 64, absmax quantised again in blocks of 256 with double quantisation), before
    peft wraps it, as from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True, ...)) leaves it."""
    bnb = _bnb()
    linears = _linears(model)
    for module, name, child in linears:
        q = _linear4bit(bnb, child, double_quant, "cpu")
        weight = child.weight.data if isinstance(child, torch.nn.Linear) else child.weight.data.t().contiguous()
        q.weight = bnb.nn.Params4bit(weight.to("cpu"), requires_grad=False, quant_type="nf4",
                                     compress_statistics=double_quant)
        setattr(module, name, q.to("cuda"))
    model.is_loaded_in_4bit = True  # as transformers' bnb quantiser marks it: peft's dispatch picks its 4-bit layer
    return len(linears)


def meta_linear4bit(model, double_quant: bool = False) -> int:
    """The QLoRA base for the CPU simulation, first step, on the meta device: every Linear but the head becomes a
    Linear4bit, so that peft's dispatch (peft/tuners/lora/bnb.py dispatch_bnb_4bit) wraps it in its 4-bit LoRA
    layer. Its Params4bit is then swapped for a plain meta weight of the same shape: Params4bit cannot wrap a
    FakeTensor, and `fake_pack_nf4` packs it after `materialise`."""
    bnb = _bnb()
    linears = _linears(model)
    for module, name, child in linears:
        q = _linear4bit(bnb, child, double_quant, "meta")
        q.support_avx512bf16_for_cpu = False  # an eval forward would repack the weight for the CPU kernel
        setattr(module, name, q)
    model.is_loaded_in_4bit = True  # as transformers' bnb quantiser (quantizer_bnb_4bit.py) marks it: peft's
    # dispatch (peft/tuners/lora/bnb.py dispatch_bnb_4bit) wraps a Linear4bit in its 4-bit layer only so
    return len(linears)


def unwrap_params4bit(model) -> None:
    """Each Linear4bit's meta Params4bit → a plain frozen meta Parameter (after peft has read its quant_type and
    compress_statistics), so that `materialise` can make it a fake tensor."""
    bnb = _bnb()
    for m in model.modules():
        if isinstance(m, bnb.nn.Linear4bit) and isinstance(m.weight, bnb.nn.Params4bit):
            m.weight = torch.nn.Parameter(torch.empty(m.out_features, m.in_features, dtype=torch.bfloat16,
                                                      device="meta"), requires_grad=False)


def fake_pack_nf4(model, double_quant: bool = False) -> list[torch.Tensor]:
    """Second step, under FakeTensorMode: each Linear4bit's weight goes through bitsandbytes' own quantize_4bit
    (its registered fake kernel makes the packed uint8 weight and the absmax a real one would: blocks of 64; with
    double quantisation the absmax again in blocks of 256) and becomes a frozen Parameter carrying what
    Linear4bit.forward reads (quant_state). Returns the QuantState tensors (absmax and code; nested: the fp32
    absmax of the uint8 absmax, its code and offset), which are no module's parameters: the tracker is given them."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    bnb = _bnb()
    functional = bnb.functional
    with unset_fake_temporarily():  # the 8-bit code book is built from Python floats (.tolist): make it real
        functional.name2qmap.setdefault("dynamic", functional.create_dynamic_map())
    states: list[torch.Tensor] = []
    for m in model.modules():
        if not isinstance(m, bnb.nn.Linear4bit):
            continue
        packed, state = functional.quantize_4bit(m.weight.data, blocksize=64, compress_statistics=double_quant,
                                                 quant_type="nf4", quant_storage=torch.uint8)
        m.weight = torch.nn.Parameter(packed, requires_grad=False)
        m.weight.quant_state, m.weight.quant_type = state, "nf4"
        m.weight.compress_statistics, m.weight.bnb_quantized = double_quant, True
        states += [state.absmax, state.code] + ([state.offset, state.state2.absmax, state.state2.code]
                                                if state.nested else [])
    return states


def kbit_prepare(model) -> None:
    """peft's prepare_model_for_kbit_training as called by default (use_gradient_checkpointing=True), less the
    checkpointing itself, which the workload enables (non-reentrant) when the Setup asks: every fp16/bf16 parameter
    that is not 4-bit storage (Params4bit) is upcast to fp32 in place, and enable_input_require_grads makes the
    embedding's output require grad (peft/utils/other.py)."""
    from peft import prepare_model_for_kbit_training

    prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    model.enable_input_require_grads()


def make_optimizer(model, setup: Setup):
    params = [p for p in model.parameters() if p.requires_grad]
    if setup.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.0)  # plain SGD: no state
    if setup.optimizer == "adamw8bit":
        try:
            import bitsandbytes as bnb
        except ImportError:
            raise MeasureError("needs bitsandbytes (and a CUDA device)", key="--optimizer",
                               value="adamw8bit") from None
        return bnb.optim.AdamW8bit(params, lr=1e-4)
    impl = {"foreach": {"foreach": True}, "forloop": {"foreach": False}, "fused": {"fused": True}}[setup.adamw_impl]
    return torch.optim.AdamW(params, lr=1e-4, **impl)  # type: ignore[arg-type]  # torch's stub types **kwargs by betas


def count_params(model) -> tuple[int, int]:
    seen: set[int] = set()
    total = trainable = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    return total, trainable
