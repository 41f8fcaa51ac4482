"""What an offload setup moves over each GPU's host link (PCIe) in a whole job, and the hours that takes at best.

An offloaded job keeps its weights (offload "params") or its optimizer (offload "optimizer") in CPU memory, so every
step moves them across PCIe; the GPUs' FLOPs alone badly understate how long such a job runs. The data movement is
the one the ZeRO papers describe:

- ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840, section 4.1 and DeepSpeed's stage-1/2 CPU offload): each
  micro-batch's gradients go down to the CPU, where the optimizer steps; after each optimizer step the updated
  16-bit parameters come back up.
- ZeRO-Infinity (Rajbhandari et al. 2021, arXiv:2104.07857, section 4): offloaded parameters are fetched for
  every forward and every backward pass of a micro-batch, and once more where activation checkpointing
  recomputes the forward; the gradients go down as above.

Each of N ranks moves its 1/N partition over its own link; the all-gather among the ranks runs over NVLink and is
not counted, nor is the CPU's optimizer step. PCIe is full duplex, so the link time is the larger direction's bytes
over its rate: a floor under the job's hours (transfers overlap compute at best), used where it exceeds the
compute-bound hours. Pure: numbers in, numbers out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .parallel import Setup, SingleGpuJob

LinkBytes = Callable[[str, Setup], tuple[int, int]]


def job_link_bytes(job: SingleGpuJob, setup: Setup, samples: int, batch: int) -> tuple[int, int]:
    """(host-to-device, device-to-host) bytes one GPU moves over the whole job: `samples` samples in all (every
    epoch), optimizer steps of `batch` samples, one sample per micro-batch (what a plan holds: batch 1).
    (0, 0) without offload."""
    if setup.offload == "none" or samples <= 0:
        return 0, 0
    n = max(1, setup.gpus)
    micro_batches = -(-samples // n)  # per GPU: data parallel over the N ranks
    grads = -(-job.params_trainable * job.grad_bytes // n)
    if setup.offload == "params":
        # what a rank fetches: the params as computed with (16-bit), or their quantised storage where smaller (NF4)
        weights = min(job.phases[0].weights, job.params_total * job.compute_bytes) if job.phases else 0
        passes = 3 if setup.grad_ckpt else 2
        return micro_batches * passes * -(-weights // n), micro_batches * grads
    steps = -(-samples // max(1, batch))
    updated = -(-job.params_trainable * job.compute_bytes // n)
    return steps * updated, micro_batches * grads


def link_bytes(jobs: Mapping[str, SingleGpuJob], samples: int, batch: int) -> LinkBytes:
    """plans.search_plans' `link`: job_link_bytes of a method's job under a setup."""
    def moved(method: str, setup: Setup) -> tuple[int, int]:
        return job_link_bytes(jobs[method], setup, samples, batch)
    return moved


def link_hours(moved: tuple[int, int], link_gb_per_s: float) -> float | None:
    """Hours the larger direction of `moved` takes at `link_gb_per_s` (GB = 1e9 bytes per second, one direction);
    None where the GPU's link rate is not known."""
    if link_gb_per_s <= 0:
        return None
    return max(moved) / (link_gb_per_s * 1e9) / 3600.0
