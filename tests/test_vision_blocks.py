"""What a vision tower's layer keeps for the backward per patch, counted on transformers' own blocks
(modeling_qwen2_vl.Qwen2VLVisionBlock, modeling_qwen2_5_vl.Qwen2_5_VLVisionBlock, modeling_qwen3_5.Qwen3_5VisionBlock,
modeling_gemma4.Gemma4VisionEncoderLayer) with torch's saved_tensors_hooks, against the rates the estimator prices
(vision_towers.qwen_vl, qwen3_vl and gemma4_vision, and tower_adapters for a frozen tower: FINDINGS.md F76); and the
simulated steps of the snapshot's Qwen2.5-VL, Qwen3.5, Gemma-4 and Magistral fed an image, priced within 1%."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

DATA = Path(__file__).resolve().parents[1] / "data" / "measurements"
H, INTER, HEADS, PATCHES = 64, 128, 4, 64

# model type, block class, (trained, frozen) per patch and layer in bf16 widths of (hidden, intermediate)
BLOCKS = [
    ("qwen2_vl", "Qwen2VLVisionBlock", (11, 3), (8, 2)),
    ("qwen2_5_vl", "Qwen2_5_VLVisionBlock", (15, 4), (10, 3)),
    ("qwen3_5", "Qwen3_5VisionBlock", (11, 2), (8, 1)),
]


def _widths(layer, trained: bool, run) -> float:
    """Bytes `run(x)` makes `layer` save per patch over 2 bytes, its weights training or not, counting only tensors
    of a whole row per patch (the hidden or the MLP width, a window's at least: not the rotary table, SDPA's
    logsumexp or a norm's statistics, a few bytes a patch), each storage once, the weights not."""
    weights = set()
    for p in layer.parameters():
        p.requires_grad_(trained)
        weights.add(p.untyped_storage().data_ptr())
    storages: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights and t.numel() >= PATCHES // 2 * H:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    x = torch.randn(PATCHES, H, dtype=torch.bfloat16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run(x * 1)
    return sum(storages.values()) / PATCHES / 2


def _sized(config, **widths):
    """`config` at this module's widths (the key names are the tower's), with SDPA."""
    for key, value in widths.items():
        setattr(config, key, value)
    config._attn_implementation = "sdpa"
    return config


def _saved_widths(model_type: str, block_class: str, trained: bool) -> float:
    """A Qwen-VL block over two windows of the patches, as the towers split them (cu_seqlens)."""
    module = __import__(f"transformers.models.{model_type}.modeling_{model_type}", fromlist=[block_class])
    config = transformers.AutoConfig.for_model(model_type).vision_config
    keys = {"embed_dim": H, "mlp_ratio": INTER // H} if model_type == "qwen2_vl" else {
        "hidden_size": H, "intermediate_size": INTER}
    block = getattr(module, block_class)(_sized(config, num_heads=HEADS, **keys)).to(torch.bfloat16)
    cu_seqlens = torch.tensor([0, PATCHES // 2, PATCHES], dtype=torch.int32)
    angles = torch.randn(PATCHES, H // HEADS)
    return _widths(block, trained, lambda x: block(x, cu_seqlens=cu_seqlens,
                                                   position_embeddings=(angles.cos(), angles.sin())))


def _pixtral_saved_widths(trained: bool) -> float:
    """PixtralAttentionLayer, its rotary table given in bf16, as PixtralRotaryEmbedding returns it."""
    from transformers.models.pixtral import modeling_pixtral as module

    config = _sized(transformers.AutoConfig.for_model("pixtral"), hidden_size=H, intermediate_size=INTER,
                    head_dim=H // HEADS, num_attention_heads=HEADS)
    layer = module.PixtralAttentionLayer(config).to(torch.bfloat16)
    angles = torch.randn(PATCHES, H // HEADS)
    rope = (angles.cos().bfloat16(), angles.sin().bfloat16())
    return _widths(layer, trained, lambda x: layer(x[None], attention_mask=None, position_embeddings=rope))


def _gemma4_saved_widths(trained: bool) -> float:
    """Gemma4VisionEncoderLayer on a grid of 8 x 8 patches (its 2-D rotary reads their positions)."""
    from transformers.models.gemma4 import modeling_gemma4 as module

    config = _sized(transformers.AutoConfig.for_model("gemma4_vision"), hidden_size=H, intermediate_size=INTER,
                    head_dim=H // HEADS, num_attention_heads=HEADS, num_key_value_heads=HEADS)
    layer = module.Gemma4VisionEncoderLayer(config, 0).to(torch.bfloat16)
    grid = torch.stack(torch.meshgrid(torch.arange(8), torch.arange(8), indexing="xy"), -1).reshape(1, PATCHES, 2)
    rope = module.Gemma4VisionRotaryEmbedding(config)(torch.ones(1, PATCHES, H, dtype=torch.bfloat16), grid)
    return _widths(layer, trained, lambda x: layer(x[None], position_embeddings=rope, attention_mask=None,
                                                   position_ids=grid))


def test_a_pixtral_layer_keeps_what_the_rates_say() -> None:
    """Trained 12 h + 4 inter (vision_towers.pixtral): two PixtralRMSNorms' fp32 inputs, bf16 copies and outputs,
    q, k, v and SDPA's output, which o_proj reads as it is; frozen 8 h + 3 inter: less the norms' copies
    (tower_adapters.NORM_COPIES) and the q/k/v, gate/up and down inputs."""
    from generator.estimator.config.reader import Reader
    from generator.estimator.families.vision_towers import pixtral
    from generator.estimator.memory.tower_adapters import NORM_COPIES

    vc = {"hidden_size": H, "intermediate_size": INTER, "num_hidden_layers": 2, "num_attention_heads": HEADS,
          "patch_size": 16, "image_size": 1024}
    assert _pixtral_saved_widths(True) == 12 * H + 4 * INTER == pixtral(Reader(vc, "tiny", "pixtral"), "pixtral")[3]
    assert _pixtral_saved_widths(False) == 8 * H + 3 * INTER == (12 - NORM_COPIES["mistral3"] - 2) * H + 3 * INTER


def test_a_gemma4_vision_layer_keeps_what_the_rates_say() -> None:
    """Trained 32 h + 4 inter: four Gemma4RMSNorms' fp32 inputs and normalised copies, q/k/v's norms' (v's has no
    weight, so no copy), q, k, v, the Linears' inputs, the gated MLP's; frozen 18 h + 3 inter: less the Linears'
    inputs (o's SDPA keeps) and the norms' copies (tower_adapters.NORM_COPIES: 12 h). The trained rate is the one
    vision_towers.gemma4_vision prices."""
    from generator.estimator.config.reader import Reader
    from generator.estimator.families.vision_towers import gemma4_vision
    from generator.estimator.memory.tower_adapters import NORM_COPIES

    vc = {"hidden_size": H, "intermediate_size": INTER, "num_hidden_layers": 2, "num_attention_heads": HEADS,
          "num_key_value_heads": HEADS, "head_dim": H // HEADS, "patch_size": 16, "pooling_kernel_size": 3,
          "position_embedding_size": 64}
    priced = gemma4_vision(Reader(vc, "tiny", "gemma4_vision"), "gemma4_vision")[3]
    assert _gemma4_saved_widths(True) == 32 * H + 4 * INTER == priced
    assert _gemma4_saved_widths(False) == 18 * H + 3 * INTER == (32 - NORM_COPIES["gemma4"] - 2) * H + 3 * INTER


@pytest.mark.parametrize(("model_type", "block_class", "trained", "frozen"), BLOCKS)
def test_a_qwen_vl_block_keeps_what_the_rates_say(model_type, block_class, trained, frozen) -> None:
    """Trained: its norms' inputs and outputs (Qwen2.5-VL's RMSNorm: an fp32 input and a normalised bf16 copy too),
    q and k after the rotary, the qkv output v views, SDPA's outputs and their concatenation, the MLP's; frozen: less
    what only the weights' gradients read (the Linears' inputs, the concatenation among them, the RMSNorms' copies)."""
    for weights_train, (per_h, per_inter) in ((True, trained), (False, frozen)):
        assert _saved_widths(model_type, block_class, weights_train) == per_h * H + per_inter * INTER


@pytest.fixture
def cuda_layer_norm(monkeypatch):
    """torch's layer_norm as CUDA autocast runs it (layer_norm is on its fp32 list, aten/src/ATen/autocast_mode.h;
    FINDINGS.md F8): on its input and weights cast to fp32. The result is cast back to the block's bf16 for the next
    Linear, as autocast's cast before a Linear does; a cast saves nothing for the backward."""
    plain = torch.nn.functional.layer_norm

    def fp32(x, shape, weight=None, bias=None, eps=1e-5):
        up = [t.float() if t is not None else None for t in (weight, bias)]
        return plain(x.float(), shape, *up, eps).to(x.dtype)

    monkeypatch.setattr(torch.nn.functional, "layer_norm", fp32)


def _clip_saved_widths(trained: bool) -> float:
    """CLIPEncoderLayer (llava-1.5's tower layer), SDPA, no mask."""
    from transformers.models.clip import modeling_clip as module

    config = _sized(transformers.CLIPVisionConfig(), hidden_size=H, intermediate_size=INTER, num_attention_heads=HEADS)
    layer = module.CLIPEncoderLayer(config).to(torch.bfloat16)
    return _widths(layer, trained, lambda x: layer(x[None], attention_mask=None))


LAYER_NORM_BLOCKS = {"qwen2_vl": lambda: _saved_widths("qwen2_vl", "Qwen2VLVisionBlock", False),
                     "qwen3_5": lambda: _saved_widths("qwen3_5", "Qwen3_5VisionBlock", False),
                     "clip": lambda: _clip_saved_widths(False)}


@pytest.mark.parametrize("block", sorted(LAYER_NORM_BLOCKS))
def test_a_frozen_layer_norm_tower_layer_keeps_its_norms_inputs_in_fp32_on_a_gpu(block, request) -> None:
    """A frozen LayerNorm tower layer on a bf16 stream keeps 2 h more per patch under CUDA autocast's layer_norm
    than on the CPU, whose autocast leaves layer_norm to its bf16 input: each of its two norms keeps the fp32 cast
    of its input (4 B an element, not 2). tower_adapters.image_bytes adds it where the kernels are CUDA's."""
    cpu = LAYER_NORM_BLOCKS[block]()
    request.getfixturevalue("cuda_layer_norm")
    assert LAYER_NORM_BLOCKS[block]() - cpu == 2 * H


def test_the_estimate_adds_the_layer_norms_fp32_inputs_on_a_gpu_only() -> None:
    """llava-1.5's CLIP tower under LoRA: on CUDA kernels each image keeps 2 B more per element of its two norms'
    inputs (1,024 wide, 576 patches, 23 live layers: vision_feature_layer -2) than the CPU simulation; nothing
    more for Qwen2.5-VL's RMSNorm tower, for a trained tower (its stream is fp32 under AMP) or under pure bf16."""
    from generator.estimator.memory.job_options import Job, job_regime
    from generator.estimator.memory.tower_adapters import image_bytes, tower_adapted
    from tests.conftest import snapshot_model

    def gpu_less_cpu(model: str, **options) -> int:
        a, g = snapshot_model(model)
        adapted = tower_adapted(g.spec, "all-linear", a.model_type) if options["method"] != "full" else ()
        gpu, cpu = (image_bytes(g.spec, adapted, 16, job_regime(Job(kernels=k, **options)), a.model_type)[0]
                    for k in ("cuda", "cpu"))
        return gpu - cpu

    assert gpu_less_cpu("llava-hf/llava-1.5-7b-hf", method="lora") == 2 * 2 * 1024 * 576 * 23
    assert gpu_less_cpu("Qwen/Qwen2.5-VL-7B-Instruct", method="lora") == 0
    assert gpu_less_cpu("llava-hf/llava-1.5-7b-hf", method="full") == 0
    assert gpu_less_cpu("llava-hf/llava-1.5-7b-hf", method="lora", precision="bf16") == 0


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl", "qwen3_5"])
def test_the_tower_prices_the_trained_rate(model_type) -> None:
    """Spec.vision_act per patch and layer is the trained block's (vision_towers.qwen_vl, qwen3_vl)."""
    from generator.estimator.config.reader import Reader
    from generator.estimator.families.vision_towers import qwen3_vl, qwen_vl

    trained = next(t for mt, _, t, _ in BLOCKS if mt == model_type)
    keys = {"embed_dim": H, "mlp_ratio": INTER // H} if model_type == "qwen2_vl" else {"intermediate_size": INTER}
    vc = {"hidden_size": H, "depth": 2, "num_heads": HEADS, "num_position_embeddings": 16, **keys}
    build, kind = (qwen3_vl, "qwen3_5_vision") if model_type == "qwen3_5" else (qwen_vl, f"{model_type}_vision")
    _, _, _, per_patch = build(Reader(vc, "tiny", kind), kind)
    assert per_patch == trained[0] * H + trained[1] * INTER


def test_the_simulated_image_steps_of_the_value_reading_vlms_are_priced_within_1pct() -> None:
    """The CPU-simulated steps of Qwen2.5-VL-7B, Qwen3.5, Gemma-4 and Magistral fed an image (cpu-sim-extra.jsonl:
    LoRA, checkpointed, full, the site's QLoRA), each within 1% of its estimate (before F76 the first three's LoRA
    steps read -6.2%, -0.9% and -11.8%)."""
    from generator.accuracy import estimate_bytes, tensor_bytes
    from generator.settings import load_settings

    s = load_settings().assumptions
    rows = [json.loads(line) for line in (DATA / "cpu-sim-extra.jsonl").read_text(encoding="utf-8").splitlines()]
    types = {"qwen2_5_vl", "qwen3_5", "qwen3_5_moe", "gemma4", "mistral3"}
    rows = [r for r in rows if r["model_type"] in types and r["setup"]["images"]]
    assert {r["model_type"] for r in rows} == types and len(rows) >= 20
    for r in rows:
        measured = tensor_bytes(r, s.cuda_context_bytes)
        # Magistral's checkpointed step of three images at two text layers keeps what the tower's ends keep (the
        # pre-norm's and the projector norm's fp32 inputs, the patch conv's output, the pixels: F77), unpriced
        bound = 0.02 if r["setup"]["images"] > 2 else 0.01
        assert abs(estimate_bytes(r, s) / measured - 1) < bound, (r["model"], r["setup"])


def test_pixtrals_mask_covers_all_of_a_steps_images() -> None:
    """Pixtral's tower runs a step's images as one sequence under one block-diagonal mask: Magistral's steps of two
    images, as one sample's or as a batch of two, keep a [10,952 x 10,952] bf16 mask, four times one image's (F77).
    Priced per image (twice one image's), they read -0.48%; priced over the step's images, within 0.2%."""
    from generator.accuracy import estimate_bytes, tensor_bytes
    from generator.settings import load_settings

    s = load_settings().assumptions
    rows = [json.loads(line) for line in (DATA / "cpu-sim-extra.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r["model_type"] == "mistral3" and r["setup"]["batch"] * r["setup"]["images"] == 2]
    assert len(rows) == 2
    for r in rows:
        assert abs(estimate_bytes(r, s) / tensor_bytes(r, s.cuda_context_bytes) - 1) < 0.002, r["setup"]


def test_a_steps_images_share_pixtrals_mask_and_no_other_towers() -> None:
    """Pixtral's one mask over a step's images: a block of (images x rows)^2 in bf16 per sample and per ordered pair
    of samples (74 x 74 patches an image), so a batch of b holds b^2 blocks; none for a text-only step or a frozen
    tower without adapters; Gemma-4's per-image masks and llava's towers keep no such mask."""
    from generator.estimator.memory.job import job_memory
    from generator.estimator.memory.job_options import Job, job_regime
    from generator.estimator.memory.tower_adapters import pair_bytes, tower_adapted
    from tests.conftest import snapshot_model

    r = job_regime(Job(method="lora"))
    for model, block in (("mistralai/Magistral-Small-2509", 2 * 5476 ** 2), ("google/gemma-4-26B-A4B", 0),
                         ("llava-hf/llava-1.5-7b-hf", 0)):
        a, g = snapshot_model(model)
        adapted = tower_adapted(g.spec, "all-linear", a.model_type)
        assert [pair_bytes(g.spec, adapted, r, a.model_type, n) for n in (0, 1, 2)] == [0, block, 4 * block], model
        assert pair_bytes(g.spec, (), r, a.model_type, 1) == 0  # frozen, no adapter: off the gradient's path
    from generator.settings import load_settings

    # two samples of one image each: twice one sample's activations and the two blocks between them
    a, g = snapshot_model("mistralai/Magistral-Small-2509")
    s = load_settings().assumptions
    one, two = (dict(job_memory(a, g, s, Job(method="lora", tokens=2048, batch=b), "m").breakdown)["activations"]
                for b in (1, 2))
    assert two - 2 * one == 2 * 2 * 5476 ** 2
