"""The plan search's probe over one estimate's jobs (plans.Probe): each (method, setup)'s figure held against a card
and its offload's CPU memory per node, every ZeRO / FSDP line shared out once (sharding.Sharding), the training
jobs accumulating their gradients on fewer GPUs than the reference job's batch. Pure: numbers in, numbers out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .kinds import GPU_COUNTS, Kind, count_index
from .parallel import (
    ParallelError,
    Setup,
    SingleGpuJob,
    accumulating_job,
    peak_parts,
    tp_phases,
    validate,
)
from .sharding import GPUS_PER_NODE, Sharding, cpu_bytes_per_node, sharded

SHARDED = ("zero2", "zero3", "fsdp", "fsdp+ep")  # the strategies parallel.Sharding works out once per job


class PeakTable:
    """plans.Probe over the jobs, each (method, setup) shared out once for every GPU: the figure held against a card
    (`adjust` turns the per-GPU parts, in parallel.PARTS order, into the job's metric) and the offload's CPU bytes
    per node. ZeRO and FSDP setups share one parallel.Sharding per (method, strategy, checkpointing, offload), so a
    count costs a few divisions. `first_count` is plans.Bound for the methods in `summed` (whose metric is the sum
    of the parts, so a lower bound on the parts' sum bounds the figure). `batch`: the reference job's, which a
    training setup of fewer GPUs (data parallel, one sample each) reaches by accumulating gradients over micro-batches,
    every one held (parallel.accumulating_phases; FSDP's no_sync keeps them unsharded). `nccl_bytes`: per method,
    what NCCL holds on each GPU of a setup of several, outside the allocator (Assumptions.nccl_bytes_per_gpu), which
    the card holds beside the parts: added to the method's figure on 2 GPUs or more. One per estimate."""

    def __init__(self, jobs: Mapping[str, SingleGpuJob], adjust: Callable[[str, tuple[int, ...]], int],
                 summed: tuple[str, ...] = (), batch: int = 1, nccl_bytes: Mapping[str, int] | None = None) -> None:
        self.jobs, self.adjust, self.summed, self.batch = jobs, adjust, summed, batch
        self.nccl_bytes = dict(nccl_bytes or {})
        # the methods that accumulate, their jobs made when a setup first asks (most estimates need few of them)
        self.accumulates = frozenset(m for m in jobs if m in ("full", "lora", "qlora") and batch > 1)
        self.accumulating: dict[str, SingleGpuJob] = {}
        self.seen: dict[tuple, tuple[int, int] | ParallelError] = {}
        self.shardings: dict[tuple, Sharding | ParallelError] = {}
        self.limits: dict[tuple[str, int], tuple[tuple[int, int], ...] | None] = {}  # (method, id(kind))

    def __call__(self, method: str, setup: Setup) -> tuple[int, int]:
        # the setup by its fields' values (what Setup's == compares), hashed at C speed, not by its Python __hash__
        return _remembered(self.seen, (method, *vars(setup).values()), lambda: self._figure(method, setup))

    def floor(self, method: str, setup: Setup) -> tuple[int, tuple[int, ...]]:
        """The figure and parts (PARTS order) one rank keeps of a ZeRO / FSDP setup's line however many GPUs share
        it (Sharding.floor); ParallelError where the line cannot run."""
        parts = self._sharding(method, setup).floor()
        return self.adjust(method, parts) + self.nccl_bytes.get(method, 0), parts

    def _figure(self, method: str, setup: Setup) -> tuple[int, int]:
        several = isinstance(setup.gpus, int) and setup.gpus > 1  # a count that is no integer: refused below
        nccl = self.nccl_bytes.get(method, 0) if several else 0
        if setup.strategy in SHARDED:
            sharding = self._sharding(method, setup, self._accumulates(method, setup))
            return self.adjust(method, sharding.peak(setup.gpus)) + nccl, sharding.cpu(setup.gpus)
        job = self._job(method, self._accumulates(method, setup))
        return self.adjust(method, peak_parts(job, setup, method)[1]) + nccl, cpu_bytes_per_node(job, setup)

    def _accumulates(self, method: str, setup: Setup) -> bool:
        return method in self.accumulates and isinstance(setup.gpus, int) and setup.gpus < self.batch

    def _job(self, method: str, accumulating: bool) -> SingleGpuJob:
        if not accumulating:
            return self.jobs[method]
        if method not in self.accumulating:
            self.accumulating[method] = accumulating_job(self.jobs[method])
        return self.accumulating[method]

    def _sharding(self, method: str, setup: Setup, accumulating: bool = False) -> Sharding:
        """The method's job (accumulating its gradients or not) under `setup`'s line (strategy, checkpointing,
        offload), validated once per line and for one GPU apart: parallel.validate reads the count of a ZeRO / FSDP
        setup only to refuse one GPU (or a count that is no positive integer, checked here every time)."""
        n = setup.gpus
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            validate(self.jobs[method], setup, method)
        key = (method, setup.strategy, setup.grad_ckpt, setup.offload, setup.prefetch, setup.sync_each_batch,
               setup.mixed_units, n == 1, accumulating)

        def make() -> Sharding:
            job = self._job(method, accumulating)
            validate(job, setup, method)
            return sharded(job, *key[1:7])
        return _remembered(self.shardings, key, make)

    def first_count(self, method: str, kind: Kind, budget: int) -> int | None:
        """plans.Bound for a ZeRO / FSDP, pipeline or tensor x pipeline kind of a summed method that runs (validated
        once, at its first count): a phase of bytes A + S / N at least (_limits), and NCCL's on a kind of several GPUs
        only, is within `budget` only from N = S / (budget - A - NCCL) (shaved by 1e-9 against rounding); None for
        the other kinds. A kind that starts at one GPU is bounded without NCCL's bytes: a lower bound still."""
        key = (method, id(kind))
        if key not in self.limits:
            self.limits[key] = self._limits(method, kind)
        limits = self.limits[key]
        if limits is None:
            return None
        need = 0.0
        nccl = self.nccl_bytes.get(method, 0) if kind.first > 0 else 0
        for fixed, spread in limits:
            room = budget - fixed - nccl
            if spread:
                if room <= 0:
                    return len(GPU_COUNTS)  # never within the budget
                need = max(need, spread / room * (1 - 1e-9))
            elif room < 0:
                return len(GPU_COUNTS)
        return count_index(need, kind.first)

    def _limits(self, method: str, kind: Kind) -> tuple[tuple[int, int], ...] | None:
        """Per phase (A, S) with the phase's bytes on N GPUs at least A + S / N, for a ZeRO / FSDP kind
        (Sharding.limits) or pipeline alone: its stages share out every part of a phase and each adds its own
        overhead (pipeline.stage_rows), so the largest of N stages holds at least the phase's whole bytes / N."""
        if method not in self.summed or kind.strategy not in (*SHARDED, "pp", "tp+pp") or method not in self.jobs:
            return None
        job, setup = self.jobs[method], kind.setup(kind.first)
        try:
            validate(job, setup, method)
        except ParallelError:
            return None
        if kind.strategy in SHARDED:
            return self._sharding(method, setup).limits()
        phases = job.phases_ckpt if setup.grad_ckpt else job.phases
        # tp+pp: stages of the node's tensor-parallel share, N / GPUS_PER_NODE of them (parallel.peak_parts)
        per_stage = GPUS_PER_NODE if kind.strategy == "tp+pp" else 1
        if per_stage > 1:
            phases = tp_phases(job, phases, per_stage)
        return tuple((0, per_stage * ph.total_bytes) for ph in phases)


def _remembered(table: dict, key: tuple, make: Callable[[], Any]) -> Any:
    """table[key], made once by make(); a ParallelError it raised is kept and raised again on every ask."""
    got = table.get(key)
    if got is None:
        try:
            got = make()
        except ParallelError as e:
            got = e
        table[key] = got
    if isinstance(got, ParallelError):
        raise got
    return got


def cached_peak(jobs: Mapping[str, SingleGpuJob], adjust: Callable[[str, tuple[int, ...]], int],
                summed: tuple[str, ...] = (), batch: int = 1,
                nccl_bytes: Mapping[str, int] | None = None) -> PeakTable:
    """A PeakTable over the jobs (its docstring)."""
    return PeakTable(jobs, adjust, summed, batch, nccl_bytes)
