"""What `vllm serve` (v0.19.1) holds beside its weights and KV caches: its defaults per GPU, and its startup run.

vLLM sizes its KV cache by a profile run: it measures one forward of a whole step (max_num_batched_tokens tokens, over min(tokens, max_num_seqs)
requests) and then one sampler run over a row per request (v1/worker/gpu_model_runner.py profile_run, _dummy_run,
_dummy_sampler_run), one after the other: the forward's activations are freed before the sampler runs, so the
allocator's peak is the larger of the two. Whatever that peak is, it is taken from the memory the KV cache gets
(v1/worker/gpu_worker.py determine_available_memory), so it is held however few sequences are served; a decode's
logits at any concurrency up to max_num_seqs fall within it.
"""

from __future__ import annotations

from typing import NamedTuple

from ..graph.parts import Spec
from ..inputs import Assumptions

# vLLM's larger defaults go to a GPU of 70 GiB or more that is not an A100 (EngineArgs.get_batch_defaults: "Setting
# large max_num_batched_tokens for A100 reduces throughput, see PR #17885")
LARGE_DEFAULTS_BYTES = 70 * 2**30


class ServerDefaults(NamedTuple):
    """`vllm serve`'s max_num_batched_tokens (the tokens of one step) and max_num_seqs (sequences at once)."""

    step_tokens: int
    max_sequences: int


class Startup(NamedTuple):
    """The profile run's two peaks beside the weights: the step's forward, and the sampler's run after it."""

    forward_bytes: int
    sampler_bytes: int


def server_defaults(s: Assumptions, memory_bytes: int, gpu_name: str) -> ServerDefaults:
    """`vllm serve`'s defaults on a GPU of `memory_bytes` (engine/arg_utils.py EngineArgs.get_batch_defaults,
    UsageContext.OPENAI_API_SERVER): large_gpu_server's (8,192 tokens, 1,024 sequences) on one of
    LARGE_DEFAULTS_BYTES or more but the A100, reference_server's (2,048 and 256) on the rest."""
    if memory_bytes >= LARGE_DEFAULTS_BYTES and "a100" not in gpu_name.lower():
        return large_gpu_server(s)
    return reference_server(s)


def reference_server(s: Assumptions) -> ServerDefaults:
    """The defaults the model's own serving figure (Memory.serve_bytes_batch1, the curve) is priced at: the least
    `vllm serve` takes by default, on every GPU but those of large_gpu_server."""
    return ServerDefaults(s.serve_step_tokens, s.serve_max_sequences)


def large_gpu_server(s: Assumptions) -> ServerDefaults:
    """The defaults on a GPU of LARGE_DEFAULTS_BYTES or more that is not an A100 (H100, H200), whose larger step and
    sampler hold more."""
    return ServerDefaults(s.serve_step_tokens_large_gpus, s.serve_max_sequences_large_gpus)


def step_tokens(spec: Spec, server: ServerDefaults, tokens: int) -> int:
    """The tokens one serving step runs for sequences of `tokens` (max_model_len), which its forward is sized at
    (EngineArgs.__post_init__'s defaults, then capped at max_num_seqs x max_model_len): a decoder's,
    server.step_tokens whatever a prompt's length, as vLLM fills every step up to them with prompts' chunks
    (chunked prefill); an encoder-decoder's, at least one sequence whole, as vLLM turns chunked prefill off for it
    (config/model.py) and steps max(max_model_len, the default). An encoder's is its one sequence (vLLM pools it;
    profile.serve_profile prices a batch of them, each with its own forward)."""
    if spec.kind == "encoder":
        return tokens
    step = server.step_tokens if spec.kind == "decoder" else max(tokens, server.step_tokens)
    return min(step, server.max_sequences * tokens)


def startup_bytes(spec: Spec, s: Assumptions, server: ServerDefaults, tokens: int, float32: bool = False) -> Startup:
    """The profile run's peaks beside the weights, for sequences of `tokens`, in 16-bit activations or, `float32`,
    in float32 (a GPU where vLLM serves the model so: vllm_support.serving_scale).
    - forward: per token of the step, the largest layer transient (q/k/v/output or the MLP intermediates: widest)
      plus two residual copies, and the vision tower's working set for one image.
    - sampler (not for an encoder, which vLLM pools): N = min(max_num_seqs, step) rows (sampler_row_bytes) beside
      the forward's output for the whole step."""
    c = 4 if float32 else s.compute_bytes
    step = step_tokens(spec, server, tokens)
    forward = step * c * (widest(spec) + 2 * spec.hidden) + c * spec.vision_transient
    if spec.kind == "encoder":
        return Startup(forward, 0)
    rows = min(server.max_sequences, step)
    return Startup(forward, rows * sampler_row_bytes(spec, s, float32) + c * spec.hidden * step)


def residual_bytes(spec: Spec, s: Assumptions, server: ServerDefaults, tokens: int) -> int:
    """Of startup_bytes' forward, in the 16-bit bytes the plans search in (startup_in_16_bits), its two copies of
    the step's hidden states: every tensor-parallel rank holds them whole (vLLM's RowParallelLinear all-reduces its
    output, with no sequence parallelism), where the layer's column-parallel outputs are split."""
    return step_tokens(spec, server, tokens) * s.compute_bytes * 2 * spec.hidden


def sampler_row_bytes(spec: Spec, s: Assumptions, float32: bool = False) -> int:
    """One row of the sampler's run: a vocabulary's entries at s.serve_sampler_bytes_per_entry, measured (16-bit
    logits, their float32 copy, top-k/top-p's tensors, probabilities and noise), and two copies of the row's last
    hidden state (the one the logits are taken at, and _dummy_sampler_run's torch.rand_like of it). In float32 the
    logits take 4 B and need no float32 copy (sampler.py forward: logits.to(torch.float32)). 0 for an encoder.
    v0.19.1's source reads less per entry: compute_logits' logits, their copy, top-p's softmax into float32
    probabilities (ops/topk_topp_sampler.py forward_native) and random_sample's noise (torch.empty_like(probs)),
    its Triton top-k/top-p in place (ops/topk_topp_triton.py) beside a buffer of one float32 vocabulary row per SM;
    not measured (Assumptions.serve_sampler_bytes_per_entry)."""
    if spec.kind == "encoder":
        return 0
    c, entry = s.compute_bytes, s.serve_sampler_bytes_per_entry
    if float32:  # the logits in float32 (4 B, not c) and no float32 copy of them
        c, entry = 4, max(0, entry + 4 - c - s.decode_logits_bytes)
    return spec.vocab * entry + 2 * c * spec.hidden


def in_16_bits(startup: Startup, scale: int) -> Startup:
    """A startup in the 16-bit bytes the plans search in, where a GPU's serving bytes are scaled (`scale`:
    vllm_support.serving_scale, 2 in float32, whose bytes the search doubles back): a float32 startup halved."""
    return Startup(-(-startup.forward_bytes // scale), -(-startup.sampler_bytes // scale)) if scale > 1 else startup


def startup_in_16_bits(spec: Spec, s: Assumptions, server: ServerDefaults, tokens: int,
                       float32: bool = False) -> Startup:
    """startup_bytes in the bytes the plans search in (in_16_bits): a float32 startup halved."""
    return in_16_bits(startup_bytes(spec, s, server, tokens, float32), 2 if float32 else 1)


def startup_peak(spec: Spec, s: Assumptions, server: ServerDefaults, tokens: int) -> int:
    """The larger of startup_bytes' two peaks; 0 for an encoder, whose serving is a batch of forwards
    (profile.serve_profile)."""
    return 0 if spec.kind == "encoder" else max(startup_bytes(spec, s, server, tokens))


def widest(spec: Spec) -> int:
    """The largest layer transient's elements per token (Block.transient), which a step's forward holds."""
    return max((b.transient for b, _ in spec.distinct_layers), default=0)


class Raised(NamedTuple):
    """What serving b sequences past max_num_seqs costs a card (raised_sequences), in the 16-bit bytes its search runs
    in (in_16_bits where it serves in float32): the startup at its defaults, the step they price, the forward's bytes
    per token of a step and its image's, a sampler row (sampler_row_bytes), the step's output per token."""

    startup: Startup
    server: ServerDefaults
    step_tokens: int
    forward_bytes_per_token: int
    image_bytes: int
    row_bytes: int
    output_bytes_per_token: int


def raised_sequences(held_sequences: int, budget_bytes: int, static_bytes: int, sequence_bytes: int,
                     raised: Raised) -> int:
    """The sequences a budget holds where `held_sequences` (at a fixed startup: `static_bytes` with it,
    `sequence_bytes` each) passes max_num_seqs: a server raised to run b of them samples b rows, and steps at least b
    tokens (vLLM refuses max_num_batched_tokens below max_num_seqs: config/scheduler.py), and sizes its cache by the
    larger of the two (profile_run). The largest b from max_num_seqs to `held_sequences` whose peak is within the
    budget, by bisection (the peak grows with b)."""
    r = raised
    n = r.server.max_sequences
    if held_sequences <= n or not r.row_bytes:
        return held_sequences
    base = static_bytes - max(r.startup)  # the weights, and any fixed bytes beside the startup

    def fits(b: int) -> bool:
        step = max(r.step_tokens, b)
        peak = max(step * r.forward_bytes_per_token + r.image_bytes, b * r.row_bytes + step * r.output_bytes_per_token)
        return base + peak + b * sequence_bytes <= budget_bytes
    low, high = n, held_sequences  # n fits: the startup at n is the fixed one held_sequences was found with
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def raised_at(spec: Spec, s: Assumptions, server: ServerDefaults, tokens: int, float32: bool = False) -> Raised:
    """Raised for a card at `server`'s defaults, in the 16-bit bytes its search runs in (in_16_bits)."""
    scale, c = (2, 4) if float32 else (1, s.compute_bytes)

    def half(x: int) -> int:
        return -(-x // scale)
    return Raised(startup_in_16_bits(spec, s, server, tokens, float32), server, step_tokens(spec, server, tokens),
                  half(c * (widest(spec) + 2 * spec.hidden)), half(c * spec.vision_transient),
                  half(sampler_row_bytes(spec, s, float32)), half(c * spec.hidden))
