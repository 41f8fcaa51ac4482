"""Report → the model page's setups: the headline per method, the plans per card and the serving speeds, as text."""

from __future__ import annotations

from typing import Any

from .. import format as f
from .. import setups_text
from ..estimator import Report


def setups_context(report: Report) -> dict[str, Any]:
    """What model.html shows of report.plans, plans_unreachable and serving (strings and booleans only)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    capacity = {c.name: c.capacity_bytes for c in report.memory.cards}
    float32 = setups_text.float32_cards(report.memory.cards)
    for p in report.plans:
        row = rows.setdefault((p.gpu, p.gpu_model), {"card": p.gpu, "gpu": p.gpu_model or p.gpu,
                                                     "price": f.usd_per_hour(p.usd_per_hour / p.gpus
                                                                             if p.usd_per_hour else None),
                                                     "cells": {}})
        row["cells"][p.method] = {
            "setup": setups_text.label(p) if p.fits else setups_text.unfit_setup(p, capacity[p.gpu]),
            "peak": setups_text.peak_cell(p, float32), "usd": None if p.job_usd is None else f.usd(p.job_usd),
            # a serving plan has no job to price: its "cheapest" is per hour (one user's server); the serving table
            # marks the cheapest per output token
            "smallest": p.smallest, "cheapest": ("cheapest per hour" if p.method == "serve" else "cheapest")
            if p.cheapest else None, "pcie": setups_text.link_bound(p)}
    methods = [m for m in setups_text.METHOD_NAMES if any(m in r["cells"] for r in rows.values())]
    for r in rows.values():
        r["cells"] = [r["cells"].get(m) for m in methods]
    per_token = setups_text.cheapest_per_token(report.serving)
    serving = [{"card": s.gpu, "setup": f.setup(s.gpus, s.gpu_model or s.gpu, s.strategy),
                "decode": f.tokens_per_s(s.decode_tokens_per_s), "prefill": f.tokens_per_s(s.prefill_tokens_per_s),
                "concurrency": f.count(s.max_concurrency),
                "per_million": f.usd_per_million(s.usd_per_million_output_tokens),
                "cheapest": s is per_token} for s in report.serving]
    return {
        "headline": [setups_text.sentence(r) for r in
                     setups_text.headline(report.plans, report.plans_unreachable, report.serving,
                                          float32)],
        "plans": list(rows.values()),
        "methods": [setups_text.METHOD_NAMES[m] for m in methods],
        "unreachable": [{"method": setups_text.METHOD_NAMES.get(u.method, u.method), "reason": u.reason}
                        for u in report.plans_unreachable],
        "floors": setups_text.floor_sentences(report.plan_floors, report.plans,
                                              {c.name: c.budget_bytes for c in report.memory.cards}, capacity),
        "serving": serving,
        "serve_tokens": f.count(report.memory.serve_tokens),
        # what each GPU of a training setup of several holds beside its tensors (setups.training_nccl_bytes)
        "nccl": f.gb(int(dict(report.memory.assumptions)["nccl_bytes_per_gpu"])),
        # whether the model's classes can checkpoint (checks' no_grad_ckpt): QLoRA's recipe does, where they can
        "checkpoints": not any(x.check == "no_grad_ckpt" for x in report.findings),
    }
