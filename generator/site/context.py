"""Report (+ its record and the settings) → the dict the model page reads; all text via format.py.

Nothing here estimates anything: values are looked up in the Report (and, for sources and prices,
in the record and site_config.yaml) and turned into strings, so the template only places them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .. import format as f
from .. import setups_text
from ..errors import ConfigError
from ..estimator import Report
from ..records import ModelRecord
from ..settings import Settings
from . import accuracy_line, accuracy_page, charts, pages, sources
from .assumptions_context import assumptions_context
from .setups_context import setups_context
from .structure_table import structure_context

METHODS = (("full", "train_full"), ("lora", "train_lora"), ("qlora", "train_qlora"), ("serve", "serve"))
_NOT_HUB = "This config.json is not the Hub's file: "
_CRAWL = " The nightly crawl replaces it with the Hub's file."
# What the page says about a config.json that is not the Hub's own file (records.PROVENANCES).
CONFIG_NOTICES = {
    "copy": _NOT_HUB + "it is a copy kept in another public repository or page, named below." + _CRAWL,
    "preset": _NOT_HUB + "it is MLC-LLM's preset for this model (mlc-ai/mlc-llm), written out again as JSON, "
                         "often from an older revision; the source below names what is known to differ, if anything is."
                         + _CRAWL,
    "resaved": _NOT_HUB + "a third party saved it again through transformers, so some keys come from the "
                          "saver, not the Hub; the source is named below." + _CRAWL,
    "repaired": _NOT_HUB + "it comes from third-party test code, with the repairs named below." + _CRAWL,
    "reconstructed": _NOT_HUB + "it was rebuilt from what a published page states, named below." + _CRAWL,
    None: "Where this config.json comes from is not recorded; it may not be the Hub's file." + _CRAWL,
}


def config_notice(provenance: str | None) -> str | None:
    """The plain-words notice for a config that is not the Hub's own file (None for a Hub file or a local one)."""
    return None if provenance in ("hub", "local") else CONFIG_NOTICES.get(provenance, CONFIG_NOTICES[None])


def model_context(report: Report, record: ModelRecord | None, settings: Settings, *, crumbs: list[dict],
                  standalone: bool) -> dict[str, Any]:
    """Everything model.html shows, as strings, booleans and lists of them."""
    mem, model = report.memory, report.model
    assumptions = dict(mem.assumptions)
    findings = [{"severity": x.severity, "check": x.check, "message": x.message} for x in report.findings]
    count = _count(report, record)
    table = accuracy_page.load()
    return {
        "model_id": model.id,
        "name": crumbs[-1]["text"],
        "crumbs": crumbs,
        "standalone": standalone,
        "headline": {
            "tokens": f.count(mem.train_tokens),
            "full": f.gb(mem.train_full_bytes_batch1),
            "full_card": mem.smallest_card_full,
            "lora": f.gb(mem.train_lora_bytes_batch1),
            "lora_card": mem.smallest_card_lora,
            "full_tight": mem.tight_card_full,  # holds batch 1, not its headroom (estimator.card_verdict)
            "lora_tight": mem.tight_card_lora,
            # a tight card's label can read less than the figure beside it (H200 141 GB against 145 GB): what its
            # driver reports, said there
            "full_tight_usable": _usable(mem, mem.tight_card_full),
            "lora_tight_usable": _usable(mem, mem.tight_card_lora),
            "tight": accuracy_page.tight_lines(report, table),
            "headroom": f.ratio(assumptions["headroom"]),
            "rank": f.count(assumptions["lora_rank"]),
            "custom_code": model.custom_code,
        },
        "provenance": _provenance(report, record),
        "count": count,
        "custom_code": {"present": model.custom_code, "auto_map": _auto_map(record)},
        "text_tower": {"present": model.text_tower_only, "model_type": model.model_type, "family": model.family},
        # a repository named for a quantised format whose config.json declares none (checks.check_quantization):
        # every figure prices bf16 weights, so the page says it by the headline, not only among the findings
        # a reading that leaves part of the model out (a tower not counted) says so beside the headline figures
        "left_out": next((x.message for x in report.findings if x.check == "text_tower_only"
                          or (x.check == "approximate" and "not counted" in x.message)), None),
        "quantised_name": next((x.message for x in report.findings
                                if x.check == "quantization" and x.severity == "warning"), None),
        "cost": _cost(report, settings, assumptions,
                      sources.href(settings.site, crumbs_root(crumbs), standalone)),
        "memory": _memory(report, root=crumbs_root(crumbs)),
        "charts": _charts(report),
        "accuracy": accuracy_line.model_line(table,
                                             accuracy_line.href(settings.site, crumbs_root(crumbs), standalone),
                                             dict(report.memory.job).get("attention") or "sdpa",
                                             report.params.vision > 0, report.model.id,
                                             report.memory.train_qlora_bytes_batch1 is not None,
                                             report.model.kind == "encoder"),
        "assumptions": assumptions_context(report, assumptions),
        "validation": {"checkpoint": count["status"], "missing": count["missing"]},
        "structure": structure_context(report),
        "findings": findings,
        "setups": setups_context(report),
    }


def _provenance(report: Report, record: ModelRecord | None) -> dict[str, Any]:
    downloads = report.model.downloads
    return {
        "local": record is None,
        "hub_url": None if record is None else f"https://huggingface.co/{record.id}",
        "downloads": None if downloads is None else f.short_count(downloads),
        "downloads_exact": None if downloads is None else f.count(downloads),
        "downloads_source": record.downloads_source if record else None,
        "sha": report.model.sha,
        "sha_short": f.short_sha(report.model.sha),
        "config_source": record.config_source if record else None,
        "config_what": "its own config.json" if record is None or record.config_provenance == "hub"
        else "a copy of its config.json, not the Hub's file",
        "config_notice": None if record is None else config_notice(record.config_provenance),
        "quant_config_source": record.quant_config_source if record and record.quant_config_json else None,
        "architectures": list(report.model.architectures),
        "stale": bool(record and record.stale),
    }


def _count(report: Report, record: ModelRecord | None) -> dict[str, Any]:
    p = report.params
    gap = [x for x in report.findings if x.check == "checkpoint_count"]
    sizes: dict[str, int] = {}  # layers per size as the page shows it (T5's first layer: 7.08M, as the others)
    for size, n in p.layer_sizes:
        sizes[f.short_count(size)] = sizes.get(f.short_count(size), 0) + n
    by_dtype = record.checkpoint_params_by_dtype if record else {}
    return {
        "graph": f.count(p.graph), "graph_short": f.short_count(p.graph),
        "checkpoint": f.UNKNOWN if p.checkpoint is None else f.count(p.checkpoint),
        "stored": None if p.stored is None else f.count(p.stored),
        "stored_as": dict(p.quantization or ()).get("describes"),
        "status": p.count_status,  # "stored": the page never calls two different numbers equal
        "missing": "no checkpoint count is read for a local config" if record is None else
        "the snapshot has no such count for this model",
        "gap": {"severity": gap[0].severity, "message": gap[0].message} if gap else None,
        "source": record.checkpoint_source if record else None,
        "by_dtype": [{"dtype": k, "count": f.count(v)} for k, v in sorted(by_dtype.items())],
        "embedding": f.short_count(p.embedding),
        "head": ("head tied to the embedding" + (f", {f.short_count(p.lm_head)} of its own" if p.lm_head else ""))
        if p.lm_head_tied else f"head {f.short_count(p.lm_head)}" if p.lm_head else "no LM head",  # BERT's: a bias
        "layers": f.count(p.layers),
        "per_layer": f.short_count(p.per_layer),
        # a stack of layers of different sizes says each size as shown (more than four: their range), never "N
        # layers of the largest each"
        "layer_sizes": [{"layers": f.count(n), "params": shown} for shown, n in sizes.items()]
        if 1 < len(sizes) <= 4 else [],
        "layer_range": (f.short_count(min(s for s, _ in p.layer_sizes)), f.short_count(p.per_layer))
        if len(sizes) > 4 else None,
        "lora_adapter": f.short_count(p.lora_adapter),
        "moe": _moe(p),
    }


def _moe(p: Any) -> dict[str, str] | None:
    """A mixture of experts' parameters per token (Report.params.active), None for a dense model."""
    if not p.experts or not p.active or p.active == p.graph:
        return None
    return {"active": f.short_count(p.active), "active_exact": f.count(p.active), "total": f.short_count(p.graph),
            "experts": f.count(p.experts), "per_token": f.count(p.experts_per_token)}


def _auto_map(record: ModelRecord | None) -> list[str]:
    """The classes config.json's auto_map points at (shown, escaped, never followed)."""
    if record is None:
        return []
    try:
        auto_map = record.config().get("auto_map")
    except ConfigError:
        return []
    if not isinstance(auto_map, dict):
        return []
    items = sorted((str(k), str(v)) for k, v in auto_map.items())
    return [f"{k}: {v}"[:160] for k, v in items[:4]]


def _cost(report: Report, settings: Settings, assumptions: dict[str, Any], sources_href: str | None) -> dict[str, Any]:
    gpu_by_name = {g.name: g for g in settings.gpus.values()}
    one_gpu = {(p.method, p.gpu_model or p.gpu): p for p in report.plans if p.fits and p.gpus == 1}
    capacity = {c.name: c.capacity_bytes for c in report.memory.cards}
    spread = {(p.method, p.gpu_model or p.gpu): "priced on more GPUs" if p.fits else setups_text.none_holds(
        p, capacity[p.gpu]) for p in sorted(report.plans, key=lambda p: (p.fits, p.gpus))}  # a fitting one last
    rows: dict[str, dict[str, Any]] = {}
    for line in report.cost:
        gpu = gpu_by_name.get(line.card)
        row = rows.setdefault(line.card, {
            "gpu": line.card,
            "precision": line.precision if line.precision == "bf16" else f"{line.precision} (no bf16)",
            "peak": f.tflops(line.peak_tflops),
            "price": f.usd_per_hour(line.price_usd_per_hour),
            "source": sources.note(gpu.price_source, settings.sources, sources_href) if gpu else [],
            "date": gpu.price_date if gpu else "", "full": None, "lora": None,
        })
        # the setups table's one-GPU setup, which accumulates the job's batch over micro-batches (every gradient
        # held): where there is none, one GPU does not run the job; where it checkpoints or offloads, both tables
        # give its hours and dollars
        setup = one_gpu.get((line.method, line.card))
        if setup is not None and (setup.grad_ckpt or setup.offload != "none") and setup.job_hours is not None:
            how = f.strategy_words("single", setup.grad_ckpt, setup.offload)
            row[line.method] = {"hours": f.hours(setup.job_hours), "usd": f.usd(setup.job_usd), "how": how,
                                "roofline": f.hours(line.roofline_hours), "bound": line.bound, "no_fit": False}
            continue
        row[line.method] = {"hours": f.hours(line.hours), "usd": f.usd(line.usd), "how": None,
                            "roofline": f.hours(line.roofline_hours), "bound": line.bound, "no_fit": setup is None,
                            # where no count the search tried holds it (setups.plan_floors says why), no price
                            "spread": spread.get((line.method, line.card), "")}
    return {
        "epochs": f.count(assumptions["job_epochs"]),
        "batch": f.count(assumptions["job_batch"]),
        "tokens": f.count(assumptions["job_tokens"]),
        "samples": f.count(assumptions["job_samples"]),
        "mfu_full": f.percent(assumptions["mfu_full"]),
        "mfu_lora": f.percent(assumptions["mfu_lora"]),
        "job_batch": f.count(report.memory.job_batch),
        "full_job_batch": f.gb(report.memory.train_full_bytes_job_batch),
        "lora_job_batch": f.gb(report.memory.train_lora_bytes_job_batch),
        "full_accumulating": f.gb(report.memory.train_full_bytes_accumulating),
        "rows": list(rows.values()),
        "sources_href": sources_href,
    }


def _split(plan: Any) -> dict[str, Any] | None:
    if plan is None:
        return None
    return {"cards": f.count(plan.cards), "cut": f.count(plan.cut_after_layer),
            "stages": " + ".join(f.gb(b) for b in plan.stage_bytes_batch1),
            "batch": f.batch(plan.max_batch) if plan.max_batch > 0 else None}


def crumbs_root(crumbs: list[dict]) -> str | None:
    """The relative root of a site page, from its "Models" crumb (`../../../index.html`); None standalone."""
    home = crumbs[0]["href"] if crumbs else None
    if home is None or "://" in home:
        return None
    return home[: -len("index.html")]


def curve_of(report: Report) -> list[dict[str, int]] | None:
    """`memory.curve` in its JSON shape, whichever form the Report holds it in (absent: None)."""
    raw = getattr(report.memory, "curve", None)
    if not raw:
        return None
    items = [dict(x) if isinstance(x, Mapping) else dataclasses.asdict(x)
             if dataclasses.is_dataclass(x) and not isinstance(x, type) else x
             for x in raw]
    return charts.curve_points({"curve": items})


def _charts(report: Report) -> dict[str, Any]:
    mem = report.memory
    curve = curve_of(report)
    name = report.model.id
    # One point (a context under 512 tokens) is not a line: the page then shows no memory chart.
    line = curve if curve is not None and len(curve) > 1 and mem.cards else None
    # A batch chart where no card holds batch 1 of any method would be nothing but "does not fit" labels: the
    # setups section answers instead (issue 14).
    bars = any(getattr(c, key) for c in mem.cards for key, _, _ in charts.BATCHES)
    return {  # each chart twice: for wide screens and for a phone (the stylesheet shows one)
        "memory": None if line is None else charts.memory_chart(line, mem.cards, model=name),
        "memory_narrow": None if line is None else charts.memory_chart(line, mem.cards, model=name, narrow=True),
        "batch": None if not bars else charts.batch_chart(mem.cards, model=name, serve_tokens=mem.serve_tokens),
        "batch_narrow": None if not bars
        else charts.batch_chart(mem.cards, model=name, serve_tokens=mem.serve_tokens, narrow=True),
    }


def _memory(report: Report, root: str | None = None) -> dict[str, Any]:
    qlora = report.memory.train_qlora_bytes_batch1 is not None  # None: QLoRA does not apply (already quantised)
    keys = ("full", "lora", "qlora", "serve") if qlora else ("full", "lora", "serve")
    rows = []
    # where one card holds no batch and no two-card split is given, the fewest GPUs a setup holds it on, or that
    # none the search tried does (setups_text.card_setups): a bare "—" says nothing (QLoRA has no split)
    for card in report.memory.cards:
        splits = {s.method: s for s in card.split or ()}
        row: dict[str, Any] = {"card": card.name, "usable": f.gb(card.usable_bytes), "budget": f.gb(card.budget_bytes),
                               "href": None if root is None else f"{root}{pages.card_dir(card.name)}/index.html"}
        for short, method in METHODS:  # a card batch 1 is tight on (Memory.tight_card_*) says so in place of "—"
            tight = card.name == getattr(report.memory, f"tight_card_{short}")
            batch = getattr(card, f"{method}_max_batch")
            split = splits.get(method)
            held = split.cards if split is not None and split.max_batch > 0 else 0  # a split that holds a batch
            dtype = f", {card.serve_dtype}" if short == "serve" and card.serve_dtype and (tight or batch) else ""
            row[short] = {"batch": ("tight" if tight else f.batch(batch)) + dtype, "split": _split(split),
                          "more": None if tight or batch > 0 else setups_text.card_setups(
                              report.plans, short, card.name, held, card.capacity_bytes)}
        row["cells"] = [row[k] for k in keys]
        rows.append(row)
    rank = f.count(dict(report.memory.assumptions)["lora_rank"])
    serve = f"Serve {f.serve_weights(report.params.quantization)}"
    labels = {"full": "Full fine-tune", "lora": f"LoRA r={rank}", "qlora": "QLoRA", "serve": serve}
    return {
        # one column per method, data-label and heading; QLoRA's unless it does not apply (an already quantised
        # checkpoint: the setups section says why)
        "table_class": "four" if len(keys) == 4 else "three",  # answer cells per line on a phone
        "columns": [{"label": labels[k], "head": labels[k] + (f", {f.count(report.memory.serve_tokens)} tokens"
                                                               if k == "serve" else "")} for k in keys],
        "train_tokens": f.count(report.memory.train_tokens),
        "serve_tokens": f.count(report.memory.serve_tokens),
        "images": report.params.vision > 0,  # the jobs read one image a sample and a served sequence (job.py)
        "serve_weights": f.serve_weights(report.params.quantization),
        "rank": f.count(dict(report.memory.assumptions)["lora_rank"]),
        "any_split": any(x["split"] or x["more"] for r in rows for x in r["cells"]),
        "rows": rows,
        "units": _units_example(report.memory.cards),
    }


def _usable(mem: Any, card: str | None) -> str | None:
    """The memory the named card's driver reports (Memory.cards' usable_bytes), as the page writes it."""
    found = next((c for c in mem.cards if c.name == card), None)
    return None if found is None else f.gb(found.usable_bytes)


def _units_example(cards: Sequence[Any]) -> dict[str, str] | None:
    """The one place a page says GiB: the largest card's driver-reported memory in both units, so that
    "H200 141 GB" beside "151 GB usable" reads as the maker's label against the driver's count."""
    if not cards:
        return None
    card = max(cards, key=lambda c: c.usable_bytes)
    return {"card": card.name, "gb": f.gb(card.usable_bytes), "gib": f.gib(card.usable_bytes)}
