"""PeakTracker: PyTorch's MemTracker, made to work on peft models, cheap on deep models, and saying when the peak was."""

from __future__ import annotations

from collections import Counter
from typing import Any
from unittest import mock

import torch
from torch.autograd.graph import register_multi_grad_hook
from torch.distributed._tools import mod_tracker
from torch.distributed._tools.mem_tracker import _TOTAL_KEY, MemTracker, _MemRefType, _UpdateType
from torch.distributed._tools.mod_tracker import ModTracker
from torch.utils.weak import WeakIdKeyDictionary

from .allocator import Event

CATEGORY_NAMES = {
    _MemRefType.PARAM: "param", _MemRefType.BUFFER: "buffer", _MemRefType.GRAD: "grad", _MemRefType.ACT: "act",
    _MemRefType.TEMP: "temp", _MemRefType.OPT: "opt", _MemRefType.OTH: "other",
}


class HookReleasingModTracker(ModTracker):
    """ModTracker without its leak. Its forward hooks put a multi-grad hook on each module's inputs and outputs
    that require grad, and each hook keeps those tensors' grad_fns (torch/autograd/graph.py
    register_multi_grad_hook) while the grad_fn keeps the hook: a cycle through C++ that gc cannot see, so every
    step's graph outlived it. Its saved tensors are freed by the backward, but not the leaves it reaches: the
    embedding's output that enable_input_require_grads makes a leaf (peft does for checkpointing and in
    prepare_model_for_kbit_training) and the .grad accumulated into it stayed alive at every later peak, where a
    real run frees both with the graph (FINDINGS.md F29). The hooks are kept here and removed by
    `release_grad_hooks` once their backward is over."""

    def __init__(self) -> None:
        super().__init__()
        self._grad_hooks: list[Any] = []

    def _register(self, tensors, fn, mode="all"):
        handle = register_multi_grad_hook(tensors, fn, mode=mode)
        self._grad_hooks.append(handle)
        return handle

    def _fw_pre_hook(self, mod, input):
        with mock.patch.object(mod_tracker, "register_multi_grad_hook", self._register):
            return super()._fw_pre_hook(mod, input)

    def _fw_post_hook(self, mod, input, output):
        with mock.patch.object(mod_tracker, "register_multi_grad_hook", self._register):
            return super()._fw_post_hook(mod, input, output)

    def release_grad_hooks(self) -> None:
        for handle in self._grad_hooks:
            handle.remove()
        self._grad_hooks.clear()


class PeakTracker(MemTracker):
    """MemTracker with four changes (torch 2.13 `torch/distributed/_tools/mem_tracker.py`).

    1. Gradient hooks go only on parameters that require grad. MemTracker hooks every parameter of
       every module it enters, and `register_hook` raises on a frozen one ("cannot register a hook on a
       tensor that doesn't require gradient"): every peft model has a frozen base. Frozen parameters
       are still tracked as PARAM; they never get a gradient, so no hook is lost.
    2. Only the global peak is kept. MemTracker also refreshes a per-module peak for every active
       module on every op, which is quadratic in depth (SmolLM-135M, 30 layers: 34 s a step instead
       of about 2 s). Nothing here reads the per-module peaks.
    3. The peak is labelled: the runner's `stage` (e.g. "step 2", "prefill", "decode"), the phase
       (forward / backward / optimizer) and the innermost module running. With `explain=True` each
       storage remembers the op, shape and dtype that made it, and with `capture_at` (a peak found by
       an earlier identical run) the live storages are listed when the total first reaches it.
    4. Its module tracker is a HookReleasingModTracker, whose gradient hooks the runner drops after each
       backward (`backward_done`): ModTracker's own kept every step's graph, and a leaf with it, alive.
    5. With `record_allocations=True` every storage made and freed is recorded, in order (`allocation_events`), for
       a replay through a model of the CUDA caching allocator after the run (allocator.capacity_figures).
    """

    def __init__(self, explain: bool = False, capture_at: int | None = None, record_allocations: bool = False) -> None:
        super().__init__()
        self._mod_tracker: HookReleasingModTracker = HookReleasingModTracker()
        self.stage = "setup"
        self.phase_key: str | None = None  # when set, the per-phase peaks below are kept under this key + phase
        self.phase_peaks: dict[str, int] = {}
        self.peak_where: dict[str, Any] = {}
        self.explain = explain
        self.capture_at = capture_at
        self.live_at_peak: list[dict[str, Any]] | None = None
        self._origin: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._op = ""
        self.allocation_events: list[Event] | None = [] if record_allocations else None

    # 1. frozen parameters -------------------------------------------------------------------------
    def _track_module_params_and_buffers(self, module: torch.nn.Module, install_grad_hooks: bool = True):
        out = super()._track_module_params_and_buffers(module, install_grad_hooks=False)
        if install_grad_hooks:
            for param in module.parameters():
                if param.requires_grad and self._param_to_grad_hook_handles.get(param, None) is None:
                    self._param_to_grad_hook_handles[param] = (
                        param.register_hook(self._grad_hook),
                        param.register_post_accumulate_grad_hook(lambda p: self._grad_hook(p.grad)),
                    )
        return out

    def _grad_hook(self, grad: torch.Tensor) -> None:
        self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)  # must return None: a hook's value replaces grad

    # 5. the allocations, for the caching allocator's replay --------------------------------------------------
    def _update_snap(self, u_type, winfo, old_mem_consumed=None, old_reftype=None) -> None:
        super()._update_snap(u_type, winfo, old_mem_consumed=old_mem_consumed, old_reftype=old_reftype)
        events = self.allocation_events
        if events is None:
            return
        if u_type == _UpdateType.ADD:
            events.append((id(winfo), winfo.mem_consumed))
        elif u_type == _UpdateType.DEL:
            events.append((id(winfo), None))
        elif u_type == _UpdateType.SIZE:  # resize_ (FSDP's, not a single-GPU step's): the old block, then the new
            if old_mem_consumed:  # a storage of 0 bytes was never allocated
                events.append((id(winfo), None))
            if winfo.mem_consumed:
                events.append((id(winfo), winfo.mem_consumed))

    # 2 and 3. global peak with its place ----------------------------------------------------------
    def _where(self) -> dict[str, Any]:
        phase = "optimizer" if self._in_opt else "backward" if self._mod_tracker.is_bw else "forward"
        parents = [p for p in self._mod_tracker.parents if p != "Global"]
        module = max(parents, key=lambda p: (p.count("."), len(p))) if parents else ""
        return {"stage": self.stage, "phase": phase, "module": module}

    def _update_peak_stats(self, peak_state: Any) -> None:
        if self.phase_key is not None:
            now = sum(snap[_TOTAL_KEY] for snap in self._curr_mem_snap.values())
            phase = "optimizer" if self._in_opt else "backward" if self._mod_tracker.is_bw else "forward"
            key = self.phase_key if self.phase_key in ("prefill", "decode") else f"{self.phase_key} {phase}"
            if now > self.phase_peaks.get(key, -1):
                self.phase_peaks[key] = now
        for dev, snap in self._curr_mem_snap.items():
            total = snap[_TOTAL_KEY]
            if self._peak_mem.get(dev, 0) < total:
                self._peak_mem[dev] = total
                self._peak_mem_snap[dev] = dict(snap)
                self.peak_where = self._where()
                if self.capture_at is not None and self.live_at_peak is None and total >= self.capture_at:
                    self.live_at_peak = self.live_tensors()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._op = getattr(func, "__name__", str(func))
        return super().__torch_dispatch__(func, types, args, kwargs)

    def _track(self, reftype: Any, t: torch.Tensor) -> None:
        super()._track(reftype, t)
        if self.explain:
            st = t.untyped_storage()
            if st not in self._origin:
                where = self._where()
                self._origin[st] = (self._op, tuple(t.shape), str(t.dtype).replace("torch.", ""),
                                    f"{where['stage']}/{where['phase']}", where["module"])

    def live_tensors(self) -> list[dict[str, Any]]:
        """Live storages grouped by (category, op, shape, dtype, where made), largest group first."""
        groups: Counter = Counter()
        counts: Counter = Counter()
        for st, (winfo, _) in list(self._WINFO.items()):
            origin = self._origin.get(st, ("(before tracking)", (), "", "", ""))
            key = (CATEGORY_NAMES.get(winfo.reftype, str(winfo.reftype)),) + tuple(origin)
            groups[key] += winfo.mem_consumed
            counts[key] += 1
        rows = [{"category": k[0], "op": k[1], "shape": list(k[2]), "dtype": k[3], "made_in": k[4],
                 "module": k[5], "count": counts[k], "bytes": b} for k, b in groups.items() if b]
        return sorted(rows, key=lambda r: -r["bytes"])

    def backward_done(self) -> None:
        """The step's backward is over: drop the module tracker's gradient hooks, freeing what they kept."""
        self._mod_tracker.release_grad_hooks()

    def reset_peak(self) -> None:
        """Start a new peak from the current total (MemTracker keeps one peak for its whole life)."""
        self._peak_mem = {dev: snap[_TOTAL_KEY] for dev, snap in self._curr_mem_snap.items()}
        self._peak_mem_snap = {dev: dict(snap) for dev, snap in self._curr_mem_snap.items()}
        self.peak_where = self._where()

    def peak_breakdown(self) -> dict[str, int]:
        """{"total": bytes, "param": ..., "grad": ..., ...} summed over devices."""
        out: Counter = Counter()
        for snap in self._peak_mem_snap.values():
            for key, value in snap.items():
                out["total" if key == _TOTAL_KEY else CATEGORY_NAMES.get(key, str(key))] += value  # type: ignore[call-overload]
        return {k: int(out[k]) for k in ("total", *CATEGORY_NAMES.values())}
