"""DeepSeek's multimodal wrappers with more than one vision path: Janus (an understanding tower plus a VQ-VAE image
generator with its own embedding, aligner and head) and DeepSeek-VL hybrid (a SigLIP tower plus a high-resolution
SAM tower).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.arch import Arch
from ..config.reader import Reader
from ..graph.parts import Part, linear
from .assembly import TextReader, Wrapper
from .vision_language import attach
from .vision_towers import sam_encoder, sam_neck, tower_kind, vision_tower, vision_transient, vit_layer
from .vision_wrappers import tower_part, vision_reader, wrapper_parts


def resnet_block(c_in: int, c_out: int) -> int:
    """modeling_janus.JanusVQVAEResnetBlock: GroupNorm, 3x3 conv, GroupNorm, 3x3 conv (biases), and a 1x1
    nin_shortcut when the width changes."""
    skip = linear(c_in, c_out, True) if c_in != c_out else 0
    return 2 * c_in + 9 * c_in * c_out + c_out + 2 * c_out + 9 * c_out * c_out + c_out + skip


def attn_block(c: int) -> int:
    """modeling_janus.JanusVQVAEAttnBlock: GroupNorm and four biased 1x1 convs (q, k, v, proj_out)."""
    return 2 * c + 4 * linear(c, c, True)


def vq_encoder(in_channels: int, base: int, mult: list[int], blocks: int, attention: list[bool]) -> tuple[int, int]:
    """(parameters, output channels) of a VQGAN encoder up to its mid block and GroupNorm (modeling_janus.
    JanusVQVAEEncoder; modeling_apertus1p5.Apertus1p5VisionTokenizerEncoder alike): conv_in (3x3, bias), per
    channel_multiplier level num_res_blocks ResNet blocks, each followed by an attention block where `attention`
    says, a stride-2 3x3 conv between levels, the mid block (two ResNet blocks around an attention block) and a
    GroupNorm; conv_out is the caller's."""
    enc, c = linear(9 * in_channels, base, True), base
    for i, m in enumerate(mult):
        for _ in range(blocks):
            enc += resnet_block(c, base * m) + (attn_block(base * m) if attention[i] else 0)
            c = base * m
        enc += linear(9 * c, c, True) if i != len(mult) - 1 else 0
    return enc + 2 * resnet_block(c, c) + attn_block(c) + 2 * c, c


def vqvae(q: Reader) -> int:
    """modeling_janus.JanusVQVAE: the encoder (vq_encoder with attention blocks at the last level; conv_out to
    latent_channels, twice when double_latent), the codebook (num_embeddings x embed_dim), quant_conv /
    post_quant_conv (1x1) and the decoder (the mirror image with num_res_blocks + 1 blocks per level and
    upsampling convs)."""
    base, mult = q.int("base_channels"), q.list("channel_multiplier", int, length=1) or [1, 1, 2, 2, 4]
    blocks, lat, dim = q.int("num_res_blocks"), q.int("latent_channels"), q.int("embed_dim")
    levels = len(mult)
    mid = 2 * resnet_block(base * mult[-1], base * mult[-1]) + attn_block(base * mult[-1])
    enc, c = vq_encoder(q.int("in_channels", 3), base, mult, blocks, [i == levels - 1 for i in range(levels)])
    enc += linear(9 * c, (2 if q.flag("double_latent", False) else 1) * lat, True)
    dec = linear(9 * lat, c, True) + mid
    for i in reversed(range(levels)):
        for _ in range(blocks + 1):
            dec += resnet_block(c, base * mult[i]) + (attn_block(base * mult[i]) if i == levels - 1 else 0)
            c = base * mult[i]
        dec += linear(9 * c, c, True) if i != 0 else 0
    dec += 2 * c + linear(9 * c, q.int("out_channels", 3), True)
    return enc + q.int("num_embeddings") * dim + linear(lat, dim, True) + linear(dim, lat, True) + dec


def janus(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_janus.JanusForConditionalGeneration: JanusVisionModel (patch conv with bias, (image/patch)^2
    positions, LayerNorm layers with q/k/v (attention_bias), a biased projection_layer, q/k LayerNorms
    (use_qk_norm), fc1/fc2 of hidden x mlp_ratio; post_layernorm), the aligner (fc1 to projection_dim, depth - 1
    square Linears, biases), the VQ-VAE, generation_embeddings (num_embeddings x embed_dim), generation_aligner (fc1
    embed_dim -> projection_dim, num_hidden_layers - 1 square Linears), generation_head (proj_out
    image_token_embed_dim -> projection_dim, vision_head -> num_embeddings, biases), the text model and an LM head
    tied by the top-level tie_word_embeddings."""
    text, r, _ = wrapper_parts(cfg, model, "janus", read_text)
    v = vision_reader(r, cfg, "janus_vision_model")
    h, n, p, size = v.int("hidden_size"), v.int("num_hidden_layers"), v.int("patch_size"), v.int("image_size")
    inter = int(h * v.number("mlp_ratio", 4.0, high=64.0))
    patches = (size // p) ** 2
    qk = 4 * h if v.flag("use_qk_norm", False) else 0
    layer = vit_layer(h, inter, bias=v.flag("attention_bias", True), o_bias=True, mlp_bias=True, extra=qk)
    params = v.int("num_channels", 3) * p * p * h + h + patches * h + n * layer + 2 * h
    tower = tower_part(params, n, n * (4 * h * h + 2 * h * inter))
    pd = v.int("projection_dim")
    aligner = linear(h, pd, True) + (v.int("depth", 2) - 1) * linear(pd, pd, True)
    proj = Part("Projector", "MLP aligner", aligner, matmul=aligner)
    q = vision_reader(r, cfg, "janus_vqgan", "vq_config")
    codes, dim, qpd = q.int("num_embeddings"), q.int("embed_dim"), q.int("projection_dim")
    gen = (codes * dim + linear(dim, qpd, True) + (q.int("num_hidden_layers", 2) - 1) * linear(qpd, qpd, True)
           + linear(q.int("image_token_embed_dim"), qpd, True) + linear(qpd, codes, True))
    vq = Part("VQ_VAE", "VQ-VAE image tokenizer", vqvae(q))
    head = Part("Generation_Head", "Image generation embedding, aligner and head", gen, matmul=gen - codes * dim)
    return attach(text, cfg, r, (tower, proj, vq, head), tokens=v.int("num_image_tokens", patches),
                  act=patches * n * (8 * h + 2 * inter), transient=patches * (4 * h + inter),
                  tie=r.flag("tie_word_embeddings", True))


def deepseek_vl_hybrid(cfg: Mapping[str, Any], model: str, read_text: TextReader) -> Arch:
    """modeling_deepseek_vl_hybrid.DeepseekVLHybridForConditionalGeneration: high_res_vision_model (a SAM vision
    model of high_res_vision_config), high_res_vision_neck (another SAM neck), high_res_vision_proj (3x3 stride-2
    convs output_channels -> 2x -> 4x, no bias), high_res_vision_alpha (one scalar), vision_model (SigLIP), the
    aligner (vision_proj and high_res_vision_proj each to half the text width, proj text square, biases), the text
    model and an LM head tied by the top-level tie_word_embeddings."""
    text, r, _ = wrapper_parts(cfg, model, "deepseek_vl_hybrid", read_text)
    hv = vision_reader(r, cfg, "sam_vision_model", "high_res_vision_config")
    sam, sn, sh, smlp, grid = sam_encoder(hv)
    oc = hv.int("output_channels", 256)
    sam += sam_neck(sh, oc) + 9 * oc * 2 * oc + 9 * 2 * oc * 4 * oc + 1
    high = tower_part(sam, sn, sn * (4 * sh * sh + 2 * sh * smlp), "High_Res_Vision_Tower", "SAM vision transformer")
    vc = cfg.get("vision_config") or {}
    tower, patches, vh, per_patch = vision_tower(vc, r, tower_kind("deepseek_vl_hybrid", vc) or "siglip_vision_model")
    th = text.spec.hidden
    aligner = linear(vh, th // 2, True) + linear(4 * oc, th // 2, True) + linear(th, th, True)
    proj = Part("Projector", "Hybrid aligner", aligner, matmul=aligner)
    layers = max(1, tower.matmul // max(1, 12 * vh * vh))
    return attach(text, cfg, r, (high, tower, proj), tokens=patches,
                  act=patches * per_patch * layers + grid * grid * sn * (8 * sh + 2 * smlp),
                  transient=max(vision_transient(patches, per_patch, vh), grid * grid * (4 * sh + smlp)),
                  tie=r.flag("tie_word_embeddings", True))


WRAPPERS: dict[str, Wrapper] = {"janus": janus, "deepseek_vl_hybrid": deepseek_vl_hybrid}
