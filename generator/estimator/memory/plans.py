"""Setups that run the model: for each method and priced GPU, the fewest GPUs that hold batch 1, and what the job costs.

Pure. The per-setup peak is a callable (`PeakFn`), so the caller plugs in its own estimator; `peak_from_jobs` adapts
estimator.parallel. GPU counts tried: 1, 2, 4, 8 in a node, then whole nodes of 8 up to 64 nodes (512 GPUs). At each
count the setups are tried in order of preference (CANDIDATES), the first that fits wins: one GPU; ddp, zero2; then
zero3 / fsdp with gradient checkpointing; then offload. Serving: one GPU, tensor parallel inside a node, tensor
parallel x pipeline stages across nodes (vLLM's tensor_parallel_size x pipeline_parallel_size), pipeline alone where
the heads do not divide.

Job time (training): the single-GPU job's FLOPs over (GPUs x peak TFLOPS x MFU), the cost section's roofline
(estimator.cost, Kaplan et al. 2020 arXiv:2001.08361 §2.1) spread evenly over data-parallel ranks; communication is
not modelled (it hides behind compute at the MFU assumed: Rajbhandari et al. 2020 §7; Zhao et al. 2023 FSDP,
arXiv:2304.11277 §7). Serving has no job: job_hours and job_usd are None and "cheapest" is the lowest usd_per_hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .parallel import GPUS_PER_NODE, ParallelError, Setup, SingleGpuJob, per_gpu

METHODS = ("full", "lora", "qlora", "serve")
GPU_COUNTS = (1, 2, 4, 8) + tuple(GPUS_PER_NODE * k for k in range(2, 65))
MAX_GPUS = GPU_COUNTS[-1]

PeakFn = Callable[[str, Setup], int]  # (method, setup) -> per-GPU peak bytes; raises ParallelError if impossible


@dataclass(frozen=True)
class GpuOffer:
    """A priced GPU and the bytes one of its cards offers an estimate (memory.budget_bytes)."""

    name: str
    budget_bytes: int
    usd_per_hour: float | None  # per GPU; None = unpriced (no job_usd)
    peak_tflops: float  # dense bf16 (fp16 where there is no bf16)
    bandwidth_gb_per_s: float = 0.0
    model: str = ""  # the priced GPU's own name, where a card (name) lists several (A100 / H100 80 GB)


@dataclass(frozen=True)
class Plan:
    method: str
    gpu: str
    gpus: int
    strategy: str
    grad_ckpt: bool
    offload: str
    per_gpu_peak_bytes: int
    fits: bool
    usd_per_hour: float | None  # the whole setup: gpus x the GPU's price
    job_hours: float | None
    job_usd: float | None
    cheapest: bool = False
    smallest: bool = False
    gpu_model: str = ""  # GpuOffer.model: which of the card's priced GPUs

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class Unreachable:
    method: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "reason": self.reason}


def candidates(method: str, gpus: int) -> tuple[Setup, ...]:
    """The setups tried at one GPU count, most preferred first; QLoRA's recipe always checkpoints (Dettmers et al.
    2023, arXiv:2305.14314 §2: paged optimizers absorb the spikes of gradient checkpointing)."""
    if method == "qlora":
        return tuple(s for s in candidates("lora", gpus) if s.grad_ckpt)
    if method == "serve":
        if gpus == 1:
            return (Setup("single", 1),)
        if gpus <= GPUS_PER_NODE:
            return Setup("tp", gpus), Setup("pp", gpus)
        return Setup("tp+pp", gpus), Setup("pp", gpus)
    if gpus == 1:
        return Setup("single", 1), Setup("single", 1, grad_ckpt=True), Setup("zero2", 1, True, "optimizer")
    return (Setup("ddp", gpus), Setup("zero2", gpus), Setup("ddp", gpus, True), Setup("zero2", gpus, True),
            Setup("fsdp", gpus, True), Setup("zero3", gpus, True),
            Setup("zero2", gpus, True, "optimizer"), Setup("zero3", gpus, True, "optimizer"),
            Setup("fsdp", gpus, True, "params"), Setup("zero3", gpus, True, "params"))


def peak_from_jobs(jobs: Mapping[str, SingleGpuJob]) -> PeakFn:
    """A PeakFn over estimator.parallel: jobs[method] is that method's single-GPU job."""
    def peak(method: str, setup: Setup) -> int:
        return per_gpu(jobs[method], setup, method).per_gpu_peak_bytes
    return peak


def _try(peak: PeakFn, method: str, setup: Setup) -> int | None:
    try:
        return peak(method, setup)
    except ParallelError:
        return None


def plan_one(peak: PeakFn, method: str, gpu: GpuOffer, job_flops: float | None, mfu: float,
             ckpt_flops: float | None = None) -> Plan:
    """The first setup, by GPU count then preference, whose per-GPU peak fits the card; when none fits at
    MAX_GPUS, the smallest peak seen there with fits False."""
    best: tuple[int, Setup] | None = None
    for n in GPU_COUNTS:
        for setup in candidates(method, n):
            bytes_ = _try(peak, method, setup)
            if bytes_ is None:
                continue
            if bytes_ <= gpu.budget_bytes:
                flops = ckpt_flops if setup.grad_ckpt and ckpt_flops is not None else job_flops
                return _plan(method, gpu, setup, bytes_, True, flops, mfu)
            if n == MAX_GPUS and (best is None or bytes_ < best[0]):
                best = (bytes_, setup)
    if best is None:
        return Plan(method, gpu.name, MAX_GPUS, "", False, "none", 0, False, None, None, None, gpu_model=gpu.model)
    return _plan(method, gpu, best[1], best[0], False, job_flops, mfu)


def plan_all(peak: PeakFn, method: str, gpus: tuple[GpuOffer, ...], job_flops: float | None, mfu: float,
             ckpt_flops: float | None = None) -> list[Plan]:
    """[plan_one(...) for each GPU], each setup's peak asked once for all GPUs: the same walk (GPU count, then
    preference), every GPU taking the first setup within its budget. DDP past one GPU is not asked: a GPU still
    unplaced there did not hold the job alone, and DDP holds at least that (parallel: everything replicated)."""
    found: dict[int, tuple[Setup, int]] = {}
    best: tuple[int, Setup] | None = None
    for n in GPU_COUNTS:
        for setup in candidates(method, n):
            if setup.strategy == "ddp" and n < MAX_GPUS:
                continue
            bytes_ = _try(peak, method, setup)
            if bytes_ is None:
                continue
            for i, gpu in enumerate(gpus):
                if i not in found and bytes_ <= gpu.budget_bytes:
                    found[i] = (setup, bytes_)
            if n == MAX_GPUS and (best is None or bytes_ < best[0]):
                best = (bytes_, setup)
            if len(found) == len(gpus):
                break
        if len(found) == len(gpus):
            break
    out = []
    for i, gpu in enumerate(gpus):
        if i in found:
            setup, bytes_ = found[i]
            flops = ckpt_flops if setup.grad_ckpt and ckpt_flops is not None else job_flops
            out.append(_plan(method, gpu, setup, bytes_, True, flops, mfu))
        elif best is None:
            out.append(Plan(method, gpu.name, MAX_GPUS, "", False, "none", 0, False, None, None, None,
                            gpu_model=gpu.model))
        else:
            out.append(_plan(method, gpu, best[1], best[0], False, job_flops, mfu))
    return out


def _plan(method: str, gpu: GpuOffer, setup: Setup, bytes_: int, fits: bool, job_flops: float | None,
          mfu: float) -> Plan:
    usd_h = None if gpu.usd_per_hour is None else gpu.usd_per_hour * setup.gpus
    hours = job_hours(job_flops, setup.gpus, gpu.peak_tflops, mfu) if fits and method != "serve" else None
    usd = None if hours is None or usd_h is None else hours * usd_h
    return Plan(method, gpu.name, setup.gpus, setup.strategy, setup.grad_ckpt, setup.offload, bytes_, fits, usd_h,
                hours, usd, gpu_model=gpu.model)


def job_hours(job_flops: float | None, gpus: int, peak_tflops: float, mfu: float) -> float | None:
    """Hours of a job of `job_flops` (the single-GPU count) over `gpus` GPUs at `mfu` of `peak_tflops` each."""
    if job_flops is None or peak_tflops <= 0 or mfu <= 0:
        return None
    return job_flops / (gpus * peak_tflops * 1e12 * mfu) / 3600.0


def search_plans(peak: PeakFn, methods: tuple[str, ...], gpus: tuple[GpuOffer, ...],
                 job_flops: Mapping[str, float], mfu: Mapping[str, float],
                 ckpt_flops: Mapping[str, float] | None = None) -> tuple[list[Plan], list[Unreachable]]:
    """Every (method, priced GPU) plan, marked cheapest (lowest job_usd of the method; serving: lowest usd_per_hour)
    and smallest (fewest GPUs of the method), ties all marked; a method no GPU runs at MAX_GPUS is unreachable.
    ckpt_flops: the job's FLOPs with gradient checkpointing (one more forward), for the setups that use it."""
    plans: list[Plan] = []
    unreachable: list[Unreachable] = []
    for method in methods:
        if method not in METHODS:
            raise ParallelError("", "method", method, f"must be one of {', '.join(METHODS)}")
        rows = plan_all(peak, method, gpus, job_flops.get(method), mfu.get(method, 0.0),
                        (ckpt_flops or {}).get(method))
        fitting = [p for p in rows if p.fits]
        if not fitting:
            nodes = MAX_GPUS // GPUS_PER_NODE
            unreachable.append(Unreachable(method, f"no priced GPU holds batch 1 on {MAX_GPUS} GPUs ({nodes} nodes "
                                                   f"of {GPUS_PER_NODE}) with any strategy"))
        fewest = min((p.gpus for p in fitting), default=0)
        cost = [_cost_key(p) for p in fitting if _cost_key(p) is not None]
        low = min(cost, default=None)
        for p in rows:
            cheapest = p.fits and low is not None and _cost_key(p) == low
            plans.append(Plan(**{**p.to_dict(), "cheapest": cheapest, "smallest": p.fits and p.gpus == fewest}))
    return plans, unreachable


def _cost_key(p: Plan) -> float | None:
    return p.usd_per_hour if p.method == "serve" else p.job_usd
