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

from ..errors import MeasureError

# The wrappers the harness can feed an image to; a model of another type is refused with its name.
IMAGE_FAMILIES = ("llava", "qwen2_5_vl", "gemma3", "mllama")
# Of those, the ones whose tower reads the image grid's values (Qwen2.5-VL's rot_pos_emb and get_window_index loop
# over image_grid_thw), which a FakeTensor does not hold: they run on CUDA, not in the CPU simulation.
GRID_READERS = ("qwen2_5_vl",)

# Qwen2.5-VL's nominal image (vision_towers.qwen_vl prices a 448 x 448 one: the processor resizes dynamically).
QWEN_VL_SIDE = 448


def check_images(config: Mapping[str, Any], images: int | None, cpu: bool) -> None:
    """Refuse --images, before a model is built, for a config of a type the harness cannot feed (IMAGE_FAMILIES), or
    in the CPU simulation for one whose tower reads its grid's values (GRID_READERS)."""
    model_type = config.get("model_type")
    if not images:
        return
    if model_type not in IMAGE_FAMILIES:
        raise MeasureError(f"the harness feeds images to {', '.join(IMAGE_FAMILIES)} only", key="model_type",
                           value=model_type)
    if cpu and model_type in GRID_READERS:
        raise MeasureError("its tower reads its image grid's values, which the CPU simulation's fake tensors do not "
                           "hold: --images runs on CUDA", key="model_type", value=model_type)


def image_tokens(config: Any) -> tuple[int, int]:
    """(tokens one image adds to the text, the tower's input rows per image) of the model's processor:
    - llava: the CLIP grid's (image_size / patch_size)^2 patches, its class token dropped under the "default"
      vision_feature_select_strategy (modeling_llava.LlavaModel.get_image_features);
    - qwen2_5_vl: a 448 x 448 image as Qwen2VLImageProcessor flattens it: (448 / 14)^2 patches of
      temporal_patch_size frames, merged spatial_merge_size^2 to a token (modeling_qwen2_5_vl.PatchMerger);
    - gemma3: the SigLIP grid's patches pooled to mm_tokens_per_image soft tokens (Gemma3MultiModalProjector);
    - mllama: one <|image|> token (the cross-attention layers read the image), the tower every tile's patches and
      class token (MllamaVisionModel; its padding to a multiple of 8 is the model's own)."""
    v = config.vision_config
    if config.model_type == "llava":
        patches = (v.image_size // v.patch_size) ** 2
        return patches + (config.vision_feature_select_strategy == "full"), patches
    if config.model_type == "gemma3":
        return config.mm_tokens_per_image, (v.image_size // v.patch_size) ** 2
    if config.model_type == "mllama":  # one <|image|> token; the tower reads every tile's patches and class token
        return 1, v.max_num_tiles * ((v.image_size // v.patch_size) ** 2 + 1)
    side = QWEN_VL_SIDE // v.patch_size
    return side * side // v.spatial_merge_size ** 2, side * side


def image_inputs(config: Any, ids: torch.Tensor, images: int, dtype: torch.dtype) -> tuple[torch.Tensor, dict]:
    """The ids with `images` images' tokens at the start of every sample, and the model's image inputs for them:
    llava's and gemma-3's pixel_values [samples x images, channels, side, side] (gemma-3's token_type_ids too, as its
    processor returns them); Qwen2.5-VL's flattened patches [rows, channels x temporal_patch_size x patch^2] and
    image_grid_thw (1, side, side) per image; mllama's tiles and masks. For a model of IMAGE_FAMILIES (check_images
    refuses the others before the model is built); raises ValueError where the images do not fit in the sample."""
    per_image, rows = image_tokens(config)
    batch, tokens = ids.shape
    if images * per_image >= tokens:
        raise ValueError(f"--images: {images} image(s) of {per_image} tokens do not fit in --tokens {tokens}")
    ids = ids.clone()
    ids[ids == config.image_token_id] = 0  # the text's own ids are never the image token
    ids[:, :images * per_image] = config.image_token_id
    v = config.vision_config
    g = torch.Generator().manual_seed(0)
    if config.model_type in ("llava", "gemma3"):
        side = v.image_size
        pixels = torch.randn(batch * images, v.num_channels, side, side, generator=g)
        extra = {"pixel_values": pixels.to(ids.device, dtype)}
        if config.model_type == "gemma3":  # Gemma3Processor's token_type_ids (mm_token_type_ids): 1 on image tokens
            extra["token_type_ids"] = (ids == config.image_token_id).long()
        return ids, extra
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
    return ids, {"pixel_values": pixels.to(ids.device, dtype), "image_grid_thw": grid}


def placeholder_check_skipped(model) -> contextlib.AbstractContextManager:
    """transformers checks that the image tokens match the image features by reading their count
    (get_placeholder_mask's torch_compilable_check), which a FakeTensor cannot give (a data-dependent read):
    image_inputs writes them to match, so the CPU simulation skips the check in the model's modeling file."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    module = sys.modules[type(base).__module__]
    if not hasattr(module, "torch_compilable_check"):
        return contextlib.nullcontext()
    return mock.patch.object(module, "torch_compilable_check", lambda *args, **kwargs: None)
