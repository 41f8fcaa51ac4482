"""Pipeline-parallel stages of one job: the contiguous cut of its layers minimising the largest stage (vLLM's own cut
for its serving job), and every stage's phase bytes (parallel.py's pp and tp+pp; its docstring has the rules and
sources). Pure: numbers in, numbers out. The job and its phases are parallel.SingleGpuJob and parallel.Phase, typed
loosely here: parallel imports this.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from typing import Any


def stage_rows(job: Any, phases: tuple[Any, ...], stages: int, tp: int = 1,
               ckpt: bool = False) -> tuple[tuple[int, ...], list]:
    """The contiguous cut of the layers into `stages` minimising the largest stage (a serving job: vLLM's own
    cut, vllm_stage_layers), and every stage's phases.

    Where every layer is alike, each phase's stage bytes are linear in the stage's layer count n: a + n x b, where b
    is one layer's share (its params, activations and KV cache) and a holds the ends (the embedding on
    the first stage; final norm, head, a tied head's own copy, and logits on the last) and the per-process overhead.
    A trained model's ends take the phase's bytes per parameter; a frozen one's (LoRA, QLoRA, serving) are 16-bit
    weights alone, as bitsandbytes and the quantised checkpoints leave embeddings and heads (split over `tp` ranks
    where the phases are one tensor-parallel rank's: tp+pp). Under a budget C a stage
    holds min over phases of (C - a) // b layers; the smallest C whose capacities (each >= 1) cover the layers is
    found by bisection, then every stage gets one layer and the rest fill the stages in order up to capacity.
    Layers differ (an MoE's dense first layers, a hybrid's kinds, an encoder-decoder's two stacks): each stage holds
    its own layers' share, by their parameters (SingleGpuJob.layer_params: the weight-like parts, a frozen base's
    weights alone, its adapters' spread evenly) and their KV caches (layer_kv), activations evenly, and the cut is
    found on those bytes (_balanced_counts); where every layer is alike, b as above. A stage's layer activations
    follow its layers' own (SingleGpuJob.layer_activations), but in the checkpointed phases (`ckpt`: job.phases_ckpt),
    whose layers keep their inputs alone, alike."""
    p, layers = job.params_total or 1, job.layers
    end_params = job.first_stage_params + job.last_stage_params
    layer_params = max(0, p - end_params) / layers
    # a frozen model's ends in 16 bits per parameter, split over `tp` tensor-parallel ranks where the phases are one
    # rank's (parallel.tp_phases): vocab-parallel embedding and head, towers split by vLLM's default
    # mm_encoder_tp_mode "weights" (config/multimodal.py)
    frozen, c = job.method != "full", job.compute_bytes / tp
    mm = sum(job.end_matmul) + sum(job.layer_matmul) if len(job.layer_matmul) == layers else 0

    def terms(ph: Any, first: bool, last: bool) -> tuple[str, dict[str, float], dict[str, float]]:
        # a last stage that is not also the first keeps its own copy of a tied head (SingleGpuJob.tied_head_params);
        # vLLM's every stage its own multimodal towers (SingleGpuJob.tower_params)
        ends = (job.first_stage_params if first else job.tower_params) \
            + (job.last_stage_params + (0 if first else job.tied_head_params) if last else 0)
        if frozen:  # the ends' 16-bit weights; the layers the rest: the base, the adapters and their states
            a = {f: float(c * ends) if f == "weights" else 0.0 for f in _SCALED}
            b = {f: max(0, getattr(ph, f) - (c * end_params if f == "weights" else 0)) / layers for f in _SCALED}
        else:
            a = {f: getattr(ph, f) * ends / p for f in _SCALED}
            b = {f: getattr(ph, f) * layer_params / p for f in _SCALED}
            if mm:  # autocast's copies by matmul weights: the embedding's none, the head's whole (F3)
                a["overhead_weights"] = ph.overhead_weights * (job.end_matmul[0] * first + job.end_matmul[1] * last) / mm
                b["overhead_weights"] = ph.overhead_weights * sum(job.layer_matmul) / layers / mm
        # a serving startup's layer transient on every stage, its sampler on the last (Phase.transient, last_stage),
        # the hidden states handed to every stage but the first (SingleGpuJob.handoff_bytes)
        # each stage recomputes its own layers: one layer's working set whole on each (Phase.stage_whole); the
        # embedding's output on the first, the head's on the last (Phase.embed_activations, head_activations)
        ends_acts = ph.embed_activations + ph.head_activations
        a.update(activations=float(ph.stage_whole + (ph.embed_activations if first else 0)
                                   + (ph.head_activations if last else 0)),
                 kv_cache=0.0, logits=ph.logits if last else 0.0,
                 overhead_fixed=ph.overhead_fixed + (0 if first else job.handoff_bytes), transient=ph.transient,
                 last_stage=ph.last_stage if last else 0.0)
        b.update(activations=(ph.activations - ph.stage_whole - ends_acts) / layers, kv_cache=ph.kv_cache / layers,
                 logits=0.0, overhead_fixed=0.0, transient=0.0, last_stage=0.0)
        return ph.name, a, b

    # The stages between the first and the last hold the same terms: one row stands for all of them.
    ends = {(k == 0, k == stages - 1) for k in (0, min(1, stages - 1), stages - 1)}
    row_of = {key: [terms(ph, *key) for ph in phases] for key in ends}
    # per row kind, each phase's (sum of a, sum of b): the bytes of a stage of n layers are a + n x b
    sums = {key: [(sum(a.values()), sum(b.values())) for _, a, b in row] for key, row in row_of.items()}
    order = [(k == 0, k == stages - 1) for k in range(stages)]
    stages_of = {key: order.count(key) for key in sums}  # how many stages hold each row kind

    def capacity(budget: float) -> dict[tuple[bool, bool], int]:
        """Layers a stage of each row kind holds within `budget`."""
        return {key: min(layers if b <= 0 else int((budget - a) // b) for a, b in row) for key, row in sums.items()}

    # capacity() and its test, row kind by row kind with an early exit (the bisection below asks it ~40 times):
    # per row kind, how many stages hold it, whether a phase adds nothing per layer (it allows `layers`) and the
    # (a, b) of the phases that do
    kinds_ = [(stages_of[key], any(b <= 0 for _, b in row), [(a, b) for a, b in row if b > 0])
              for key, row in sums.items()]

    def fits(budget: float) -> bool:
        """min(capacity(budget).values()) >= 1 and the stages hold every layer."""
        held = 0
        for count, flat, growing in kinds_:
            cap = layers if flat or not growing else int((budget - growing[0][0]) // growing[0][1])
            for a, b in growing:
                held_here = int((budget - a) // b)
                if held_here < cap:
                    cap = held_here
            if cap < 1:
                return False
            held += cap * count
        return held >= layers

    share = _shares(job, frozen, () if ckpt else job.layer_activations, bool(mm))
    if job.engine_cut:  # vLLM cuts its own way, whatever the stages then hold
        counts = vllm_stage_layers(layers, stages)
    elif share:  # layers that differ: each its own bytes
        counts = _balanced_counts(row_of, order, layers, share)
    else:
        lo, hi = 0.0, max(a + layers * b for row in sums.values() for a, b in row) + 1.0
        while hi - lo > 1.0:
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if fits(mid) else (mid, hi)
        counts, left = [1] * stages, layers - stages
        cap = capacity(hi)
        for k, key in enumerate(order):
            more = min(left, max(0, cap[key] - 1))
            counts[k] += more
            left -= more
        counts[-1] += left  # nothing is left when fits(hi); kept so every layer lands on a stage
    rows = []
    done = set()  # stages alike hold the same rows: listed once (peak_parts takes the max)
    start = 0
    for key, n in zip(order, counts, strict=True):
        # each field's share of the layers' bytes held by this stage's n layers (evenly: n / layers)
        held = {f: (share[f][start + n] - share[f][start]) * layers if f in share else n for f in _LAYERED}
        start += n
        seen = (key, n) if not share else (key, tuple(held.values()))
        if seen in done:
            continue
        done.add(seen)
        for name, a, b in row_of[key]:
            v = {f: _ceil(a[f] + held.get(f, n) * b[f]) for f in a}
            rows.append((name, (v["weights"], v["gradients"], v["optimizer_state"], v["activations"] + v["transient"],
                                v["logits"], v["kv_cache"],
                                v["overhead_weights"] + v["overhead_step"] + v["overhead_fixed"] + v["last_stage"])))
    return tuple(counts), rows


def _balanced_counts(row_of: dict, order: list[tuple[bool, bool]], layers: int,
                     share: dict[str, tuple[float, ...]]) -> list[int]:
    """The contiguous cut minimising the largest stage where layers differ (_shares): each phase's bytes as a
    running sum over the layers, and the least budget whose greedy fill holds every layer, found by bisection. The
    fill gives each stage in turn as many layers as fit, leaving one for each stage after it: a stage's bytes only
    grow with its layers, so a fill that reaches further at each stage is never worse."""
    running: dict[tuple[bool, bool], list[tuple[float, list[float]]]] = {}
    for key, row in row_of.items():
        running[key] = [(sum(a.values()), list(accumulate(
            (sum(b[f] * layers * (share[f][i + 1] - share[f][i]) if f in share else b[f] for f in b)
             for i in range(layers)), initial=0.0))) for _, a, b in row]
    stages = len(order)

    def fill(budget: float) -> list[int] | None:
        counts, start = [], 0
        for k, key in enumerate(order):
            end = layers - (stages - k - 1)
            for a, run in running[key]:
                end = min(end, bisect_right(run, budget - a + run[start], start, end + 1) - 1)
            if end <= start:
                return None
            counts.append(end - start)
            start = end
        return counts if start == layers else None

    lo, hi = 0.0, max(a + run[-1] for per in running.values() for a, run in per) + 1.0
    best = fill(hi)
    while hi - lo > max(1.0, hi * 1e-9):
        mid = (lo + hi) / 2
        got = fill(mid)
        lo, hi, best = (lo, mid, got) if got else (mid, hi, best)
    assert best is not None  # every layer fits a budget of the whole model's bytes
    return best


def _shares(job: Any, frozen: bool, acts: tuple[int, ...], by_matmul: bool = False) -> dict[str, tuple[float, ...]]:
    """Per field a stage's layers scale (_LAYERED) and whose layers differ, the running share of the layers' whole
    (0 at layer 0, 1 past the last): parameters for the weight-like fields (a frozen base's weights and their
    autocast copies alone), KV caches for the cache, `acts` (each layer's activations) for the activations, and a
    trained model's autocast copies by its layers' matmul weights (`by_matmul`). {} where every layer is alike."""
    out = {}
    matmul = by_matmul and not frozen  # a trained model's copies follow the matmul weights, not the parameters
    by_params = ("weights", "overhead_weights") if frozen else \
        tuple(f for f in _SCALED if not (matmul and f == "overhead_weights"))
    for fields, values in ((by_params, job.layer_params), (("kv_cache",), job.layer_kv), (("activations",), acts),
                           (("overhead_weights",), job.layer_matmul if matmul else ())):
        if len(values) == job.layers and len(set(values)) > 1 and sum(values) > 0:
            total = sum(values)
            out.update(dict.fromkeys(fields, tuple(r / total for r in accumulate(values, initial=0))))
    return out


_SCALED = ("weights", "gradients", "optimizer_state", "overhead_weights", "overhead_step")
_LAYERED = (*_SCALED, "kv_cache", "activations")  # the fields whose stage bytes follow its layers' own share


def vllm_stage_layers(layers: int, stages: int) -> list[int]:
    """The layers of each of vLLM's pipeline stages by default (vllm/distributed/utils.py get_pp_indices, v0.19.1;
    VLLM_PP_LAYER_PARTITION overrides it): layers // stages each, the remainder one each to the stages before the
    last, from the second-to-last back, sparing the last (the head, the sampler) and, where it can, the first."""
    counts = [layers // stages] * stages
    for i in range(2, layers % stages + 2):
        counts[-i] += 1
    return counts


def _ceil(x: float) -> int:
    return int(-(-x // 1))
