"""One job's memory as the report gives it: the phase record the estimator builds, its breakdown into PARTS, and
the peak in the job's metric (JobMemory)."""

from __future__ import annotations

from dataclasses import dataclass

from ..graph.nodes import Graph
from ..inputs import Assumptions
from .job_options import Job, apply_metric
from .parallel import Phase

PARTS = ("weights", "gradients", "optimizer_state", "activations", "logits", "kv_cache", "overhead")


@dataclass(frozen=True)
class JobMemory:
    peak_bytes: int
    peak_phase: str
    breakdown: tuple[tuple[str, int], ...]  # PARTS at the peak phase; they sum to peak_bytes


def phase(name: str, weights: float = 0, gradients: float = 0, optimizer_state: float = 0, activations: float = 0,
          logits: float = 0, kv_cache: float = 0, overhead_weights: float = 0, overhead_step: float = 0,
          overhead_fixed: float = 0, experts: float = 0, stage_whole: float = 0, head_activations: float = 0,
          last_stage: float = 0) -> Phase:
    """One phase; `overhead` comes split by how it shares out over GPUs (parallel.Phase): autocast's weight
    copies, the optimizer step's temporaries, and what every process holds whole. `experts`: of the activations,
    the per-expert tensors (an expert-parallel rank holds only its own experts'). `stage_whole`: of the
    activations, the one recomputed layer's working set, whole on every pipeline stage (Phase.stage_whole);
    `head_activations`, what the last stage alone holds (Phase.head_activations); `last_stage`, a chunked loss's
    transient, the last stage's alone and whole on every tensor-parallel rank (Phase.last_stage)."""
    return Phase(name, int(weights), int(gradients), int(optimizer_state), int(activations), int(logits),
                 int(kv_cache), int(overhead_weights), int(overhead_step), int(overhead_fixed),
                 name != "optimizer step", int(experts), stage_whole=int(stage_whole),
                 head_activations=int(head_activations), last_stage=int(last_stage))


def phase_parts(ph: Phase) -> dict[str, int]:
    """A phase as the breakdown's PARTS (overhead summed)."""
    return {"weights": ph.weights, "gradients": ph.gradients, "optimizer_state": ph.optimizer_state,
            "activations": ph.activations + ph.transient, "logits": ph.logits, "kv_cache": ph.kv_cache,
            "overhead": ph.overhead}


def metric_memory(name: str, parts: dict[str, int], s: Assumptions, job: Job, g: Graph, gpus: int = 1) -> JobMemory:
    """A peak's breakdown (one GPU's, or the largest GPU's of a parallel setup of `gpus`) in the job's metric."""
    parts = dict(parts)
    apply_metric(parts, s, job, g, gpus)
    return JobMemory(sum(parts.values()), name, tuple((k, parts[k]) for k in PARTS))
