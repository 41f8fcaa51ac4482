"""LoRA on a vision-language model's towers: the adapters peft puts on the vision tower's and projector's Linears,
their parameters, and what they save per image.

peft's "all-linear" wraps every nn.Linear of the model but the output embedding (peft/tuners/tuners_utils.py
_maybe_include_all_linear_layers), so a VLM's tower and projector are adapted beside its text layers, and a target
name adapts the tower's Linears of that name too (peft matches a module by its name's last component). The
Linears are Spec.tower_linears (families/tower_linears.py). peft makes the adapters whether or not a step feeds an
image; a text-only step leaves their gradients None, so AdamW keeps no state for them (torch/optim/adamw.py skips a
parameter whose .grad is None).
"""

from __future__ import annotations

from ..config.arch import Arch
from ..graph.nodes import LAYER_ROLES, PROJECTOR_ROLE
from ..graph.parts import Spec
from .activations import Regime, adapter_input_bytes, mask_bytes
from .lora import ROLE_GROUP, unpaged_elements
from .target_names import PEFT_DEFAULT, PEFT_DEFAULT_TARGETS

TowerLinears = tuple[tuple[int, int, int, str, str, int, bool], ...]

# Wrappers whose tower holds each Linear inside a module named as the text model's Linears are (modeling_gemma4
# Gemma4ClippableLinear: q_proj ... down_proj, its nn.Linear named `linear`). peft matches a target name to that
# module and refuses it ("Target module Gemma4ClippableLinear(...) is not supported", peft 0.21), unless the tower is
# kept out of the targets (tower_adapters False: LLaMA-Factory's and ms-swift's regexes over the language model).
WRAPPED_TOWER_NAMES = {"gemma4": frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                            "down_proj"})}

# Wrappers whose processor marks an image's tokens (token_type_ids) and whose text model then attends over them
# bidirectionally: modeling_gemma3.create_masks_for_vision_model ORs a block mask into the causal one, so a step with
# an image hands SDPA a mask in every text layer, as a padded batch does (FINDINGS.md F72, F74): Regime.padded.
IMAGE_MASKED = frozenset({"gemma3"})
# Gemma-4's do too where the text config asks for it (use_bidirectional_attention "vision": modeling_gemma4
# get_block_sequence_ids_for_mask from the processor's mm_token_type_ids).
BIDIRECTIONAL_KEY = {"gemma4": "use_bidirectional_attention"}
# Wrappers whose tower runs attention per image or window (cu_seqlens) and concatenates the outputs: proj reads the
# concatenation, a tensor of its own that SDPA did not save (modeling_qwen2_vl VisionAttention, modeling_qwen2_5_vl,
# modeling_qwen3_vl, modeling_qwen3_5: torch.cat(attn_outputs)), so it is among what a frozen tower does not keep.
SPLIT_ATTENTION = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"})
# Wrappers whose tower's norms keep, where their weight trains, a normalised copy for its gradient, which a frozen one
# does not: its widths per patch and layer, in bf16 hidden widths (FINDINGS.md F76). Qwen2.5-VL's two Qwen2RMSNorms
# and Pixtral's two PixtralRMSNorms (weight * x.to(bf16): a bf16 copy each); Gemma-4's four Gemma4RMSNorms (an fp32
# copy each, 8) and q's and k's (4).
NORM_COPIES = {"qwen2_5_vl": 2, "gemma4": 12, **dict.fromkeys(("mistral3", "lighton_ocr", "mistral_large4"), 2)}
# Wrappers whose tower's encoder hands SDPA a [patches x patches] mask of the image's padding patches
# (modeling_gemma4.Gemma4VisionEncoder: create_bidirectional_mask), which SDPA turns into one in the compute dtype in
# every layer (aten scaled_dot_product_attention's convert_boolean_attn_mask) and keeps for the backward
# (FINDINGS.md F76). Gemma4ImageProcessor pads an image to its max_patches unless its grid fills them exactly; the
# simulation, whose image fills them, keeps the mask too (transformers' is_tracing is True on a FakeTensor).
MASKED_TOWERS = frozenset({"gemma4"})
# Wrappers whose tower runs every image of a step as one sequence under a block-diagonal mask in the compute dtype
# (modeling_pixtral.PixtralTransformer: generate_block_attention_mask over all the step's patches), built once and
# kept through the backward by SDPA in every layer, or by a checkpointed layer's inputs: (images x rows)^2 for a
# step's images, each of them its share, images x rows^2 (FINDINGS.md F76, F77).
SHARED_MASK_TOWERS = frozenset({"mistral3", "lighton_ocr", "mistral_large4"})


# A tower layer's first Linear, one per layer (q, or a fused qkv): the Linears that mark a layer and its rows
FIRST_ROLES = ("q", "qkv")


def tower_rows(spec: Spec) -> int:
    """The rows (patches) a tower's live layers read per image; 0 where its Linears are not itemised."""
    return max((x[5] for x in spec.tower_linears or () if x[3] in FIRST_ROLES), default=0)


def step_mask_elements(spec: Spec, model_type: str, step_images: int) -> int:
    """A SHARED_MASK_TOWERS tower's block-diagonal mask over the images one call of it runs, elements: (images x
    rows)^2; 0 for any other tower."""
    return (step_images * tower_rows(spec)) ** 2 if model_type in SHARED_MASK_TOWERS else 0


def tower_on_path(adapted: TowerLinears, r: Regime) -> bool:
    """Whether the tower's layers are on the gradient's path: trained (a full fine-tune) or adapted."""
    return r.trained or any(x[3] != PROJECTOR_ROLE for x in adapted)


def pair_bytes(spec: Spec, adapted: TowerLinears, r: Regime, model_type: str, images: int) -> int:
    """A SHARED_MASK_TOWERS tower's one block-diagonal mask over a step's images, `images` per sample, kept through
    the backward where the tower is on the gradient's path, checkpointed or not: (images x rows)^2 in the compute
    dtype per block, a step of b samples holding b^2 blocks, each sample's own and one per ordered pair of distinct
    samples (stages.at_batch; job.py, profile.train_profile). 0 for any other tower, or a step without images."""
    if spec.tower_linears is None or not tower_on_path(adapted, r):
        return 0
    return r.compute_bytes * step_mask_elements(spec, model_type, images)


def image_regime(a: Arch, r: Regime, images: int) -> Regime:
    """The step's regime with an image's block mask where one is fed to an IMAGE_MASKED model, or to a
    BIDIRECTIONAL_KEY one whose text config sets the key to "vision"."""
    key = BIDIRECTIONAL_KEY.get(a.model_type)
    masked = a.model_type in IMAGE_MASKED or (key is not None and a.raw.get(key) == "vision")
    return r._replace(padded=True) if images and masked else r


def tower_adapted(spec: Spec, targets: str, model_type: str) -> TowerLinears:
    """The tower Linears `targets` adapts: every one under all-linear, else those whose module name is named (peft's
    own defaults for the model type under peft-default). A role LitGPT's or torchtune's own code reads ("q,v",
    "mlp") names no tower Linear: their model code builds no tower."""
    linears = spec.tower_linears or ()
    if targets == "all-linear":
        return linears
    if targets == PEFT_DEFAULT:
        targets = PEFT_DEFAULT_TARGETS.get(model_type, "")
    names = {t.strip() for t in targets.split(",")}
    return tuple(x for x in linears if x[4] in names)


def unadaptable_target(spec: Spec, targets: str, model_type: str) -> str | None:
    r"""The first name of `targets` peft would match to a tower module it cannot adapt (WRAPPED_TOWER_NAMES), for a
    model with towers; None where there is none. peft's own default names none: for gemma4 it is a pattern over the
    language model (peft/utils/constants.py, `.*language_model\..*\.(q_proj|v_proj)`)."""
    if not spec.tower_linears or targets in ("all-linear", PEFT_DEFAULT):
        return None
    wrapped = WRAPPED_TOWER_NAMES.get(model_type, frozenset())
    return next((name for name in (t.strip() for t in targets.split(",")) if name in wrapped), None)


def tower_lora_params(adapted: TowerLinears, rank: int) -> int:
    """A (rank x in) and B (out x rank) per adapted Linear, times its copies over the tower's layers."""
    return sum(rank * count * (i + o) for count, i, o, *_ in adapted)


def tower_unpaged_params(adapted: TowerLinears, rank: int) -> int:
    """Of tower_trained_params, those in tensors a paged optimizer leaves unpaged (lora.unpaged_elements)."""
    return sum(count * unpaged_elements(rank * i, rank * o) for count, i, o, _, _, rows, _ in adapted if rows)


def tower_adapter_bytes(adapted: TowerLinears, rank: int, r: Regime, split: bool = False) -> int:
    """Bytes the adapters save per image, as activations.adapter_activation_bytes prices a text layer's per token
    (peft/tuners/lora/layer.py Linear.forward), over the rows each Linear reads per image: with a cast to the
    adapters' dtype or LoRA dropout, a copy of the input per adapter (and the dropout's mask); else one input per
    group of Linears reading one tensor (q/k/v, gate/up), the attention output's left out where SDPA saved it (not
    where `split`: SPLIT_ATTENTION). lora_B saves lora_A's output, rank wide."""
    c, ab = r.compute_bytes, adapter_input_bytes(r)
    saved = c if r.amp else ab
    if ab != c or r.lora_dropout:
        per_input = saved + (mask_bytes(r, ab) if r.lora_dropout else 0)
        return sum(count * rows * (per_input * i + saved * rank) for count, i, _, _, _, rows, _ in adapted)
    groups = _distinct_inputs(adapted, split)  # one input per group, per layer count and rows
    return sum(count * rows * i for (_, count, rows), i in groups.items()) * saved \
        + sum(count * rows * saved * rank for count, _, _, _, _, rows, _ in adapted)


def image_bytes(spec: Spec, adapted: TowerLinears, rank: int, r: Regime, model_type: str) -> tuple[int, int]:
    """What one image's tower and projector keep for the backward (without checkpointing, with it), read off the CPU
    simulations of llava-1.5, gemma-3, Llama-3.2-Vision, Qwen2.5-VL and Qwen3.5 fed images (FINDINGS.md F73, F74,
    F76):
    - the tower's layers save their tensors (Spec.vision_act) where the tower is on the gradient's path: trained (a
      full fine-tune) or adapted, but for what only a weight's gradient reads when it is frozen (a frozen base Linear
      keeps no input, its adapter keeps a copy; a frozen norm of NORM_COPIES no normalised copy), and at 4 bytes
      after the kbit upcast for its stream and MLP activation
      (_upcast_elements); a frozen tower with no adapter saves nothing (its input, the pixels, needs no gradient),
      whatever its projector does; layers whose output reaches nothing (rows 0) save nothing;
    - checkpointed, the tower's layers are too where they are transformers' GradientCheckpointingLayer (all here but
      mllama's, Spec.tower_linears' last field): each keeps its input alone, rows x width in the residual stream's
      dtype;
    - the projector, never checkpointed, on the gradient's path keeps its activation's input (each Linear's input
      but the first's);
    - the adapters keep their inputs' copies (tower_adapter_bytes), a checkpointed tower layer's not;
    - a MASKED_TOWERS tower's layers keep SDPA's mask, rows^2 in the compute dtype each, a checkpointed one's not;
      a SHARED_MASK_TOWERS tower's one mask over the step's images is priced per sample and per pair of samples
      (pair_bytes), not per image;
    - on a GPU, a Spec.tower_layer_norm tower's two norms per layer keep their bf16 input cast to fp32: CUDA
      autocast runs layer_norm in fp32 (aten autocast_mode.h, its fp32 list; FINDINGS.md F8, F77), where the CPU's,
      on which the rates were counted, keeps the bf16 input (Regime.cpu); a trained tower's stream is fp32 already.
    A tower whose Linears are not itemised (Spec.tower_linears None) keeps Spec.vision_act, trained or not."""
    c, linears = r.compute_bytes, spec.tower_linears
    if linears is None:
        return c * spec.vision_act, c * spec.vision_act
    tower = tower_on_path(adapted, r)
    projector = [x for x in linears if x[3] == PROJECTOR_ROLE]
    on_path = tower or any(x[3] == PROJECTOR_ROLE for x in adapted)
    rb = r.residual_bytes  # the tower's stream and the projector's activation: fp32 after the kbit upcast
    kept = rb * sum(count * rows * i for count, i, _, _, _, rows, _ in projector[1:]) if on_path else 0
    inputs = rb * sum(count * rows * i for count, i, _, role, _, rows, _ in linears if role in FIRST_ROLES)
    split = model_type in SPLIT_ATTENTION
    unchecked = tower_adapter_bytes(tuple(x for x in adapted if x[3] not in LAYER_ROLES), rank, r, split)
    # the layers above the one the projector reads (rows 0: tower_linears.live_layers) keep nothing
    firsts = [(count, rows) for count, _, _, role, _, rows, _ in linears if role in FIRST_ROLES]
    live = sum(count for count, rows in firsts if rows) / max(1, sum(count for count, _ in firsts))
    # frozen, the tower's Linears keep no input (their adapters keep copies, priced apart): the distinct inputs of a
    # layer's Linears (q/k/v's, the MLP's first and second; the attention output SDPA keeps) come off vision_act
    inputs_by_group = _layer_inputs(linears, split)
    copies = NORM_COPIES.get(model_type, 0) * sum(count * rows * i for (group, count, rows), i
                                                  in inputs_by_group.items() if group == "attn_in")
    frozen = 0 if r.trained else c * (copies + sum(count * rows * i for (_, count, rows), i in inputs_by_group.items()))
    masks = c * sum(count * rows * rows for count, rows in firsts) if model_type in MASKED_TOWERS else 0
    plain = (int(c * spec.vision_act * live) - frozen + masks if tower else 0) + kept + tower_adapter_bytes(
        adapted, rank, r, split)
    if tower and not r.trained and rb > c:  # after the kbit upcast: the stream and the MLP's activation in fp32
        plain += (rb - c) * _upcast_elements(spec, inputs_by_group)
    if tower and spec.tower_layer_norm and r.amp and not r.cpu and rb == c:  # a bf16 stream into a LayerNorm (F77)
        plain += (4 - c) * sum(count * rows * i for (group, count, rows), i in inputs_by_group.items()
                               if group in ("attn_in", "mlp_in"))
    # a tower whose layers are not GradientCheckpointingLayers (mllama's) keeps them all, checkpointing or not
    checkpointed = all(x[6] for x in linears if x[3] in LAYER_ROLES)
    return plain, (inputs if tower else 0) + kept + unchecked if checkpointed else plain


def _distinct_inputs(linears: TowerLinears, split: bool) -> dict[tuple[str, int, int], int]:
    """The width of each distinct tensor `linears` read, by (input group, copies, rows): q, k and v read one, gate
    and up one, a projector's Linear its own (its name); the attention output is left out where SDPA keeps it (not
    where `split`: SPLIT_ATTENTION)."""
    out: dict[tuple[str, int, int], int] = {}
    for count, i, _, role, name, rows, _ in linears:
        group = ROLE_GROUP.get(role, name)
        if group != "attn_out" or split:
            out[(group, count, rows)] = i
    return out


def _layer_inputs(linears: TowerLinears, split: bool = False) -> dict[tuple[str, int, int], int]:
    """_distinct_inputs of the tower's layers, less those above the one the projector reads (rows 0)."""
    return _distinct_inputs(tuple(x for x in linears if x[3] in LAYER_ROLES and x[5]), split)


def _upcast_elements(spec: Spec, inputs: dict[tuple[str, int, int], int]) -> int:
    """The elements of a frozen tower's saved tensors that prepare_model_for_kbit_training turns fp32 (read off
    mllama's simulated QLoRA step, FINDINGS.md F74): the residual stream its norms read (2 x hidden per row and
    layer) and its MLP's activation, whose input a bitsandbytes 4-bit Linear returns in its input's dtype (the
    trained rate's MLP share less the second Linear's input); q, k, v and SDPA's output stay bf16 (autocast)."""
    rows = sum(count * n for (group, count, n) in inputs if group == "attn_in")
    hidden = next((i for (group, _, _), i in inputs.items() if group == "attn_in"), 0)
    second = next((i for (group, _, _), i in inputs.items() if group == "mlp_mid"), 0)
    per_row = spec.vision_act // max(1, rows)
    return rows * (2 * hidden + max(0, per_row - 8 * hidden - second))


def tower_trained_params(adapted: TowerLinears, rank: int) -> int:
    """Of tower_lora_params, the adapters that get a gradient: not those of the layers above the one the projector
    reads (rows 0), which run in the forward only."""
    return tower_lora_params(tuple(x for x in adapted if x[5]), rank)


def unreached_weights(spec: Spec) -> int:
    """The matmul weights of the tower layers above the one the projector reads (rows 0): a full fine-tune's
    gradients and AdamW state leave them out (their norms' and biases' few weights are not itemised)."""
    return sum(count * i * o for count, i, o, _, _, rows, _ in spec.tower_linears or () if not rows)
