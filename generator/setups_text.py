"""A Report's setups (plans, plans_unreachable, serving) as the words the page and the terminal share."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from . import format as f

METHOD_NAMES = {"full": "Full fine-tune", "lora": "LoRA", "qlora": "QLoRA", "serve": "Serving"}


_REQUIRED = object()


def _get(x: Any, key: str, default: Any = _REQUIRED) -> Any:
    """A field of a Report object or of its JSON dict; a missing one is an error unless a default is given."""
    if default is _REQUIRED:
        return x[key] if isinstance(x, dict) else getattr(x, key)
    return x.get(key, default) if isinstance(x, dict) else getattr(x, key, default)


def chosen(plans: Any, method: str) -> Any | None:
    """The plan the headline names for a method: the cheapest that fits (the job's cost; serving: per hour),
    then the fewest GPUs; None when nothing fits."""
    fitting = [p for p in plans if _get(p, "method") == method and _get(p, "fits")]
    if not fitting:
        return None

    def key(p: Any) -> tuple:
        cost = _get(p, "job_usd") if method != "serve" else _get(p, "usd_per_hour")
        return (cost is None, cost or 0.0, _get(p, "gpus"))
    return min(fitting, key=key)


def label(p: Any) -> str:
    """The setup of one plan, or of a serving-speed row (no checkpointing, no offload), in words: "8× H100 SXM with
    ZeRO-3 and gradient checkpointing"; an offload plan's with the host memory it needs per node, which a card's
    usual instances may not have."""
    host = _get(p, "host_bytes_per_node", None)
    return f.setup(_get(p, "gpus"), _get(p, "gpu_model") or _get(p, "gpu"), _get(p, "strategy"),
                   bool(_get(p, "grad_ckpt", False)), _get(p, "offload", "none")) \
        + (f" ({f.gb(host)} of host memory per node)" if host else "")


# A card whose GPUs vLLM has no attention kernel for the model on, or refuses its quantisation on (estimator
# vllm_support.serving_scale: 0)
NOT_SERVED = "vLLM does not serve it here"


def _tight(p: Any, capacity_bytes: int) -> bool:
    """Whether a plan over the card's budget is within its memory less the CUDA context (`capacity_bytes`), as the
    batch tables call a card that holds batch 1 only so."""
    return _get(p, "per_gpu_peak_bytes") <= capacity_bytes


def unfit_setup(p: Any, capacity_bytes: int) -> str:
    """A plan that no count the search tried holds within the card's budget, by its most GPUs: "tight: 512× T4 with
    ZeRO-3 ..." (its setup, offload included) where it is _tight; else "does not fit on 512 GPUs"."""
    return f"tight: {label(p)}" if _tight(p, capacity_bytes) else f"does not fit on {f.gpu_count(_get(p, 'gpus'))}"


def card_setups(plans: Any, method: str, card: str, split_cards: int = 0, capacity_bytes: int = 0) -> str | None:
    """Where one card holds no batch of `method`: the fewest of its GPUs a setup holds it on ("setups: 4 GPUs"),
    else the most the search tried ("no setup up to 512 GPUs", or "tight on 512 GPUs" where the card's memory less
    the CUDA context, `capacity_bytes`, holds that setup: unfit_setup); None where no setup was searched on it
    (NOT_SERVED for serving).
    Beside a split over `split_cards` that holds a batch, only a setup on fewer GPUs (one GPU, checkpointed) is
    worth naming. The batch tables of the page and the terminal say it alike."""
    mine = [p for p in plans if _get(p, "method") == method and _get(p, "gpu") == card]
    fitting = [_get(p, "gpus") for p in mine if _get(p, "fits")]
    if split_cards:
        return f"setups: {f.gpu_count(min(fitting))}" if fitting and min(fitting) < split_cards else None
    if fitting:
        return f"setups: {f.gpu_count(min(fitting))}"
    if not mine:  # serving is searched on every GPU but those vLLM has no kernel for (the warning names them)
        return NOT_SERVED if method == "serve" else None
    return none_holds(max(mine, key=lambda p: _get(p, "gpus")), capacity_bytes)


def none_holds(most: Any, capacity_bytes: int) -> str:
    """Where no setup holds a method on a card, by the plan of the most GPUs the search tried: "no setup up to 512
    GPUs", or "tight on 512 GPUs" (unfit_setup)."""
    return f"{'tight on' if _tight(most, capacity_bytes) else 'no setup up to'} {f.gpu_count(_get(most, 'gpus'))}"


def link_bound(p: Any) -> bool:
    """Whether an offload plan's hours are its PCIe transfers' rather than its FLOPs' (memory.host_link)."""
    linked, hours = _get(p, "host_link_hours"), _get(p, "job_hours")
    return linked is not None and hours is not None and linked >= hours


def cheapest_per_token(serving: Any) -> Any | None:
    """The serving row whose output tokens cost least at its full concurrency, then the fewest GPUs; None when no
    row is priced. The headline's plan is the cheapest per hour: a server for one user. This is the one for a
    server kept full, where the per-hour choice can cost ten times more per token (Llama-3.1-70B: 2x A100 80GB
    hold 3 sequences beside the weights, 2x H200 hold 88)."""
    priced = [s for s in serving if _get(s, "usd_per_million_output_tokens") is not None]
    return min(priced, key=lambda s: (_get(s, "usd_per_million_output_tokens"), _get(s, "gpus")), default=None)


def serving_of(serving: Any, plan: Any) -> Any | None:
    """The serving-speed row of the card and GPU a serving plan names."""
    for s in serving:
        if _get(s, "gpu") == _get(plan, "gpu") and _get(s, "gpu_model") == _get(plan, "gpu_model"):
            return s
    return None


def float32_cards(cards: Any) -> frozenset[str]:
    """The cards (CardPlan) on whose GPUs vLLM serves the model in float32 (serve_dtype)."""
    return frozenset(_get(c, "name") for c in cards if _get(c, "serve_dtype"))


def peak_cell(p: Any, float32: Collection[str]) -> str:
    """A plan's per-GPU peak, marked where it is a serving plan on a card of `float32` (float32_cards)."""
    return f.gb(_get(p, "per_gpu_peak_bytes")) + (", float32" if _get(p, "method") == "serve"
                                                   and _get(p, "gpu") in float32 else "")


def headline(plans: Any, unreachable: Any, serving: Any, float32: Collection[str] = ()) -> list[dict[str, str]]:
    """One sentence per method: its setup and cost (serving: its decode speed), or why nothing runs it. `float32`:
    the cards where vLLM serves the model in float32 (CardPlan.serve_dtype), whose speed is not priced."""
    why = {_get(u, "method"): _get(u, "reason") for u in unreachable}
    out = []
    for method, name in METHOD_NAMES.items():
        p = chosen(plans, method)
        if p is None:
            if method in why:
                out.append({"method": name, "setup": "", "detail": why[method]})
            continue
        if method == "serve":
            s = serving_of(serving, p)
            # no speed row: an encoder's, or a GPU vLLM serves the model on in float32 (half_precision_serving)
            detail = ("in float32 there, its speed not priced" if _get(p, "gpu") in float32 else
                      "its speed not priced") if s is None else \
                f"about {f.tokens_per_s(_get(s, 'decode_tokens_per_s'))} per sequence"
            cheap = cheapest_per_token(serving)
            if cheap is not None and cheap is not s:
                detail += (f"; the cheapest per token at full load: {label(cheap)}, "
                           f"{f.usd(_get(cheap, 'usd_per_million_output_tokens'))} per M output tokens "
                           f"at {f.count(_get(cheap, 'max_concurrency'))} sequences")
        else:
            detail = "" if _get(p, "job_usd") is None else f"about {f.usd(_get(p, 'job_usd'))} for the reference job"
            if detail and link_bound(p):
                detail += ", bound by moving the offloaded weights over PCIe"
        out.append({"method": name, "setup": label(p), "detail": detail})
    return out


def sentence(row: dict[str, str]) -> str:
    """"Full fine-tune: 8× H100 SXM with ZeRO-3, about $1,234 for the reference job." """
    if not row["setup"]:  # the reason says it all: nothing up to 512 GPUs holds it, or the method does not apply
        return f"{row['method']}: {row['detail']}."
    return f"{row['method']}: {row['setup']}" + (f", {row['detail']}." if row["detail"] else ".")


_FLOOR_PARTS = {"weights": "the gathered layers", "gradients": "their gradients", "optimizer_state":
                "optimizer state", "activations": "activations", "logits": "logits", "kv_cache": "KV cache",
                "overhead": "other tensors", "nccl": "NCCL's buffers"}
# Why a floor is one: what data parallelism leaves whole on each GPU, and what the search does not try
FLOOR_WHY = ("ZeRO and FSDP divide the weights, gradients and optimizer state among the GPUs, not each GPU's own "
             "activations and logits, nor the layers it gathers to compute, nor the buffers its gradients are reduced "
             "through, nor NCCL's; tensor and sequence parallelism, which divide activations too, are not tried for "
             "training.")


def floor_sentences(floors: Any, plans: Any, budget_bytes: dict[str, int],
                    capacity_bytes: dict[str, int] | None = None) -> list[str]:
    """Per PlanFloor: the cards that hold its method on no count the search tried, and whether any count would
    (the floor over a card's budget: no) or more would; then FLOOR_WHY. `budget_bytes`: each card's budget in bytes;
    `capacity_bytes`: its memory less the CUDA context, which a floor over the budget may still be within (tight)."""
    out = []
    for fl in floors:
        method = _get(fl, "method")
        over = [p for p in plans if _get(p, "method") == method and not _get(p, "fits")]
        if not over:
            continue
        cards = list(dict.fromkeys(_get(p, "gpu") for p in over))
        top = f.count(max(_get(p, "gpus") for p in over))  # the most GPUs the search tried
        floor, strategy, parts = _get(fl, "floor_bytes"), _get(fl, "strategy"), _get(fl, "parts")
        names = {**_FLOOR_PARTS, **({"weights": "the weights, whole"} if strategy == "zero2" else {}),
                 **({"overhead": "other tensors (DeepSpeed's gradient reduce bucket among them)"}
                    if strategy in ("zero2", "zero3") else {})}
        kept = f.words_list([f"{names.get(k, k)} {f.gb(v)}"
                             for k, v in (parts.items() if isinstance(parts, dict) else parts)])
        how = (strategy, _get(fl, "grad_ckpt"), _get(fl, "offload"))
        never = [c for c in cards if budget_bytes[c] < floor]
        beyond = _get(fl, "beyond", ())
        more = [(c, n) for c, n in (beyond.items() if isinstance(beyond, dict) else beyond)]
        text = (f"{METHOD_NAMES.get(method, method)}: no count of {f.words_list(cards)} cards up to {top} holds "
                f"batch 1. With {f.strategy_words(*how)}, the "
                f"setup tried that keeps least, each GPU keeps {f.gb(floor)} however many share the job ({kept})")
        if never:
            text += (f", over the budget of the {f.words_list(never)} "
                     f"({f.words_list([f.gb(budget_bytes[c]) for c in never])}): no number of these cards would hold "
                     "it with ZeRO or FSDP")
            tight = [c for c in never if floor <= (capacity_bytes or {}).get(c, 0)]
            if tight:  # as the per-card table calls a card whose memory holds batch 1 and whose budget does not
                text += (f" within the headroom, though the {f.words_list(tight)}'s memory less the CUDA context "
                         f"({f.words_list([f.gb((capacity_bytes or {})[c]) for c in tight])}) holds it: tight")
                # where the most GPUs tried keep more than that memory, tight needs more of them
                if any(not _tight(p, (capacity_bytes or {})[_get(p, "gpu")])
                       for p in over if _get(p, "gpu") in tight and f.count(_get(p, "gpus")) == top):
                    text += f", on more GPUs than the {top} tried"
        if more:
            needs = f.words_list([f.setup(n, c, *how) if n else f"more than a million {c}" for c, n in more])
            text += f"; {needs} would hold it" if never else f". {needs} would hold it"
        out.append(text + ".")
    return out + [FLOOR_WHY] if out else out
