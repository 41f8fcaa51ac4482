"""Memory: bytes to train (full, LoRA) and to serve per stage of the layer stack, as stages.Profile (splits.py cuts it).

Formulas (per parameter P and per token; inputs.Assumptions for every byte size and its source; what is live at
each peak was read off CPU-simulated real steps, data/measurements/FINDINGS.md F1-F7):
- full AMP, three candidate peaks (F2, F5, F6): the loss backward = (4 master + 8 AdamW) P + 2 bytes x matmul
  weights (autocast copies) + activations, with no gradient yet (zero_grad(set_to_none=True)); the end of the
  backward = (4 + 4 + 8) P + 2 x 4 x vocab x embed_dim when the embedding is tied (two gradients and their sum);
  the AdamW step = (4 + 4 + 8 + 4 foreach temporary) P. Peak = the largest. Every expert of an MoE is held
  (and stepped); only the routed top-k save activations per token.
- LoRA: 2 P (frozen bf16 base) + adapters at 4 + 8 + 2 (autocast copy) bytes + activations with frozen
  Linears saving no input (F4) + each adapter's bf16 input copy and rank output.
- activations per layer and token (F3): norms (fp32 input, rsqrt or mean/rstd, the normalised output when the
  weight trains, one bf16 cast per Linear reading it under AMP), attention (rope'd q and k once, v, SDPA output,
  fp32 LSE; no score matrix: SDPA, Korthikanti et al. 2022 arXiv:2205.05198 Table 2 less the score terms),
  the MLP (gate, act, up, product; frozen: no product); the loss adds `logits_bytes` (12) per logit (F1).
  VLMs add one image's vision-tower activations per sample.
- serving (the site's figure): a chunked-prefill server (vLLM): weights (bf16, or the checkpoint's quantised
  storage) + the peak it measures at startup (one step's forward or its sampler's run: vllm_server.py) + per
  sequence: per layer min(tokens, window) x its KV elements x 2 bytes (GQA/MQA K and V heads, MLA's latent),
  recurrent state (SSM, linear attention). HF generate's batched prefill (F7) is job.py's `--method inference`.
  Encoders serve a batch of sequences at the context with no cache; encoder-decoders hold the encoder output and
  both KV caches.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..config.arch import Arch
from ..graph.nodes import Graph, tied_weight_params, tower_parts
from ..graph.parts import Block, Part, Spec
from ..inputs import Assumptions, Card
from .activations import forward_locals_bytes, regime
from .attention import default_attention, eager_forward_scores, eager_layer_terms, head_params
from .experts import cast_matmul, held_transient_bytes
from .layer_terms import (
    adapter_params,
    distinct_values,
    eager_backward_values,
    end_terms,
    layer_index,
    layer_values,
    regime_terms,
    skipped_layers,
)
from .lora import all_linear_roles
from .math_sdpa import math_backward_bytes, math_layer_terms, math_sdpa
from .serve_weights import serve_weight_bytes
from .stages import Branch, Profile, ServingStages
from .tower_adapters import (
    image_bytes,
    image_regime,
    pair_bytes,
    tower_adapted,
    tower_lora_params,
    tower_trained_params,
    unreached_weights,
)
from .vllm_server import ServerDefaults, reference_server, residual_bytes, startup_bytes, startup_in_16_bits


def _ends(g: Graph) -> tuple[list[Part], list[Part]]:
    return list(g.spec.embed), list(g.spec.head)


def train_profile(a: Arch, g: Graph, s: Assumptions, tokens: int, method: str, rank: int,
                  memo: dict | None = None) -> Profile:
    """The site's jobs: full AMP AdamW (foreach) and LoRA on every Linear of a bf16 base, AMP, AdamW. Every layer
    term is worked out once per distinct layer (Spec.distinct_layers) and kept so, with the layers each stands
    for (the Profile lays them out per layer only for a split); `memo`: the estimate's table of them, shared
    with its jobs (layer_terms.regime_terms)."""
    spec = g.spec
    distinct = spec.distinct_layers
    counts = [n for _, n in distinct]
    embed, head = _ends(g)
    # one image per sample where the model reads any (job.py's default): gemma-3's block mask in every layer
    images = 1 if spec.reads_images else 0
    r = image_regime(a, regime(method, "amp"), images)
    # the adapters peft puts on the towers' Linears (the site's LoRA is all-linear)
    adapted = tower_adapted(spec, "all-linear", a.model_type) if method != "full" else ()
    adam = s.master_weight_bytes + s.optimizer_state_bytes
    # LoRA on every Linear, + adapted expert tensors' effective weights, kept per layer (job.py)
    roles = None if method == "full" else all_linear_roles(a)
    terms_rank = 0 if method == "full" else rank
    terms = regime_terms(a, g, r, terms_rank, roles, memo)
    tied_params = tied_weight_params(a)  # Profile.tied_copy's weight
    if method == "full":
        copy = s.autocast_copy_bytes

        def static(params: int, matmul: int) -> int:  # the loss backward: no gradient exists yet (F2)
            return adam * params + copy * matmul

        def late(params: int, temp: int) -> int:  # the end of the backward (temp 0) and the AdamW step
            return (adam + s.grad_bytes + temp) * params

        ends = [sum(p.params for p in part) for part in (embed, head)]
        step = s.foreach_temp_bytes
        layer_static = [static(b.params, cast_matmul(a, b)) for b, _ in distinct]
        embed_static, head_static = (static(n, sum(p.matmul for p in part)) for n, part in zip(ends, (embed, head), strict=True))
        layer_step = [late(b.params, step) for b, _ in distinct]
        layer_eob: list[int] = [late(b.params, 0) for b, _ in distinct]
        embed_step, head_step = late(ends[0], step), late(ends[1], step)
        embed_eob, head_eob = late(ends[0], 0), late(ends[1], 0)
        # the towers' layers above the one the projector reads get no gradient, state or autocast copy (F73)
        dead = unreached_weights(spec)
        embed_static -= (s.optimizer_state_bytes + copy) * dead
        embed_step -= (s.optimizer_state_bytes + s.grad_bytes + step) * dead
        embed_eob -= (s.optimizer_state_bytes + s.grad_bytes) * dead
        # F6: a tied weight's two gradients (embedding, LM head) and their sum are live together.
        tied = 2 * s.grad_bytes * tied_params
        # a pipeline's last stage: the tied weight's own copy, trained (its autocast copy is the head's matmul's)
        tied_copy = (static(tied_params, 0), late(tied_params, step), late(tied_params, 0))
        embed_act = s.master_weight_bytes * spec.hidden
    else:
        adapter_rate = adam + s.autocast_copy_bytes  # fp32 adapter, AdamW state, its bf16 autocast copy
        adapters = adapter_params(spec, rank, roles, memo)
        layer_static = [s.base_weight_bytes * b.params + adapter_rate * n + e
                        for (b, _), n, e in zip(distinct, adapters, terms.experts, strict=True)]
        # the towers' adapters (tower_adapters.py) count with the embedding side's weights; those above the layer
        # the projector reads get no gradient, so no state or autocast copy
        trained, made = tower_trained_params(adapted, rank), tower_lora_params(adapted, rank)
        embed_static = s.base_weight_bytes * sum(p.params for p in embed) + adapter_rate * trained \
            + s.master_weight_bytes * (made - trained)
        head_static = s.base_weight_bytes * sum(p.params for p in head)
        # the adapters' AdamW step: weights + adapters (4 + 4 + 8 + 4 foreach) B each
        late_rate = adam + s.grad_bytes + s.foreach_temp_bytes
        layer_step = [s.base_weight_bytes * b.params + late_rate * n for (b, _), n in zip(distinct, adapters, strict=True)]
        layer_eob = []
        embed_step = embed_static + (late_rate - adapter_rate) * trained
        head_step, embed_eob, head_eob, tied = head_static, 0, 0, 0
        tied_copy = (s.base_weight_bytes * tied_params, s.base_weight_bytes * tied_params, 0)  # frozen
        embed_act = -end_terms(a, g, s, r, memo, roles)[1]  # a frozen embedding saves nothing (F4), nor its norm
        grads = terms.grads
        grad_fixed, grad_token = 0, 0
        if any(t != (0, 0) for t in grads):  # the last layer of the largest transient (its latest on a tie)
            grad_fixed, grad_token = max(layer_values(spec, grads, memo)[::-1], key=lambda t: t[0] + tokens * t[1])
    embed_side, _, head_rate = end_terms(a, g, s, r, memo, roles)
    embed_act += embed_side  # the embedding dropout's mask (dropouts.DROPOUTS), Gemma-3n's AltUp
    # the fused qkv output kept by q's view (gpt2): the training forward's cache is on without checkpointing
    rates = [rate + view for rate, view in zip(terms.act, terms.views, strict=True)]
    squares = [0] * len(rates)
    windows: list[tuple[tuple[int, int, int], ...]] = [()] * len(rates)
    eager = default_attention(a)[0] == "eager"  # no SDPA in the model's class: eager keeps its scores
    # SDPA's math kernel: the fp32 score gradients of its last attention's backward (job.py's phase "backward
    # (attention scores' gradients)"), folded into every phase here: at most the head's bytes above that job
    math_sq = math_backward_bytes(a, g, r, 1, "eager" if eager else "sdpa")[1]
    if eager or math_sdpa(a, r.cpu, True, r.trained):  # and so does SDPA's math kernel, in fp32
        scores = distinct_values(spec, lambda b: eager_layer_terms(a, b, r.compute_bytes, r.trained, r) if eager
                                 else math_layer_terms(a, b, r))
        rates = [rate + linear for rate, (linear, _) in zip(rates, scores, strict=True)]
        squares = [sq for _, sq in scores]
    else:  # SDPA handed a mask (a window at tokens >= its width) keeps it and GQA's repeated k/v (F11)
        windows = terms.windows
    if spec.no_grad:  # passes without gradients keep no scores either (layer_terms.skipped_layers)
        skip = skipped_layers(a, spec)
        rates, squares = ([0 if k else v for k, v in zip(skip, t, strict=True)] for t in (rates, squares))
        windows = [() if k else w for k, w in zip(skip, windows, strict=True)]
    # every layer runs at the job's tokens (an encoder-decoder's encoder and decoder alike)
    n = tokens
    layer_act = [n * rate + n * n * sq + sum(n * m + n * n * msq for w, m, msq in ws if n >= w)
                 for rate, sq, ws in zip(rates, squares, windows, strict=True)]
    masked: dict[int, tuple[int, int]] = {}
    for ws, count in zip(windows, counts, strict=True):
        for w, m, msq in ws:
            m0, sq0 = masked.get(w, (0, 0))
            masked[w] = (m0 + count * m, sq0 + count * msq)
    pair = pair_bytes(spec, adapted, r, a.model_type, images)  # a sample's block of Pixtral's mask, and each pair's
    vision = images * image_bytes(spec, adapted, rank, r, a.model_type)[0] + pair
    rates_sum = sum(k * rate for k, rate in zip(counts, rates, strict=True))
    backward = []  # job.py's late-backward phases, the head's tensors freed
    if method != "full" and grad_fixed:
        backward.append(Branch("backward (an adapted expert tensor's gradient)", grad_fixed, tokens * grad_token,
                               embed_act + rates_sum + grad_token))
    # the end of the forward: the last layer's adapted down projection holds its input's copies (job.py F44), or its
    # frozen routed experts their tokens' copies (F61)
    last = spec.blocks[-1] if spec.blocks and method != "full" else None
    fwd = held_transient_bytes(last, r, roles, a=a, backward=False) if last is not None else 0
    if fwd:  # beside what the model's forward still references (F58)
        fwd += forward_locals_bytes(g, r)
        backward.append(Branch("forward (the end of the last layer)", 0, tokens * fwd,
                               embed_act + rates_sum + fwd))
    # eager attention whose forward holds more at its softmax than its backward keeps (job.py F57)
    held_sq = eager_forward_scores(a, g, r, 1, False) if eager else 0
    if held_sq:
        backward.append(Branch("forward (the last attention layer's softmax)", 0, tokens * tokens * held_sq,
                               embed_act + rates_sum, held_sq))
    # eager attention's softmax backward (job.py): one branch per distinct set of its terms over the layers with
    # attention, the largest of which is the layer's, at any tokens and batch: its score gradients, its MLP's tensors
    # freed (a full fine-tune has made the head's gradients and its MLP's, whose autocast copies are freed)
    for eager_terms in sorted(set(eager_backward_values(a, g, r, terms_rank, roles, memo)) if eager else ()):
        if eager_terms.attends:
            made = s.grad_bytes * (head_params(a, g) + eager_terms.params_after) \
                - s.autocast_copy_bytes * eager_terms.matmul_after if method == "full" else 0
            backward.append(Branch("backward (attention scores' gradients)", made,
                                   tokens * eager_terms.per_token + tokens * tokens * eager_terms.per_token_sq,
                                   embed_act + rates_sum + eager_terms.per_token, eager_terms.per_token_sq))
    return Profile(method, embed_static, tuple(layer_static), head_static, tokens * embed_act + vision
                   + tokens * tokens * math_sq,
                   tuple(layer_act), tokens * head_rate, tuple(counts), layer_index(spec, memo), tuple(layer_step),
                   embed_step, head_step, tuple(layer_eob), embed_eob, head_eob, tied,
                   embed_act + rates_sum + head_rate, vision,
                   math_sq + sum(k * sq for k, sq in zip(counts, squares, strict=True)),
                   tuple((w, m, msq) for w, (m, msq) in sorted(masked.items())), tuple(backward), pair,
                   tied_copy)


def encoder_tokens(spec: Spec, tokens: int) -> int:
    """Tokens the decoder's cross-attention reads, and the encoder output one sequence keeps: one image's patches
    where the encoder's input fixes them (Spec.encoder_tokens), else an encoder-decoder's job tokens (its encoder
    and decoder both run at them); none for a decoder."""
    return spec.encoder_tokens or (tokens if spec.kind == "encoder-decoder" else 0)


def encoder_output_bytes(spec: Spec, enc_tokens: int, c: int) -> int:
    """The encoder's output (tokens x hidden) one served sequence keeps for cross-attention: an encoder-decoder's,
    through decoding; a decoder whose cross-attention reads an image (mllama, Spec.encoder_kept False) caches its
    K and V alone and drops the tower's output after prefill."""
    return enc_tokens * c * spec.hidden if spec.encoder_kept else 0


def kv_bytes_of_block(b: Block | CacheTerms, s: Assumptions, tokens: int, encoder_tokens: int = 0) -> int:
    """Cache bytes one sequence holds in this layer after `tokens` tokens: KV capped at each window,
    cross-attention KV over the encoder's tokens (s.kv_bytes an element), and fixed recurrent state (in the compute
    dtype: vLLM's mamba_cache_dtype "auto" is the model's, whatever its KV cache's)."""
    out = b.state * s.compute_bytes
    for window, kv in b.kv:
        n = encoder_tokens if window < 0 else (min(tokens, window) if window > 0 else tokens)
        out += n * kv * s.kv_bytes
    return out


def serve_profile(a: Arch, g: Graph, s: Assumptions, tokens: int, memo: dict | None = None,
                  server: ServerDefaults | None = None, float32: bool = False) -> Profile:
    """Weights + the server's startup peak, the larger of one step's forward and its sampler's run (fixed:
    vllm_server.startup_bytes) + per sequence its caches; each distinct layer worked out once (`memo`: the
    estimate's table, layer_index). `server`: the defaults priced, vllm_server.reference_server's unless named.
    `float32`: for a GPU that serves the model in float32, whose every byte the caller doubles
    (vllm_support.serving_scale): the float32 startup, halved (vllm_server.in_16_bits). An encoder serves a batch
    of sequences at the context with no cache, each with its forward and its output."""
    spec = g.spec
    c = s.compute_bytes
    embed, head = _ends(g)
    weights = serve_weight_bytes(a, s, float32)
    startup = startup_in_16_bits(spec, s, server or reference_server(s), tokens, float32)
    distinct = spec.distinct_layers
    counts, layout = tuple([n for _, n in distinct]), layer_index(spec, memo)
    layer_weights = tuple([weights(b.parts) for b, _ in distinct])
    if spec.kind == "encoder":
        # A batch of sequences at the context, no cache: each sequence holds its own working set
        # and its output (the head's logits per token, fp32).
        return Profile("serve", weights(embed), layer_weights, weights(head),
                       startup.forward_bytes + tokens * 4 * spec.logits, (0,) * len(distinct), 0, counts, layout)
    enc_tokens = encoder_tokens(spec, tokens)
    caches = tuple([0 if b.stack == "encoder" else kv_bytes_of_block(b, s, tokens, enc_tokens) for b, _ in distinct])
    enc_out = encoder_output_bytes(spec, enc_tokens, c)
    tied = s.serve_weight_bytes * tied_weight_params(a)  # Profile.tied_copy
    stages = ServingStages(*startup, residual_bytes(spec, s, server or reference_server(s), tokens),
                           weights(tower_parts(spec)))
    return Profile("serve", weights(embed) + max(startup), layer_weights, weights(head), enc_out, caches, 0, counts,
                   layout, tied_copy=(tied, 0, 0), serving=stages)


def serve_token_bytes(g: Graph, s: Assumptions, tokens: int, cache: CacheTerms | None = None) -> int:
    """The part of serve_profile(..., tokens).total(1) that depends on tokens (one sequence's caches, an encoder's
    forward and logits, an encoder-decoder's startup and encoder output; a decoder's startup, which does not, too),
    by the same formulas:
    the memory curve moves the serving peak to other token counts without rebuilding the profile.
    `cache`: cache_block(g), when the caller asks at many token counts."""
    return serve_token_curve(g, s, (tokens,), cache)[0]


def serve_token_curve(g: Graph, s: Assumptions, points: tuple[int, ...],
                      cache: CacheTerms | None = None) -> list[int]:
    """serve_token_bytes at each token count of `points`: what does not depend on tokens looked up once."""
    spec = g.spec
    cache = cache or cache_block(g)
    c, server = s.compute_bytes, reference_server(s)
    if spec.kind == "encoder":
        return [startup_bytes(spec, s, server, tokens).forward_bytes + tokens * 4 * spec.logits
                for tokens in points]
    out = []
    for tokens in points:
        enc_tokens = encoder_tokens(spec, tokens)
        out.append(max(startup_bytes(spec, s, server, tokens))
                   + encoder_output_bytes(spec, enc_tokens, c) + kv_bytes_of_block(cache, s, tokens, enc_tokens))
    return out


def cache_block(g: Graph) -> CacheTerms:
    """One block holding every cached layer's state and (window, KV) terms: kv_bytes_of_block is a sum over
    them, so this block's cache is the whole model's, in one pass over its distinct windows."""
    spec = g.spec
    kv: dict[int, int] = {}
    state, transient = 0, 0
    for b, copies in spec.distinct_layers:  # each distinct layer once, times the layers it stands for
        transient = max(transient, b.transient)
        if b.stack != "encoder":
            state += copies * b.state
            for window, n in b.kv:
                kv[window] = kv.get(window, 0) + copies * n
    return CacheTerms(state, tuple(kv.items()), transient)


class CacheTerms(NamedTuple):
    """What kv_bytes_of_block reads of a Block (state, kv), summed over the layers, and the largest layer
    transient (vllm_server.startup_bytes' width)."""
    state: int
    kv: tuple[tuple[int, int], ...]
    transient: int


def kv_bytes_per_token(a: Arch, s: Assumptions) -> int:
    """K and V for every layer at full attention, per token: 2 x kv_heads x head_dim x bytes per
    attention layer (GQA/MQA aware), kv_lora_rank + qk_rope_head_dim for MLA; windows not applied."""
    return sum(n * kv * s.kv_bytes for b, n in a.spec.distinct_layers for window, kv in b.kv if window >= 0)


def kv_bytes_per_sequence(a: Arch, s: Assumptions, tokens: int) -> int:
    """One sequence's whole cache at `tokens`: windows capped, recurrent state included."""
    enc = encoder_tokens(a.spec, tokens)
    if a.spec.kind == "encoder":
        return 0
    return sum(n * kv_bytes_of_block(b, s, tokens, enc) for b, n in a.spec.distinct_layers if b.stack != "encoder")


def state_bytes_per_sequence(a: Arch, s: Assumptions) -> int:
    """Fixed recurrent state per sequence (SSM conv + SSM state, linear-attention state), in the compute dtype
    (kv_bytes_of_block)."""
    return sum(n * b.state * s.compute_bytes for b, n in a.spec.distinct_layers)


def capacity_bytes(card: Card, s: Assumptions) -> int:
    """What one card's process can allocate: the driver-reported total less the CUDA context."""
    return card.memory_usable_bytes - s.cuda_context_bytes


def budget_bytes(card: Card, s: Assumptions) -> int:
    """What one card offers an estimate: its capacity over headroom. The headroom is the room kept for the caching
    allocator's fragmentation and the estimate's own error (FINDINGS.md F49)."""
    return int(capacity_bytes(card, s) / s.headroom)


# vLLM's share of a card by default: EngineArgs.gpu_memory_utilization = 0.90 (vllm/engine/arg_utils.py), handed to
# CacheConfig as "the fraction of GPU memory to be used for the model executor" and taken of the card's total memory
# (requested = total x utilization); weights, activations, the KV cache and the memory outside torch (the CUDA context)
# must fit in it.
ENGINE_DEFAULT_SHARE = 0.9


def engine_share(peak_bytes: int, usable_bytes: int, context_bytes: int) -> float:
    """The share of a card's driver-reported memory a serving engine sized like vLLM must be given to hold
    `peak_bytes` of tensors beside the CUDA context (compare ENGINE_DEFAULT_SHARE)."""
    return (peak_bytes + context_bytes) / usable_bytes


def engine_setting(peak_bytes: int, usable_bytes: int, context_bytes: int) -> float | None:
    """The gpu_memory_utilization a vLLM server needs to hold `peak_bytes` on a card: engine_share rounded up to the
    hundredth, 1.0 at most (the flag is a share of the card); None where its default, ENGINE_DEFAULT_SHARE, does."""
    share = engine_share(peak_bytes, usable_bytes, context_bytes)
    return min(1.0, math.ceil(share * 100) / 100) if share > ENGINE_DEFAULT_SHARE else None


def card_verdict(peak_bytes: int, budget: int, capacity: int) -> str:
    """"fits" within a card's budget; "tight" where its capacity holds the peak but not the headroom, so whether
    the step runs depends on how the allocator's blocks fall (FINDINGS.md F49: the least memory each of 106 replayed
    steps ran in was a median 2.4% over its live peak, 27.1% at most); else "does not fit"."""
    if peak_bytes <= budget:
        return "fits"
    return "tight" if peak_bytes <= capacity else "does not fit"
