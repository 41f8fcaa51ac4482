"""Synthetic images the harness feeds a vision-language model: pixel values of the shape its processor makes, and
the image's tokens at the start of each sample, as the processor writes them into the text.

The estimator prices an image as its tower's patches and the soft tokens it adds among the sample's tokens
(families/vision_language.py): the harness feeds the same, for the families listed here.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from typing import Any
from unittest import mock

import torch
from torch._subclasses import fake_tensor
from torch.utils import _pytree as pytree
from torch.utils._mode_utils import no_dispatch

from ..errors import MeasureError

# The wrappers the harness can feed an image to; a model of another type is refused with its name.
IMAGE_FAMILIES = ("llava", "qwen2_5_vl", "qwen3_5", "qwen3_5_moe", "gemma3", "gemma4", "mllama", "mistral3")
# Of those, the ones whose model reads the values of its image inputs to shape its work (Qwen2.5-VL's and Qwen3.5's
# rot_pos_emb, position interpolation and cu_seqlens loop over image_grid_thw; Qwen2.5-VL's get_vision_window_index
# too; Gemma-4's pooler and its split of the soft tokens read the patch positions, and its placeholder check the
# ids; Pixtral's tower and Mistral-3's patch merger read image_sizes): a FakeTensor holds no values, so the CPU
# simulation runs them under ValuedFakeTensorMode.
VALUE_READERS = ("qwen2_5_vl", "qwen3_5", "qwen3_5_moe", "gemma4", "mistral3")
# The most elements a tensor the simulation computes for real may hold (ValuedFakeTensorMode): an image's index
# tensors (Qwen2.5-VL's window index, a few thousand; Gemma-4's pooling weights, 705,600 an image) and Gemma-4's
# image-token mask, expanded to the embeddings' [batch, tokens, hidden] (5.8 M at 2 x 1,024 x 2,816), with room.
VALUED_NUMEL = 1 << 25
# Qwen2.5-VL's nominal image (vision_towers.qwen_vl prices a 448 x 448 one: the processor resizes dynamically).
QWEN_VL_SIDE = 448
# Gemma-4's image as Gemma4ImageProcessor makes it for its default 280 soft tokens (vision_towers.GEMMA4_SOFT_TOKENS):
# a grid of 20 x 14 pooling kernels (960 x 672 pixels at patch 16 and kernel 3), 2,520 patches, no padding.
GEMMA4_GRID = (20, 14)
# Mistral-3's image: vision_towers.pixtral's nominal 1,024 x 1,024, as PixtralImageProcessor makes it: whole tokens
# of patch_size x spatial_merge_size pixels, rounded up (1,036 at patch 14 and merge 2).
MISTRAL3_SIDE = 1024
# The wrappers whose M-RoPE positions read the processor's mm_token_type_ids (mrope_positions).
MROPE_MARKED = ("qwen3_5", "qwen3_5_moe")


class ValuedFakeTensorMode(fake_tensor.FakeTensorMode):
    """FakeTensorMode that computes small integer tensors for real, where a tower reads its inputs' values.

    FakeTensorMode already runs an op for real when every tensor it reads is a constant (a FakeTensor that keeps its
    value), and keeps the result a constant up to CONSTANT_NUMEL_LIMIT elements (1: a scalar). This mode makes the
    outputs of integer and bool factories (torch.arange, torch.tensor of a grid) constants too, and value_mode raises
    the limit to VALUED_NUMEL: an image grid's arithmetic, its .tolist() and the index it builds run on the values, so
    a tower's data-dependent shapes are the real ones. A tensor that mixes in a fake one (a weight, an activation)
    stays fake; every output is still a FakeTensor, whose bytes the tracker counts as before. FakeTensorMode's
    dispatch cache, shared by every instance, is off here: an op it had cached under a plain mode would skip this
    mode's factories and return a tensor without its values."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cache_enabled = False

    def _dispatch_impl(self, func, types, args, kwargs):
        out = super()._dispatch_impl(func, types, args, kwargs)
        if (isinstance(out, fake_tensor.FakeTensor) and out.constant is None and out.device.type == "cpu"
                and not (out.dtype.is_floating_point or out.dtype.is_complex) and out.numel() <= VALUED_NUMEL
                and isinstance(func, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded not in func.tags
                and not any(isinstance(a, torch.Tensor) for a in pytree.tree_leaves((args, kwargs)))):
            with fake_tensor.unset_fake_temporarily(), no_dispatch():
                real = func(*args, **kwargs)
            return self.fake_tensor_converter.from_real_tensor(self, real, make_constant=True)
        return out


@contextlib.contextmanager
def value_mode(config: Mapping[str, Any], images: int | None):
    """The fake mode the CPU simulation runs a step under: ValuedFakeTensorMode (with FakeTensorMode's constant limit
    raised to VALUED_NUMEL) where images go to a tower that reads their values (VALUE_READERS), FakeTensorMode else."""
    if not images or config.get("model_type") not in VALUE_READERS:
        with fake_tensor.FakeTensorMode(allow_non_fake_inputs=True) as mode:
            yield mode
        return
    with mock.patch.object(fake_tensor, "CONSTANT_NUMEL_LIMIT", VALUED_NUMEL), \
            ValuedFakeTensorMode(allow_non_fake_inputs=True) as mode:
        yield mode


def check_images(config: Mapping[str, Any], images: int | None) -> None:
    """Refuse --images, before a model is built, for a config of a type the harness cannot feed (IMAGE_FAMILIES)."""
    model_type = config.get("model_type")
    if images and model_type not in IMAGE_FAMILIES:
        raise MeasureError(f"the harness feeds images to {', '.join(IMAGE_FAMILIES)} only", key="model_type",
                           value=model_type)


def image_tokens(config: Any) -> tuple[int, int]:
    """(tokens one image adds to the text, the tower's input rows per image) of the model's processor:
    - llava: the CLIP grid's (image_size / patch_size)^2 patches, its class token dropped under the "default"
      vision_feature_select_strategy (modeling_llava.LlavaModel.get_image_features);
    - qwen2_5_vl: a 448 x 448 image as Qwen2VLImageProcessor flattens it: (448 / 14)^2 patches of
      temporal_patch_size frames, merged spatial_merge_size^2 to a token (modeling_qwen2_5_vl.PatchMerger);
    - gemma3: the SigLIP grid's patches pooled to mm_tokens_per_image soft tokens (Gemma3MultiModalProjector);
    - mllama: one <|image|> token (the cross-attention layers read the image), the tower every tile's patches and
      class token (MllamaVisionModel; its padding to a multiple of 8 is the model's own);
    - gemma4: GEMMA4_GRID's soft tokens, each pooling_kernel_size^2 patches (Gemma4VisionPooler);
    - mistral3: MISTRAL3_SIDE's square of patches, merged spatial_merge_size^2 to a token, each row of tokens followed
      by [IMG_BREAK] ([IMG_END] after the last: PixtralProcessor), which are text tokens."""
    v = config.vision_config
    if config.model_type == "llava":
        patches = (v.image_size // v.patch_size) ** 2
        return patches + (config.vision_feature_select_strategy == "full"), patches
    if config.model_type == "gemma3":
        return config.mm_tokens_per_image, (v.image_size // v.patch_size) ** 2
    if config.model_type == "mllama":  # one <|image|> token; the tower reads every tile's patches and class token
        return 1, v.max_num_tiles * ((v.image_size // v.patch_size) ** 2 + 1)
    if config.model_type == "gemma4":  # a soft token per pooling kernel of patches
        soft = GEMMA4_GRID[0] * GEMMA4_GRID[1]
        return soft, soft * v.pooling_kernel_size ** 2
    if config.model_type == "mistral3":  # a row of [IMG] per merged row of patches, each closed by [IMG_BREAK]
        merged = -(-MISTRAL3_SIDE // (v.patch_size * config.spatial_merge_size))
        return merged * (merged + 1), (merged * config.spatial_merge_size) ** 2
    side = QWEN_VL_SIDE // v.patch_size
    return side * side // v.spatial_merge_size ** 2, side * side


def image_inputs(config: Any, ids: torch.Tensor, images: int, dtype: torch.dtype) -> tuple[torch.Tensor, dict]:
    """The ids with `images` images' tokens at the start of every sample, and the model's image inputs for them:
    llava's and gemma-3's pixel_values [samples x images, channels, side, side] (gemma-3's token_type_ids too, as its
    processor returns them); Qwen2.5-VL's flattened patches [rows, channels x temporal_patch_size x patch^2] and
    image_grid_thw (1, side, side) per image (Qwen3.5's mm_token_type_ids too); mllama's tiles and masks; Gemma-4's
    patches and positions (_gemma4_inputs). For a model of IMAGE_FAMILIES (check_images refuses the others before
    the model is built); raises ValueError where the images do not fit in the sample."""
    per_image, rows = image_tokens(config)
    batch, tokens = ids.shape
    # M-RoPE marked images are each closed by a text token (the processor's <|vision_end|>): get_rope_index reads a
    # run of marked tokens as one image
    stride = per_image + (config.model_type in MROPE_MARKED)
    if images * stride >= tokens:
        raise ValueError(f"--images: {images} image(s) of {per_image} tokens do not fit in --tokens {tokens}")
    ids = ids.clone()
    ids[ids == config.image_token_id] = 0  # the text's own ids are never the image token
    for k in range(images):
        ids[:, k * stride:k * stride + per_image] = config.image_token_id
    v = config.vision_config
    g = torch.Generator().manual_seed(0)
    if config.model_type in ("llava", "gemma3"):
        side = v.image_size
        pixels = torch.randn(batch * images, v.num_channels, side, side, generator=g)
        extra = {"pixel_values": pixels.to(ids.device, dtype)}
        if config.model_type == "gemma3":  # Gemma3Processor's token_type_ids (mm_token_type_ids): 1 on image tokens
            extra["token_type_ids"] = (ids == config.image_token_id).long()
        return ids, extra
    if config.model_type == "gemma4":
        return _gemma4_inputs(config, ids, images, (per_image, rows), dtype, g)
    if config.model_type == "mistral3":  # PixtralImageProcessor's pixels and image_sizes; the breaks are text
        merged = -(-MISTRAL3_SIDE // (v.patch_size * config.spatial_merge_size))
        ids[:, merged:images * per_image:merged + 1] = 0
        side = merged * config.spatial_merge_size * v.patch_size
        pixels = torch.randn(batch * images, v.num_channels, side, side, generator=g)
        return ids, {"pixel_values": pixels.to(ids.device, dtype),
                     "image_sizes": torch.tensor([[side, side]] * (batch * images), device=ids.device)}
    if config.model_type == "mllama":  # MllamaProcessor's tiles: all max_num_tiles of a 2 x 2 aspect ratio, each read
        tiles, side = v.max_num_tiles, v.image_size
        pixels = torch.randn(batch, images, tiles, v.num_channels, side, side, generator=g)
        ratio = 1 + v.supported_aspect_ratios.index([2, 2]) if [2, 2] in v.supported_aspect_ratios else 1
        return ids, {"pixel_values": pixels.to(ids.device, dtype),
                     "aspect_ratio_ids": torch.full((batch, images), ratio, device=ids.device),
                     "aspect_ratio_mask": torch.ones(batch, images, tiles, dtype=torch.long, device=ids.device),
                     "cross_attention_mask": torch.ones(batch, tokens, images, tiles, dtype=torch.long,
                                                        device=ids.device)}
    side = QWEN_VL_SIDE // v.patch_size
    width = v.in_channels * v.temporal_patch_size * v.patch_size ** 2
    pixels = torch.randn(batch * images * rows, width, generator=g)
    grid = torch.tensor([[1, side, side]] * (batch * images), device=ids.device)
    extra = {"pixel_values": pixels.to(ids.device, dtype), "image_grid_thw": grid}
    if config.model_type in MROPE_MARKED:  # Qwen3VLProcessor's mm_token_type_ids: 1 on image tokens (made as a
        # value, which get_rope_index reads)
        marks = ([1] * per_image + [0]) * images + [0] * (tokens - images * (per_image + 1))
        extra["mm_token_type_ids"] = torch.tensor([marks] * batch, device=ids.device)
    return ids, extra


def _gemma4_inputs(config: Any, ids: torch.Tensor, images: int, shape: tuple[int, int], dtype: torch.dtype,
                   g: torch.Generator) -> tuple[torch.Tensor, dict]:
    """Gemma4ImageProcessor's patchified pixels [images, patches, 3 x patch^2] in [0, 1] and their (x, y) positions
    row by row on GEMMA4_GRID's patches (image_position_ids), and Gemma4Processor's mm_token_type_ids (1 on the image
    tokens: the text's block mask reads them). The ids are made anew as values (a constant under
    ValuedFakeTensorMode): Gemma4Model.forward indexes the embeddings with the image tokens' mask to check their
    count before the check is called, which placeholder_check_skipped cannot skip."""
    v, (batch, tokens), (per_image, rows) = config.vision_config, ids.shape, shape
    k = v.pooling_kernel_size
    wide, high = GEMMA4_GRID[0] * k, GEMMA4_GRID[1] * k
    positions = [[x, y] for y in range(high) for x in range(wide)]
    with fake_tensor.unset_fake_temporarily():
        real = torch.randint(0, config.text_config.vocab_size, (batch, tokens), generator=g)
        real[real == config.image_token_id] = 0
        real[:, :images * per_image] = config.image_token_id
        values, marks = real.tolist(), (real == config.image_token_id).long().tolist()
    pixels = torch.rand(batch * images, rows, 3 * v.patch_size ** 2, generator=g)
    return torch.tensor(values, device=ids.device), {
        "pixel_values": pixels.to(ids.device, dtype),
        "image_position_ids": torch.tensor([positions] * pixels.shape[0], device=ids.device),
        "mm_token_type_ids": torch.tensor(marks, device=ids.device)}


def mrope_positions(model, ids: torch.Tensor, extra: dict) -> dict:
    """`extra` with the M-RoPE position ids a Qwen3.5 forward would compute from the image grid and mm_token_type_ids
    (Qwen3_5Model.get_rope_index), computed by that method on real copies of them: it builds a tensor from a list of
    0-d tensors (torch.tensor(mrope_position_deltas)), which reads their data, and a FakeTensor has none. The step
    then runs as a Trainer's does, but for a [3, batch, tokens] int64 tensor made before it, not in its forward."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if base.config.model_type not in MROPE_MARKED:
        return extra
    with fake_tensor.unset_fake_temporarily():
        real = {key: torch.tensor(extra[key].tolist()) for key in ("mm_token_type_ids", "image_grid_thw")}
        positions, _ = base.model.get_rope_index(torch.zeros(ids.shape, dtype=torch.long), **real)
    return {**extra, "position_ids": positions.to(ids.device)}


def placeholder_check_skipped(model) -> contextlib.AbstractContextManager:
    """transformers checks that the image tokens match the image features by reading their count
    (get_placeholder_mask's torch_compilable_check), which a FakeTensor cannot give (a data-dependent read):
    image_inputs writes them to match, so the CPU simulation skips the check in the model's modeling file."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    module = sys.modules[type(base).__module__]
    if not hasattr(module, "torch_compilable_check"):
        return contextlib.nullcontext()
    return mock.patch.object(module, "torch_compilable_check", lambda *args, **kwargs: None)
