"""The setups the plan search tries: GPU counts (1, 2, 4, 8, then whole nodes of 8 up to 512), and per method the
kinds of setup in order of preference (a strategy with its checkpointing and offload, over a range of counts), the
order first_fit probes them in, and the count index a number of GPUs needs. Pure data and arithmetic."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .parallel import Setup
from .sharding import GPUS_PER_NODE

GPU_COUNTS = (1, 2, 4, 8) + tuple(GPUS_PER_NODE * k for k in range(2, 65))
MAX_GPUS = GPU_COUNTS[-1]


@dataclass(frozen=True)
class Kind:
    """One line of setups tried over a range of GPU counts: `strategy` with checkpointing and offload as given, at
    GPU_COUNTS[first..last]. monotone: its per-GPU peak never rises with the count and, once a count cannot run it,
    no larger count can (pipeline stages past the layers), so a bisection finds its first fitting count; otherwise
    (tensor parallel, whose head divisibility comes and goes) each count is tried in turn."""

    strategy: str
    first: int
    last: int
    grad_ckpt: bool = False
    offload: str = "none"
    monotone: bool = True
    setups: tuple[Setup, ...] = field(init=False, repr=False, compare=False)  # by count index, first..last

    def __post_init__(self) -> None:
        made = tuple(Setup(self.strategy, GPU_COUNTS[i], self.grad_ckpt, self.offload)
                     for i in range(self.first, self.last + 1))
        object.__setattr__(self, "setups", made)  # frozen: set once, here (made once at import)

    def setup(self, index: int) -> Setup:
        return self.setups[index - self.first]


LAST = len(GPU_COUNTS) - 1
if any(GPU_COUNTS[i] != GPUS_PER_NODE * (i - 2) for i in range(3, LAST + 1)):  # what count_index reads
    raise ValueError("GPU_COUNTS past one node must be whole nodes in order")
SEVERAL_NODES = GPU_COUNTS.index(2 * GPUS_PER_NODE)  # the first count of several nodes
# Training, most preferred first (the order: one GPU, then ddp or zero2, then zero3 / fsdp with
# checkpointing). DDP is left out: past one GPU it holds the single-GPU job and its gradient buckets, never less
# than one GPU alone, which was tried first (parallel.py, ddp). Offload comes last, in its own list, tried only
# where no setup without it runs on the card up to MAX_GPUS.
TRAIN_KINDS = (Kind("single", 0, 0), Kind("single", 0, 0, True), Kind("zero2", 1, LAST), Kind("zero2", 1, LAST, True),
               Kind("fsdp", 1, LAST, True), Kind("zero3", 1, LAST, True))
# A model with routed experts also tries FSDP with its experts spread over a node (parallel.py, fsdp+ep), least
# preferred: it wins only where it needs fewer GPUs than plain FSDP (its gathered units hold 1/8 of the experts).
EXPERT_KINDS = (Kind("fsdp+ep", GPU_COUNTS.index(GPUS_PER_NODE), LAST, True),)
# ZeRO-2's optimizer offload on one GPU is a kind of its own: on two or more each GPU also holds NCCL's buffers
# (setups.training_nccl_bytes), so its figure rises from one GPU to two and one kind over both would not be monotone
OFFLOAD_KINDS = (Kind("zero2", 0, 0, True, "optimizer"), Kind("zero2", 1, LAST, True, "optimizer"),
                 Kind("zero3", 1, LAST, True, "optimizer"),
                 Kind("fsdp", 1, LAST, True, "params"), Kind("zero3", 1, LAST, True, "params"))
# Serving: one GPU, tensor parallel in a node, tensor parallel x pipeline stages over nodes (vLLM's
# tensor_parallel_size x pipeline_parallel_size), pipeline alone where the heads do not divide.
SERVE_KINDS = (Kind("single", 0, 0), Kind("tp", 1, SEVERAL_NODES - 1, monotone=False), Kind("tp+pp", SEVERAL_NODES, LAST),
               Kind("pp", 1, LAST))
TP_KINDS = SERVE_KINDS[:3]  # the serving-speed table: tensor parallel only


def count_index(need: float, first: int = 0) -> int:
    """The first index of GPU_COUNTS at or after `first` whose count is at least `need` (len(GPU_COUNTS): none is).
    Past one node the counts are 8 x (index - 2)."""
    if need > MAX_GPUS:
        return len(GPU_COUNTS)
    i = first if need <= GPUS_PER_NODE else max(first, 2 + math.ceil(need / GPUS_PER_NODE))
    while GPU_COUNTS[i] < need:
        i += 1
    return i


def kinds(method: str, offload: bool = False, experts: bool = False, checkpoints: bool = True) -> tuple[Kind, ...]:
    """The setups tried for a method, most preferred first; QLoRA's recipe always checkpoints (Dettmers et al.
    2023, arXiv:2305.14314 §2: paged optimizers absorb the spikes of gradient checkpointing). `experts`: the model's
    routed experts divide over a node, so fsdp+ep is tried too (training without offload). `checkpoints` False: the
    model's class cannot checkpoint (job_options.checkpoints), so every kind runs without, QLoRA's too."""
    return _KINDS[method == "qlora", method == "serve", offload, experts and not offload and method != "serve",
                  checkpoints or method == "serve"]


def _training_kinds(qlora: bool, offload: bool, experts: bool, checkpoints: bool) -> tuple[Kind, ...]:
    """kinds() of a training method: QLoRA's checkpointed ones alone; where the model cannot checkpoint, every
    kind with it off, each once, in their order (a kind with and without it becomes one)."""
    tried = OFFLOAD_KINDS if offload else TRAIN_KINDS + (EXPERT_KINDS if experts else ())
    if checkpoints:
        return tuple(k for k in tried if k.grad_ckpt or not qlora)
    return tuple(dict.fromkeys(replace(k, grad_ckpt=False) for k in tried))


_KINDS = {(q, serve, off, ep, ckpt): ((() if off else SERVE_KINDS) if serve else _training_kinds(q, off, ep, ckpt))
          for q in (False, True) for serve in (False, True) for off in (False, True) for ep in (False, True)
          for ckpt in (False, True)}


def probe_order(tried: tuple[Kind, ...]) -> tuple[tuple[int, Kind], ...]:
    """(rank, kind) in the order first_fit probes them (the result does not depend on it): the one-GPU kinds,
    tensor parallel in a node (3 counts), then the rest, least preferred (most sharded: the likely fewest GPUs)
    first, pipeline-alone last (each of its probes cuts the layers anew)."""
    return tuple(sorted(enumerate(tried), key=lambda x: (x[1].last > 0, x[1].monotone, x[1].strategy == "pp",
                                                         -x[0])))


ORDERS = {id(t): probe_order(t) for t in (*_KINDS.values(), TP_KINDS)}
