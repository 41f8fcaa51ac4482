"""What a vision tower holds per image at the widest moment of a forward without gradients: HF generate's prefill,
or a server encoding an image (Spec.vision_transient), by tower kind, read off CPU-simulated prefills fed images
(FINDINGS.md F78).

Per row the tower's layers read (a patch), in elements of the compute dtype, the larger of two moments:
- the MLP's: the tower's input, which its encoder's caller holds through the layer loop (modeling_clip
  CLIPEncoder's inputs_embeds, PixtralTransformer's, Gemma4VisionEncoder's), the loop's layer input, the
  post-attention residual and the normed input (4 hidden widths; Pixtral's patch conv output too, which
  PixtralVisionModel.forward keeps in patch_embeds: 5), beside the MLP's widest: fc1's output and its activation's
  (2 MLP widths; quick_gelu's sigmoid too: 3), or a gated MLP's activation, up and their product (3);
- the attention's, where a tower rotates q and k in fp32 (apply_rotary_pos_emb_vision of the Qwen-VL towers: q and
  k cast to fp32, their products with cos and sin, the rotated sums, beside the fused qkv output and the normed
  input): 17 hidden widths, read off Qwen2.5-VL's.
mllama's tower keeps every layer's output to the end (MllamaVisionModel takes its intermediate layers from
output_hidden_states), then stacks the intermediate ones and concatenates them with the last: (layers + 2 + 2 x
intermediate) hidden widths per padded row, beside its [rows x rows] mask per image. Gemma-4's encoder keeps a bool
[patches x patches] mask per image. Pixtral's block-diagonal mask over a step's images is memory's (one image's
here). And the image's pixels, as the processor's batch hands them over in the compute dtype.
"""

from __future__ import annotations

from ..config.reader import Reader

# Tower kinds by their MLP moment (hidden widths, MLP widths) and attention moment (hidden widths, 0: below it),
# each read off its own simulated prefill or, marked "same code", its encoder's copy
RATES: dict[str, tuple[int, int, int]] = {
    "siglip_vision_model": (4, 2, 0),  # gemma-3-27b
    **dict.fromkeys(("siglip2_vision_model", "idefics3_vision", "smolvlm_vision"), (4, 2, 0)),  # same code
    "pixtral": (5, 3, 0),  # Magistral-Small-2509
    "gemma4_vision": (4, 3, 0),  # gemma-4-26B-A4B
    "qwen2_5_vl_vision": (4, 3, 17),  # Qwen2.5-VL-7B
    **dict.fromkeys(("qwen2_vl_vision", "qwen3_vl_vision", "qwen3_vl_moe_vision", "qwen3_5_vision",
                     "qwen3_5_moe_vision"), (4, 2, 17)),  # same code (Qwen2-VL's quick_gelu: 3, below)
}


def inference_elements(v: Reader, kind: str, rows: int, hidden: int) -> tuple[int, int] | None:
    """One image's working set in a forward without gradients, its pixels included, and its pixels, elements
    (module docstring); None for a kind not read. `rows`: the patches the tower's layers read per image; `hidden`:
    the tower's width."""
    if kind not in RATES and kind != "clip_vision_model":
        return None
    inter = hidden * v.int("mlp_ratio", 4) if kind == "qwen2_vl_vision" else v.int("intermediate_size")
    if kind == "clip_vision_model":  # llava-1.5-7b; quick_gelu keeps its sigmoid beside fc1's output and the product
        rate = 4 * hidden + (3 if v.str("hidden_act", "quick_gelu") == "quick_gelu" else 2) * inter
    else:
        h_mlp, i_mlp, h_attn = RATES[kind]
        i_mlp = 3 if kind == "qwen2_vl_vision" and v.str("hidden_act", "quick_gelu") == "quick_gelu" else i_mlp
        rate = max(h_mlp * hidden + i_mlp * inter, h_attn * hidden)
    pixels = pixel_elements(v, kind, rows)
    return rows * rate + pixels + mask_elements(kind, rows), pixels


def mllama_inference_elements(v: Reader, rows: int, hidden: int) -> tuple[int, int]:
    """mllama's tower per image (`rows`: its tiles' padded patches), read off Llama-3.2-11B-Vision's prefill: every
    layer's output (local and global), the patch conv's, the stack of the intermediate layers and its concatenation
    with the last (module docstring), its bf16 [rows x rows] mask, and the tiles' pixels."""
    layers = v.int("num_hidden_layers") + v.int("num_global_layers")
    picks = len(v.list("intermediate_layers_indices", int) or [])
    pixels = v.int("max_num_tiles", 4) * v.int("num_channels", 3) * v.int("image_size") ** 2
    return rows * (layers + 2 + 2 * picks) * hidden + rows * rows + pixels, pixels


def pixel_elements(v: Reader, kind: str, rows: int) -> int:
    """The image's pixels the processor hands over: channels x patch^2 per patch (x the temporal patch of the Qwen-VL
    towers' 3-D patches). `rows` are the patches alone: the class token CLIP adds holds no pixels, and its row, one in
    577, is left out of the working set too."""
    p = v.int("patch_size", 14)
    channels = v.int("in_channels" if kind.startswith("qwen") else "num_channels", 3)
    temporal = v.int("temporal_patch_size", 2) if kind.startswith("qwen") else 1
    return rows * channels * p * p * temporal


def mask_elements(kind: str, rows: int) -> int:
    """Masks kept per image through the tower's forward, in compute-dtype elements: Gemma-4's bool [rows x rows]
    (create_bidirectional_mask: 1 byte, half an element) and Pixtral's one image's block (generate_block_attention_mask
    over the image alone: memory adds what a step of several images holds beyond it)."""
    if kind == "gemma4_vision":
        return rows * rows // 2
    return rows * rows if kind == "pixtral" else 0
