"""HF generate's phases for one inference job (the CLI's --method inference, the measurement harness's serving
runs): one prefill of all prompts, then decode through the KV cache (FINDINGS.md F7, F19). job.py prices training;
the site's serving figure is a chunked-prefill server instead (profile.serve_profile)."""

from __future__ import annotations

from ..config.arch import Arch
from ..graph.nodes import Graph
from ..graph.parts import Block
from ..inputs import Assumptions
from .activations import RELU_SQUARED, mlp_act
from .attention import generate_scores_bytes
from .job_options import Job, legacy_cache, runs_torch_scan
from .math_sdpa import math_scores_bytes
from .parallel import Phase
from .profile import encoder_tokens, kv_bytes_of_block
from .scan_prefill import prefill_scan_bytes
from .storage import dequant_transient_bytes, stored_mats, weight_bytes
from .tower_adapters import step_mask_elements

# MLP-wide tensors a plain MLP's activation holds at once in a forward without grad, where more than the two (its
# input and output) Part.transient counts, each a temporary of transformers' activations.py alive while the next is
# made: relu² (ReLUSquaredActivation: the input, relu's and square's outputs, F9); NewGELUActivation (0.5 x input,
# pow(input, 3) and 0.044715 x it beside the input, F80); FastGELUActivation (0.5 x input, input x 0.798,
# 0.044715 x input and its product with the input); QuickGELUActivation (1.702 x input and its sigmoid). Read off
# distilgpt2's generate with each activation_function (cpu-sim-extra.jsonl).
GENERATE_MLP_WIDE = {RELU_SQUARED: 3, "gelu_new": 4, "gelu_fast": 5, "quick_gelu": 3}


def mlp_transient(a: Arch, b: Block) -> int:
    """Elements per token a layer's largest part holds at once in a forward without grad (Part.transient), or a
    plain MLP's activation at its widest (GENERATE_MLP_WIDE; a gated MLP's three are in Part.transient already)."""
    wide = GENERATE_MLP_WIDE.get(mlp_act(a))
    if wide is None:
        return b.transient
    return max([b.transient] + [wide * (p.act // 2) for p in b.parts if p.type == "MLP"])


def generate_phases(a: Arch, g: Graph, s: Assumptions, job: Job) -> list[Phase]:
    """HF generate (F7): prefill of all B prompts in one forward, then decode. Prefill: weights + the prompts'
    KV cache + per prompt token c x (the largest part's working set + 4 hidden-wide tensors: inputs_embeds,
    the layer input, the post-attention residual, the normed input) [+ eager scores of one layer], or a recurrent
    mixer's torch path at its widest (scan_prefill, F79) beside three of them, whichever is larger. Decode:
    weights + the KV cache at prompt + new tokens + the next-token logits (bf16 + transformers' fp32 copy); with
    transformers' tuple caches (job_options.legacy_cache) the previous step's cache beside it. A vision-language
    model fed images (one per prompt unless job.images says) runs its tower over all of them first: tower_phase."""
    spec = g.spec
    c = 4 if job.precision == "fp32" else 2
    B, T, N = job.batch, job.tokens, job.new_tokens
    mats = stored_mats(a, g, job.storage)
    weights = weight_bytes(g, job.storage, job.double_quant, mats)
    enc = encoder_tokens(spec, T)

    def kv(tokens: int) -> int:
        per = sum(kv_bytes_of_block(b, s, tokens, enc) for b in spec.blocks if b.stack != "encoder")
        return per * c // s.kv_bytes  # the cache takes the compute dtype

    transient = max((mlp_transient(a, b) for b in spec.blocks), default=0) + 4 * spec.hidden
    acts = T * c * transient
    acts += generate_scores_bytes(a, g, T, c) if job.attention == "eager" else \
        math_scores_bytes(a, g, T, job.kernels == "cpu")
    # a recurrent mixer's torch path (scan_prefill), beside the embeddings, its input and the normed input
    torch_path = runs_torch_scan(job)
    scan = max((prefill_scan_bytes(b, T, c, torch_path) for b in spec.blocks), default=0)
    acts = max(acts, scan + T * c * 3 * spec.hidden) if scan else acts
    dequant = dequant_transient_bytes(g, job.storage, c, mats)
    images = (1 if spec.reads_images else 0) if job.images is None else job.images
    tower = [tower_phase(a, g, c, B, T, images, weights)] if images and spec.vision_transient else []
    # the images' features, held by the model's forward through the text layers: the projector's output and the
    # concatenation inputs_embeds is scattered from (modeling_llava LlavaModel.get_image_features, F78); their
    # pixels, which generate's model_kwargs hold to the end
    pixels = images * c * spec.image_pixels
    acts += images * 2 * spec.image_tokens * spec.hidden * c + pixels
    return tower + [Phase("prefill", weights=weights, kv_cache=B * kv(T), activations=B * acts, overhead_fixed=dequant),
            Phase("decode", weights=weights, logits=B * (c + 4) * spec.vocab, activations=B * pixels,
                  kv_cache=B * (kv(T + N) + (kv(T + N - 1) if N > 1 and legacy_cache(job.transformers_version)
                                             else 0)))]


def tower_phase(a: Arch, g: Graph, c: int, batch: int, tokens: int, images: int, weights: int) -> Phase:
    """The prefill's vision tower, before the text layers run: it encodes the batch's images at once (one call of
    the tower over all their patches), each holding Spec.vision_transient elements at the widest moment
    (families/tower_inference.py, FINDINGS.md F78), beside the prompts' token embeddings, which the model computes
    before it to scatter the features into (modeling_llava LlavaModel.forward: inputs_embeds, then
    get_image_features; mllama's images take no text token: its text is embedded after the tower). A
    SHARED_MASK_TOWERS tower's block-diagonal mask spans all the step's images: (images x rows)^2, each image's own
    block counted in its working set."""
    spec, step = g.spec, batch * images
    shared = step_mask_elements(spec, a.model_type, step) - step * step_mask_elements(spec, a.model_type, 1)
    embeds = batch * tokens * spec.hidden if spec.image_tokens else 0
    # an audio-language model's tower (Spec.image_tokens counts an audio clip's tokens there) runs the same way
    audio = any(p.name.startswith("Audio") for p in spec.embed) and not any("Vision" in p.name for p in spec.embed)
    return Phase(f"prefill ({'audio' if audio else 'vision'} tower)", weights=weights,
                 activations=c * (step * spec.vision_transient + shared + embeds))
