"""The estimator's inputs besides the config: the job, the memory assumptions, the cards and GPUs.

Defaults here mirror site_config.yaml (which is what the site and CLI actually pass in); the test
suite checks the two agree, so a maintainer changes one place: site_config.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class Assumptions:
    """Every memory and cost assumption, in the units its name says."""

    train_tokens: int = 2048  # tokens per training sample (capped at the model's context)
    lora_rank: int = 16
    serve_tokens: int = 4096  # tokens per served sequence (prompt + generated)
    headroom: float = 1.15  # allocator fragmentation / framework slack, applied to every card (FINDINGS F49)
    cuda_context_bytes: int = GIB // 2  # PyTorch 2.x with lazy module loading: 0.47 GiB on A100 [ML-PERF]
    # What NCCL takes on each GPU of a job spread over several, outside PyTorch's allocator, so no torch counter
    # sees it (the site prices it on training setups, setups.training_nccl_bytes, and on any --gpus N job): 2 ranks of
    # torch.distributed went from 0.55 to 2.00 GiB used at their first barrier [ML-PERF] (training/performance/
    # README.md, torch-dist-mem-usage.py); vLLM V0's 2-GPU tensor-parallel Llama-3-8B logged 1.79 GiB more memory
    # outside torch than one GPU (public.jsonl M171, M170).
    nccl_bytes_per_gpu: int = 1556925645
    # AMP full fine-tune (HF Trainer --bf16 on fp32 weights): fp32 master weights, fp32 grads,
    # two fp32 AdamW moments; bf16 copies of every matmul weight saved by autocast for backward.
    master_weight_bytes: int = 4
    grad_bytes: int = 4
    optimizer_state_bytes: int = 8
    autocast_copy_bytes: int = 2
    # torch.optim.AdamW(foreach=True), the CUDA default, allocates temporaries as large as the
    # parameters it steps (DESIGN.md; anchors-estimators.md §2.13: 8B model 75.3 vs 62.3 GiB).
    foreach_temp_bytes: int = 4
    base_weight_bytes: int = 2  # LoRA: frozen bf16 base
    compute_bytes: int = 2  # bf16 activations
    # Per logit element at the loss backward: the fp32 log-softmax output + the gradient of it + the gradient of
    # its input; the bf16 logits and the fp32 upcast are freed before backward (+2 if the loop keeps the
    # model's output alive during backward). Measured: data/measurements/FINDINGS.md F1 (tiny-Qwen2, T=2048).
    logits_bytes: int = 12
    serve_weight_bytes: int = 2
    kv_bytes: int = 2
    # fp32 next-token logits (HF generate's per decoding sequence; vLLM's sampler upcasts its logits to fp32:
    # memory/vllm_server.sampler_row_bytes)
    decode_logits_bytes: int = 4
    # What vLLM's startup sampler run holds per row and vocabulary entry, measured: the activation peak vLLM logs,
    # over max_num_seqs x vocabulary, is 38.2-38.3 B for Llama-3.1-8B, Qwen3-0.6B, Qwen3-32B and gpt-oss-20b on an
    # H100 at vLLM V1's 2025 defaults (llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md;
    # public.jsonl M176), 39 B for Llama-3-8B on vLLM V0 (M170): a sort-based top-k/top-p's tensors beside the
    # logits. v0.19.1's source, whose Triton top-k/top-p works in place, reads 14 B; not measured, so the measured
    # figure is priced (the safe side).
    serve_sampler_bytes_per_entry: int = 38
    # `vllm serve`'s defaults (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults, OPENAI_API_SERVER): steps of
    # 2,048 tokens (max_num_batched_tokens, prompts' chunks and decodes together) and 256 sequences at once
    # (max_num_seqs), the model's own serving figure; 8,192 and 1,024 on a GPU of 70 GiB or more that is not an
    # A100. vLLM sizes its KV cache by one forward of a step and one sampler run over that many sequences
    # (gpu_model_runner.profile_run): memory/vllm_server.py.
    serve_step_tokens: int = 2048
    serve_max_sequences: int = 256
    serve_step_tokens_large_gpus: int = 8192
    serve_max_sequences_large_gpus: int = 1024
    # The fine-tuning job priced in the cost section.
    job_epochs: int = 10
    job_batch: int = 32
    job_tokens: int = 2048
    job_samples: int = 50_000
    # Model FLOPs utilisation assumed when turning roofline time into expected hours: 35-45% for a tuned full
    # fine-tune at 2-4k context (llm-foundry, fms-fsdp). LoRA takes the same: its GEMMs are the same shapes and
    # its FLOPs already leave out the frozen weights' gradient GEMMs (about 2/3 of full's, NeMo AutoModel PR 786).
    mfu_full: float = 0.40
    mfu_lora: float = 0.40
    # CPU memory an offload setup may hold per node of 8 GPUs: the plans offload only within it. NVIDIA DGX H100
    # User Guide, hardware overview: 2 TB of system memory beside 8 H100 GPUs (read as 2 x 10^12 bytes).
    host_memory_bytes_per_node: int = 2_000_000_000_000


@dataclass(frozen=True)
class Gpu:
    """One priced accelerator model. TFLOPS are dense (no 2:4 sparsity)."""

    key: str
    name: str
    bf16_tflops: float | None  # None where the chip has no bf16 (T4: Turing)
    fp16_tflops: float
    bandwidth_gb_per_s: float
    price_usd_per_hour: float | None
    price_source: str = ""
    price_date: str = ""
    spec_source: str = ""
    host_link_gb_per_s: float = 0.0  # PCIe to the CPU, one direction, GB (1e9 B) per second; 0: not known
    compute_capability: float | None = None  # CUDA's (sm major.minor), which kernels a server can run; None: not known


@dataclass(frozen=True)
class Card:
    """A memory class of the per-card table (one row), and the GPUs priced under it."""

    name: str
    memory_marketed_bytes: int
    memory_usable_bytes: int  # what the driver reports as total (nvidia-smi / mem_get_info)
    usable_source: str
    gpus: tuple[str, ...] = ()
