"""Setups that run the model: for each method and priced GPU, the fewest GPUs that hold batch 1, and what the job costs.

Pure. The per-setup peak is a callable (`Probe`), so the caller plugs in its own estimator; `peak_from_jobs` adapts
estimator.parallel. GPU counts tried (kinds.py, with the kinds below): 1, 2, 4, 8 in a node, then whole nodes of 8
up to 64 nodes (512 GPUs). The fewest GPUs win; at the same count the simpler setup (the issue's preference): one GPU; zero2; then zero3 / fsdp with
gradient checkpointing (TRAIN_KINDS). Offload is the last resort: its setups (OFFLOAD_KINDS) are tried only where no
setup without it runs on the card at any count up to 512, and only those whose CPU memory per node fits the host
(Assumptions.host_memory_bytes_per_node: a DGX H100 node's 2 TB). Serving: one GPU, tensor parallel inside a node,
tensor parallel x pipeline stages across nodes (vLLM's tensor_parallel_size x pipeline_parallel_size), pipeline
alone where the heads do not divide. The per-GPU peak of a sharded setup never rises with the count (tested), so
each kind's first fitting count is found by bisection rather than by a walk over all 67 counts.

Job time (training): the cost section's roofline (estimator.cost, Kaplan et al. 2020 arXiv:2001.08361 §2.1), the
longer of the single-GPU job's FLOPs over the peak TFLOPS and its bytes over the bandwidth, over (GPUs x MFU): spread
evenly over data-parallel ranks; communication
among the GPUs is not modelled (it hides behind compute at the MFU assumed: Rajbhandari et al. 2020 §7; Zhao et al.
2023 FSDP, arXiv:2304.11277 §7). An offload setup takes at least the hours its host links need (host_link.py), the
longer of the two. Serving has no job: job_hours and job_usd are None; "cheapest" is the lowest usd_per_hour.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .host_link import LinkBytes, link_hours
from .kinds import LAST, MAX_GPUS, ORDERS, SEVERAL_NODES, Kind, kinds, probe_order
from .parallel import ParallelError, Setup, SingleGpuJob, per_gpu
from .sharding import GPUS_PER_NODE
from .vllm_server import ServerDefaults

METHODS = ("full", "lora", "qlora", "serve")

PeakFn = Callable[[str, Setup], int]  # (method, setup) -> per-GPU peak bytes; raises ParallelError if impossible
# (method, setup) -> (per-GPU peak bytes, CPU bytes per node of its offload); a PeakFn is accepted too (no offload)
Probe = Callable[[str, Setup], "int | tuple[int, int]"]
# (method, kind, budget bytes) -> an index of GPU_COUNTS before which every count of the monotone `kind` is over
# the budget, where its labels are known to run over..., fits... (the peak never rises with the count); else None
Bound = Callable[[str, "Kind", int], "int | None"]


@dataclass(frozen=True)
class GpuOffer:
    """A priced GPU and the bytes one of its cards offers an estimate (memory.budget_bytes)."""

    name: str
    budget_bytes: int
    usd_per_hour: float | None  # per GPU; None = unpriced (no job_usd)
    peak_tflops: float  # dense bf16 (fp16 where there is no bf16)
    bandwidth_gb_per_s: float = 0.0
    model: str = ""  # the priced GPU's own name, where a card (name) lists several (A100 / H100 80 GB)
    host_link_gb_per_s: float = 0.0  # PCIe to the CPU, one direction (0: not known)
    # its `vllm serve` defaults (vllm_server.server_defaults): a step's tokens, the most sequences at once
    server: ServerDefaults = ServerDefaults(0, 1 << 20)


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
    host_link_hours: float | None = None  # offload: the hours its PCIe transfers take at least (job_hours >= it)
    host_bytes_per_node: int | None = None  # offload: the CPU memory its ranks of one node hold together

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class PlanFloor:
    """What each GPU keeps of a training method's batch-1 job however many GPUs share it, under the ZeRO / FSDP
    setup tried that keeps least (sharding.Sharding.floor): made where some card holds the method on no count up to
    MAX_GPUS, to say whether any count would. parts: (name, bytes) in parallel.PARTS order, the nonzero ones, then
    "nccl": NCCL's buffers beside them on each GPU (Assumptions.nccl_bytes_per_gpu).
    beyond: (card, GPUs) for each such card whose budget holds the floor: how many GPUs of it the setup needs (0: more
    than a million)."""

    method: str
    strategy: str
    grad_ckpt: bool
    offload: str
    floor_bytes: int
    parts: tuple[tuple[str, int], ...]
    beyond: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Unreachable:
    method: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "reason": self.reason}




def peak_from_jobs(jobs: Mapping[str, SingleGpuJob]) -> Probe:
    """A Probe over estimator.parallel: jobs[method] is that method's single-GPU job."""
    def probe(method: str, setup: Setup) -> tuple[int, int]:
        r = per_gpu(jobs[method], setup, method)
        return r.per_gpu_peak_bytes, r.cpu_bytes_per_node
    return probe


_CANNOT, _OVER, _FITS = 0, 1, 2


def first_fit(probe: Probe, method: str, tried: tuple[Kind, ...], budget_bytes: int,
              host_bytes_per_node: int | None = None,
              memo: dict[tuple[int, int], tuple[int, int] | None] | None = None,
              bound: Bound | None = None) -> tuple[Setup, int] | None:
    """The setup of `tried` on the fewest GPUs whose per-GPU peak is within `budget_bytes` (and whose offload's
    CPU memory per node within `host_bytes_per_node`), the earlier kind winning at the same count; with its peak.
    Each kind's counts are labelled over (too big), fits, or cannot (the setup is impossible); a monotone kind's
    labels run over..., fits..., cannot..., so the first fit is found by galloping up from its first count and
    bisecting, and a kind that cannot beat the best found so far is dropped after one probe. `memo` keeps the
    probes of one method across calls (one per GPU budget). `bound`: where it knows a monotone kind's first count
    that can fit, the search starts there (that count fits, most often: one probe) instead of galloping."""
    seen: dict[Any, Any] = {} if memo is None else memo  # (kind, count index) -> (peak, cpu), None: impossible
    host = host_bytes_per_node

    def label(kind: Kind, i: int) -> int:
        key = (id(kind), i)
        got = seen.get(key, seen)
        if got is seen:
            try:
                got = _pair(probe(method, kind.setup(i)))
            except ParallelError:
                got = None
            seen[key] = got
        if got is None:
            return _CANNOT
        return _OVER if got[0] > budget_bytes or (host is not None and got[1] > host) else _FITS

    if bound is not None:
        got = _by_bounds(label, method, tried, budget_bytes, bound)
        if got is not _UNBOUNDED:
            return None if got is None else (got[0].setup(got[1]), seen[(id(got[0]), got[1])][0])
    best_i, best_rank, best_kind = -1, 0, tried[0] if tried else None
    for rank, kind in ORDERS.get(id(tried)) or probe_order(tried):
        # it must beat the best so far: fewer GPUs, or as many and more preferred
        hi = kind.last if best_i < 0 else min(kind.last, best_i if rank < best_rank else best_i - 1)
        lo = kind.first
        if hi < lo:
            continue
        found = -1
        if not kind.monotone:
            for i in range(lo, hi + 1):
                if label(kind, i) == _FITS:
                    found = i
                    break
        else:
            start = None if bound is None else bound(method, kind, budget_bytes)
            if start is not None:  # every count before `start` is over: the first not over is start or later
                lo = -1 if start > hi else max(lo, start)
            if lo >= 0 and best_i < 0:  # gallop: lo, lo + 1, lo + 3, lo + 7, ... until a count is not over
                step, prev = 1, lo - 1
                while True:
                    i = min(hi, prev + step)
                    # past a node: first its largest count (its floor, shared by every budget); over there, over
                    # everywhere, which saves the gallop through the nodes where nothing fits
                    if i >= SEVERAL_NODES and hi == kind.last and i < hi and label(kind, hi) == _OVER:
                        lo = -1
                        break
                    if label(kind, i) != _OVER:
                        lo, hi = prev + 1, i
                        break
                    if i == hi:
                        lo = -1
                        break
                    prev, step = i, step * 2
            elif lo >= 0 and label(kind, hi) == _OVER:
                lo = -1
            if lo >= 0:
                while lo < hi:  # the first count not over in [lo, hi]; hi is known not to be over
                    mid = (lo + hi) // 2
                    if label(kind, mid) == _OVER:
                        lo = mid + 1
                    else:
                        hi = mid
                found = lo if label(kind, lo) == _FITS else -1
        if found >= 0 and (best_i < 0 or (found, rank) < (best_i, best_rank)):
            best_i, best_rank, best_kind = found, rank, kind
    if best_i < 0 or best_kind is None:
        return None
    got = seen[(id(best_kind), best_i)]
    return best_kind.setup(best_i), got[0]


_UNBOUNDED: Any = object()  # _by_bounds cannot tell: first_fit searches the general way


def _by_bounds(label: Callable[[Kind, int], int], method: str, tried: tuple[Kind, ...], budget_bytes: int,
               bound: Bound) -> tuple[Kind, int] | None:
    """first_fit where every kind of more than one count has a bound: a bound is a count index before which the
    kind is over, so the kinds' bounds (a single count's own index) ordered by (count, preference) are checked in
    turn and the first that fits wins: every kind after it is over below its own bound. A bounded count that does not
    fit (a ceiling's rounding, the host's memory) leaves the answer open: _UNBOUNDED, as for a kind with no bound."""
    starts = []
    for rank, kind in enumerate(tried):
        if kind.first == kind.last:
            starts.append((kind.first, rank, kind))
            continue
        start = bound(method, kind, budget_bytes) if kind.monotone else None
        if start is None:
            return _UNBOUNDED
        if start <= kind.last:
            starts.append((max(start, kind.first), rank, kind))
    starts.sort(key=lambda x: (x[0], x[1]))
    for i, _, kind in starts:
        if label(kind, i) == _FITS:
            return kind, i
        if kind.first != kind.last:
            return _UNBOUNDED
    return None


def _pair(x: int | tuple[int, int]) -> tuple[int, int]:
    return (x, 0) if isinstance(x, int) else x


def plan_all(probe: Probe, method: str, gpus: tuple[GpuOffer, ...], job_flops: float | None, mfu: float,
             ckpt_flops: float | None = None, host_bytes_per_node: int | None = None,
             bound: Bound | None = None, link: LinkBytes | None = None, experts: bool = False,
             moved: tuple[float, float] = (0.0, 0.0), checkpoints: bool = True) -> list[tuple]:
    """Per GPU, first_fit over the method's setups without offload; only where none runs up to MAX_GPUS, over the
    offload setups whose CPU memory per node is within `host_bytes_per_node`; where nothing runs, the smallest
    peak any setup reaches at MAX_GPUS, with fits False. Probes are shared through the caller's cache. Each row:
    Plan's fields up to job_usd and host_link_hours (search_plans adds the marks). The budgets are searched from the smallest up, and
    once one GPU of the most preferred kind holds the job, every larger budget takes that setup unsearched."""
    out = []
    by_budget: dict[int, tuple[Setup, int] | None] = {}  # cards listing several GPUs share one budget
    memo: dict[tuple[int, int], tuple[int, int] | None] = {}
    top = kinds(method, checkpoints=checkpoints)[0].setup(0)  # one GPU, the most preferred kind: nothing beats it
    for budget in sorted({gpu.budget_bytes for gpu in gpus}):  # the smallest first
        got = first_fit(probe, method, kinds(method, experts=experts, checkpoints=checkpoints), budget, None, memo,
                        bound)
        if got is None and method != "serve":
            got = first_fit(probe, method, kinds(method, offload=True, checkpoints=checkpoints), budget,
                            host_bytes_per_node, memo, bound)
        by_budget[budget] = got
        if got is not None and got[0] == top:  # it fits every larger budget too, and is their answer
            by_budget.update((gpu.budget_bytes, got) for gpu in gpus if gpu.budget_bytes > budget)
            break
    for gpu in gpus:
        got = by_budget[gpu.budget_bytes]
        if got is not None:
            setup, bytes_ = got
            flops = ckpt_flops if setup.grad_ckpt and ckpt_flops is not None else job_flops
            out.append(_row(method, gpu, setup, bytes_, True, flops, mfu, link, moved[setup.grad_ckpt])
                       + (_host(probe, method, setup),))
            continue
        best = _smallest_at_max(probe, method, experts, checkpoints)
        if best is None:
            out.append((method, gpu.name, MAX_GPUS, "", False, "none", 0, False, None, None, None, None, None))
        else:
            out.append(_row(method, gpu, best[1], best[0], False, job_flops, mfu, None)
                       + (_host(probe, method, best[1]),))
    return out


def _host(probe: Probe, method: str, setup: Setup) -> int | None:
    """Plan.host_bytes_per_node: an offload setup's CPU memory per node (the probe's second figure, cached)."""
    return _pair(probe(method, setup))[1] if setup.offload != "none" else None


def _smallest_at_max(probe: Probe, method: str, experts: bool = False,
                     checkpoints: bool = True) -> tuple[int, Setup] | None:
    best: tuple[int, Setup] | None = None
    for kind in kinds(method, experts=experts, checkpoints=checkpoints) + kinds(method, offload=True,
                                                                                 checkpoints=checkpoints):
        if kind.last != LAST:
            continue
        setup = kind.setup(LAST)
        try:
            bytes_ = _pair(probe(method, setup))[0]
        except ParallelError:
            continue
        if best is None or bytes_ < best[0]:
            best = (bytes_, setup)
    return best


def _row(method: str, gpu: GpuOffer, setup: Setup, bytes_: int, fits: bool, job_flops: float | None,
         mfu: float, link: LinkBytes | None, moved: float = 0.0) -> tuple:
    usd_h = None if gpu.usd_per_hour is None else gpu.usd_per_hour * setup.gpus
    hours = job_hours(job_flops, setup.gpus, gpu.peak_tflops, mfu, moved, gpu.bandwidth_gb_per_s) \
        if fits and method != "serve" else None
    linked = None  # an offload job waits on its host links where they take longer than its FLOPs
    if hours is not None and link is not None and setup.offload != "none":
        linked = link_hours(link(method, setup), gpu.host_link_gb_per_s)
        hours = hours if linked is None else max(hours, linked)
    usd = None if hours is None or usd_h is None else hours * usd_h
    return (method, gpu.name, setup.gpus, setup.strategy, setup.grad_ckpt, setup.offload, bytes_, fits, usd_h, hours,
            usd, linked)


def roofline_seconds(flops: float, moved: float, flops_per_s: float, bytes_per_s: float) -> tuple[float, str]:
    """The roofline (Williams, Waterman & Patterson 2009, CACM 52(4)): the longer of the FLOPs at the peak and the
    bytes at the bandwidth (none where it is unknown), and which of the two decides ("compute" or "memory")."""
    compute_s = flops / flops_per_s
    memory_s = moved / bytes_per_s if bytes_per_s > 0 else 0.0
    return max(compute_s, memory_s), "compute" if compute_s >= memory_s else "memory"


def job_hours(job_flops: float | None, gpus: int, peak_tflops: float, mfu: float, moved: float = 0.0,
              bandwidth_gb_per_s: float = 0.0) -> float | None:
    """Hours of a job of `job_flops` and `moved` bytes (the single-GPU counts: cost.step_work's) over `gpus` GPUs at
    `mfu` of each one's roofline: the longer of the FLOPs over `peak_tflops` and the bytes over the bandwidth."""
    if job_flops is None or peak_tflops <= 0 or mfu <= 0:
        return None
    return roofline_seconds(job_flops, moved, peak_tflops * 1e12, bandwidth_gb_per_s * 1e9)[0] / (gpus * mfu) / 3600.0


def search_plans(peak: Probe, methods: tuple[str, ...], gpus: tuple[GpuOffer, ...],
                 job_flops: Mapping[str, float], mfu: Mapping[str, float],
                 ckpt_flops: Mapping[str, float] | None = None,
                 host_bytes_per_node: int | None = None,
                 bound: Bound | None = None, link: LinkBytes | None = None,
                 experts: bool = False,
                 moved: Mapping[str, tuple[float, float]] | None = None,
                 checkpoints: bool = True) -> tuple[list[Plan], list[Unreachable]]:
    """Every (method, priced GPU) plan, marked cheapest (lowest job_usd of the method; serving: lowest usd_per_hour)
    and smallest (fewest GPUs of the method), ties all marked; a method no GPU runs at MAX_GPUS is unreachable.
    ckpt_flops: the job's FLOPs with gradient checkpointing (one more forward), for the setups that use it.
    host_bytes_per_node: the CPU memory an offload setup may hold per node of 8 GPUs (None: no limit).
    bound: first_fit's, where the caller knows where monotone kinds can start fitting. link: the bytes an offload
    setup moves over each GPU's host link in the job (host_link.link_bytes), which bound its hours from below.
    experts: the model's routed experts divide over a node, so fsdp+ep is among the setups tried (kinds.kinds).
    moved: per method, the bytes the job moves on one GPU, without checkpointing and with it (0: FLOPs alone).
    checkpoints False: the model's class cannot checkpoint, so no setup does (kinds.kinds)."""
    plans: list[Plan] = []
    unreachable: list[Unreachable] = []
    for method in methods:
        if method not in METHODS:
            raise ParallelError("", "method", method, f"must be one of {', '.join(METHODS)}")
        rows = plan_all(peak, method, gpus, job_flops.get(method), mfu.get(method, 0.0),
                        (ckpt_flops or {}).get(method), host_bytes_per_node, bound, link, experts,
                        (moved or {}).get(method, (0.0, 0.0)), checkpoints)
        # rows: Plan's fields method .. job_usd, then host_link_hours and host_bytes_per_node; 2 gpus, 7 fits,
        # 8 usd_per_hour, 10 job_usd
        fitting = [r for r in rows if r[7]]
        if not fitting:
            nodes = MAX_GPUS // GPUS_PER_NODE
            unreachable.append(Unreachable(method, f"no priced GPU holds batch 1 on {MAX_GPUS} GPUs ({nodes} nodes "
                                                   f"of {GPUS_PER_NODE}) with any strategy, nor with an offload "
                                                   "that fits the host's memory"))
        fewest = min((r[2] for r in fitting), default=0)
        price = 8 if method == "serve" else 10  # serving has no job: the cheapest per hour
        low = min((r[price] for r in fitting if r[price] is not None), default=None)
        for r, gpu in zip(rows, gpus, strict=True):
            plans.append(_new_plan(r[:11] + (bool(r[7] and low is not None and r[price] == low),
                                             bool(r[7] and r[2] == fewest), gpu.model, r[11], r[12])))
    return plans, unreachable


_PLAN_FIELDS = tuple(Plan.__dataclass_fields__)


def _new_plan(values: tuple) -> Plan:
    """A Plan from its fields in order, set directly (what the frozen dataclass __init__ does field by field
    through object.__setattr__, at a third of the cost; the estimator makes 24 per model)."""
    plan = object.__new__(Plan)
    plan.__dict__.update(zip(_PLAN_FIELDS, values, strict=True))
    return plan
