"""The nn.Linears of a vision-language model's vision tower and projector, as transformers names and shapes them.

peft's "all-linear" wraps every nn.Linear of the model but the output embedding (peft/tuners/tuners_utils.py
_maybe_include_all_linear_layers, peft 0.21), the tower's and the projector's too, and a target name matches a
tower Linear of that name as it matches a text layer's. Each entry is (count, in, out, role, name): `count` copies
over the tower's layers, `role` the LoRA role memory/lora.py groups inputs by, `name` the module's last name
component (what peft matches). tests/test_tower_linears.py holds each kind to the model's Linears on the meta device.
A kind missing here has no inventory (None): its towers' adapters are not priced, and checks.py says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..config.reader import Reader
from ..graph.nodes import LAYER_ROLES, PROJECTOR_ROLE

TowerLinear = tuple[int, int, int, str, str]  # (count, in, out, role, name)
HEAD = "pooling head"  # the role of a tower's Linears whose output no VLM reads: they run, keep nothing, train not
Inventory = tuple[TowerLinear, ...]

# SigLIP's and CLIP's layer names (modeling_clip.CLIPAttention q_proj/k_proj/v_proj/out_proj, CLIPMLP fc1/fc2),
# which Idefics3's, SmolVLM's, Siglip2's and InternVL's (with projection_layer for out_proj) layers keep.
CLIP_NAMES = (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "out_proj"), ("up", "fc1"), ("down", "fc2"))


def layers(n: int, h: int, inter: int, names: tuple[tuple[str, str], ...] = CLIP_NAMES, qkv: int = 0) -> Inventory:
    """n layers of an attention block and an MLP: q/k/v/o of h x h (or a fused qkv of h x qkv), then an MLP of the
    names' roles (up, down: h x inter, inter x h; gate, up, down: the gated one)."""
    shapes = {"q": (h, h), "k": (h, h), "v": (h, h), "qkv": (h, qkv), "o": (h, h), "gate": (h, inter),
              "up": (h, inter), "down": (inter, h)}
    return tuple((n, *shapes[role], role, name) for role, name in names)


def clip(v: Reader, kind: str) -> Inventory:
    """modeling_clip.CLIPEncoderLayer (SigLIP's, Idefics3's and SmolVLM's alike); SigLIP's pooling head where
    vision_use_head (siglip_vision_model only, as vision_towers.siglip counts it); Siglip2's Linear patch
    embedding and head."""
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    out = layers(n, h, inter)
    if kind == "siglip2_vision_model":
        p = v.int("patch_size")
        out = ((1, v.int("num_channels", 3) * p * p, h, "linear", "patch_embedding"), *out)
    if kind in ("siglip_vision_model", "siglip2_vision_model") and v.flag("vision_use_head", True):
        # SiglipMultiheadAttentionPoolingHead: nn.MultiheadAttention's out_proj (its in_proj is a Parameter), an MLP;
        # a VLM reads the tower's last hidden state, not the pooled output, so the head gets no gradient (HEAD)
        out += ((1, h, h, HEAD, "out_proj"), (1, h, inter, HEAD, "fc1"), (1, inter, h, HEAD, "fc2"))
    return out


def internvl(v: Reader, kind: str) -> Inventory:
    """modeling_internvl.InternVLVisionAttention q_proj/k_proj/v_proj/projection_layer, InternVLVisionMLP fc1/fc2."""
    names = (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "projection_layer"), ("up", "fc1"),
             ("down", "fc2"))
    return layers(v.int("num_hidden_layers"), v.int("hidden_size"), v.int("intermediate_size"), names)


def pixtral(v: Reader, kind: str) -> Inventory:
    """modeling_pixtral.PixtralAttention q_proj/k_proj/v_proj/o_proj, PixtralMLP gate_proj/up_proj/down_proj."""
    names = (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "o_proj"), ("gate", "gate_proj"),
             ("up", "up_proj"), ("down", "down_proj"))
    return layers(v.int("num_hidden_layers"), v.int("hidden_size"), v.int("intermediate_size"), names)


def qwen_vl(v: Reader, kind: str) -> Inventory:
    """modeling_qwen2_vl.VisionAttention qkv/proj with VisionMlp fc1/fc2 (embed_dim x mlp_ratio); Qwen2.5-VL's
    gate_proj/up_proj/down_proj (intermediate_size); Qwen3-VL's and Qwen3.5's linear_fc1/linear_fc2."""
    mlp: tuple[tuple[str, str], ...]
    if kind == "qwen2_vl_vision":
        h = v.int("embed_dim")
        mlp = (("up", "fc1"), ("down", "fc2"))
        inter, n = h * v.int("mlp_ratio", 4), v.int("depth")
    else:
        h, inter, n = v.int("hidden_size"), v.int("intermediate_size"), v.int("depth")
        mlp = (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")) if kind == "qwen2_5_vl_vision" \
            else (("up", "linear_fc1"), ("down", "linear_fc2"))
    return layers(n, h, inter, (("qkv", "qkv"), ("o", "proj"), *mlp), qkv=3 * h)


def gemma4(v: Reader, kind: str) -> Inventory:
    """modeling_gemma4.Gemma4VisionModel: the patch embedder's input_proj (3 x patch^2 -> hidden), and each layer's
    Gemma4ClippableLinear q/k/v/o and gate/up/down, whose nn.Linear is named `linear`."""
    h, n, inter = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("intermediate_size")
    heads, hd, p = v.int("num_attention_heads"), v.int("head_dim"), v.int("patch_size")
    kv = v.int("num_key_value_heads", heads) * hd
    return ((1, 3 * p * p, h, "linear", "input_proj"), (n, h, heads * hd, "q", "linear"), (n, h, kv, "k", "linear"),
            (n, h, kv, "v", "linear"), (n, heads * hd, h, "o", "linear"), (n, h, inter, "gate", "linear"),
            (n, h, inter, "up", "linear"), (n, inter, h, "down", "linear"))


def mllama(v: Reader, kind: str) -> Inventory:
    """modeling_mllama.MllamaVisionEncoderLayer q_proj/k_proj/v_proj/o_proj and fc1/fc2, in the local transformer
    (num_hidden_layers) and the gated global one (num_global_layers)."""
    names = (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "o_proj"), ("up", "fc1"), ("down", "fc2"))
    n = v.int("num_hidden_layers") + v.int("num_global_layers")
    return layers(n, v.int("hidden_size"), v.int("intermediate_size"), names)


TOWERS: dict[str, Callable[[Reader, str], Inventory]] = {
    **dict.fromkeys(("clip_vision_model", "siglip_vision_model", "siglip2_vision_model", "idefics3_vision",
                     "smolvlm_vision"), clip),
    "internvl_vision": internvl, "pixtral": pixtral,
    **dict.fromkeys(("qwen2_vl_vision", "qwen2_5_vl_vision", "qwen3_vl_vision", "qwen3_vl_moe_vision",
                     "qwen3_5_vision", "qwen3_5_moe_vision"), qwen_vl),
    "gemma4_vision": gemma4, "mllama_vision_model": mllama,
}


# Tower kinds whose layers are not transformers' GradientCheckpointingLayer, so gradient_checkpointing_enable leaves
# them whole: modeling_mllama.MllamaVisionEncoderLayer is an nn.Module (its encoder's gradient_checkpointing is unread)
UNCHECKPOINTED = frozenset({"mllama_vision_model"})


# Tower kinds whose layers' two norms are nn.LayerNorm (modeling_clip CLIPEncoderLayer layer_norm1/2, SigLIP's,
# Siglip2's, Idefics3's, SmolVLM's; modeling_qwen2_vl Qwen2VLVisionBlock norm1/2, Qwen3-VL's and Qwen3.5's;
# modeling_mllama MllamaVisionEncoderLayer); InternVL's where its norm_type is layer_norm (NORM2FN). The others'
# are RMSNorms (Qwen2.5-VL's, Pixtral's, Gemma-4's). Under CUDA autocast a LayerNorm runs in fp32 (FINDINGS.md F8)
LAYER_NORM_TOWERS = frozenset({"clip_vision_model", "siglip_vision_model", "siglip2_vision_model", "idefics3_vision",
                               "smolvlm_vision", "qwen2_vl_vision", "qwen3_vl_vision", "qwen3_vl_moe_vision",
                               "qwen3_5_vision", "qwen3_5_moe_vision", "mllama_vision_model"})


def layer_norm_tower(r: Reader, vc: Mapping[str, Any], kind: str) -> bool:
    """Whether the tower's layers normalise with LayerNorm (LAYER_NORM_TOWERS; InternVL's by its norm_type,
    "layer_norm" by default: configuration_internvl.InternVLVisionConfig)."""
    if kind == "internvl_vision":
        return r.child(vc, kind, prefix="vision_config.").str("norm_type", "layer_norm") == "layer_norm"
    return kind in LAYER_NORM_TOWERS


def _feature_layers(r: Reader) -> list[int] | None:
    """The tower layers a wrapper's vision_feature_layer names (an index or a list of them), None where it names
    none (or not as integers)."""
    raw = r.cfg.get("vision_feature_layer", r.defaults.get("vision_feature_layer"))
    picks = raw if isinstance(raw, list) else [raw]
    return picks if picks and all(isinstance(i, int) and not isinstance(i, bool) for i in picks) else None


def projector(mt: str, r: Reader, v: Reader, vh: int, th: int) -> Inventory | None:
    """The projector's Linears (vision_projectors.py counts their weights): None for a wrapper not listed here."""
    if mt in ("llava", "llava_next", "llava_onevision"):  # LlavaMultiModalProjector
        return ((1, vh * len(_feature_layers(r) or [0]), th, "linear", "linear_1"), (1, th, th, "linear", "linear_2"))
    if mt == "internvl":  # InternVLMultiModalProjector, after the pixel shuffle
        d = int(1 / r.number("downsample_ratio", 0.5, low=1e-6))
        return ((1, vh * d * d, th, "linear", "linear_1"), (1, th, th, "linear", "linear_2"))
    if mt == "paligemma":  # PaliGemmaMultiModalProjector.linear
        return ((1, vh, r.int("projection_dim", th), "linear", "linear"),)
    if mt == "gemma3":  # Gemma3MultiModalProjector's weight is an nn.Parameter (mm_input_projection_weight)
        return ()
    if mt == "mllama":  # MllamaForConditionalGeneration.multi_modal_projector, one Linear
        return ((1, v.int("vision_output_dim", 6 * vh), th, "linear", "multi_modal_projector"),)
    if mt == "gemma4":  # Gemma4MultimodalEmbedder.embedding_projection
        return ((1, vh, th, "linear", "embedding_projection"),)
    if mt in ("idefics3", "smolvlm"):  # Idefics3SimpleMLP.proj after the pixel shuffle
        s = r.int("scale_factor", 2)
        return ((1, vh * s * s, th, "linear", "proj"),)
    if mt == "mistral3":  # Mistral3PatchMerger.merging_layer, then linear_1 and linear_2
        m = r.int("spatial_merge_size", 2)
        return ((1, vh * m * m, vh, "linear", "merging_layer"), (1, vh, th, "linear", "linear_1"),
                (1, th, th, "linear", "linear_2"))
    if mt in ("qwen2_vl", "qwen2_5_vl"):  # PatchMerger.mlp: Linear, GELU, Linear (named by their index), to Qwen2-VL's
        # vision hidden_size, else out_hidden_size
        wide = vh * v.int("spatial_merge_size", 2) ** 2
        out_h = v.int("hidden_size" if mt == "qwen2_vl" else "out_hidden_size")
        return ((1, wide, wide, "linear", "0"), (1, wide, out_h, "linear", "2"))
    if mt in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"):  # the merger and each deepstack merger
        wide = vh * v.int("spatial_merge_size", 2) ** 2
        deep = len(v.list("deepstack_visual_indexes", int) or []) if v.has("deepstack_visual_indexes") else 0
        out_h = v.int("out_hidden_size")
        return ((1 + deep, wide, wide, "linear", "linear_fc1"), (1 + deep, wide, out_h, "linear", "linear_fc2"))
    return None


def live_layers(r: Reader, n: int) -> int:
    """The tower layers whose output reaches the projector: a wrapper with vision_feature_layer takes
    hidden_states[vision_feature_layer] of the tower's n + 1 (the embeddings', then each layer's: modeling_llava
    LlavaModel.get_image_features, -2 by default), the deepest of a list; a layer above it runs in the forward, but
    gets no gradient and keeps nothing for the backward."""
    picks = _feature_layers(r)
    return n if picks is None else max(0, min(n, max(i if i >= 0 else n + 1 + i for i in picks)))


def tower_linears(mt: str, r: Reader, vc: Mapping[str, Any], kind: str, widths: tuple[int, int],
                  rows: tuple[int, int]) -> tuple[tuple[int, int, int, str, str, int, bool], ...] | None:
    """The tower's Linears and the projector's, each with the rows it reads per image and whether checkpointing
    recomputes it (Spec.tower_linears), or None where either is not listed. `kind`: vision_towers.tower_kind;
    `widths`: the tower's output and the text model's; `rows`: the patches the tower reads per image, the tokens
    the projector makes of them. Rows 0: a Linear whose output reaches nothing (live_layers, HEAD)."""
    if kind not in TOWERS:
        return None
    v = r.child(vc, kind, prefix="vision_config.")
    proj = projector(mt, r, v, *widths)  # reads no key for a wrapper it does not list
    if proj is None:
        return None
    ckpt = kind not in UNCHECKPOINTED
    tower: list[tuple[int, int, int, str, str, int, bool]] = []
    for count, i, o, role, name in TOWERS[kind](v, kind):
        live = 0 if role == HEAD else live_layers(r, count) if role in LAYER_ROLES else count
        tower += ([(live, i, o, role, name, rows[0], ckpt)] if live else []) + (
            [(count - live, i, o, role, name, 0, ckpt)] if live < count else [])
    return tuple(tower) + tuple((c, i, o, PROJECTOR_ROLE, name, rows[1], False) for c, i, o, _, name in proj)


def layer_count(linears: tuple[tuple[int, int, int, str, str, int, bool], ...] | None) -> int:
    """The tower's layers, each with one q (or fused qkv) Linear; 0 where its Linears are not itemised."""
    return sum(x[0] for x in linears or () if x[3] in ("q", "qkv"))
