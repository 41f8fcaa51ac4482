"""The terminal summary of one Report (rich): headline, parameters vs checkpoint, findings, --plan."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import format as fmt
from .estimator import Report
from .settings import Settings

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _fits(card: str | None) -> str:
    return f"fits one {card}" if card else "fits no single card listed; see --plan for the two-card split"


def print_summary(console: Console, report: Report, *, plan: bool, settings: Settings) -> None:
    """Every string from the config is printed as plain Text, never parsed as rich markup."""
    m, p, model = report.memory, report.params, report.model
    a = dict(m.assumptions)
    title = Text(model.id, style="bold")
    title.append(f"  ({model.model_type}", style="dim")
    if model.family != model.model_type:
        title.append(f", read as {model.family}", style="dim")
    title.append(")", style="dim")
    console.print(title)
    console.print(Text(
        f"Fine-tuning at batch 1 and {fmt.count(m.train_tokens)} tokens takes about "
        f"{fmt.gb(m.train_full_bytes_batch1)} for a full fine-tune ({_fits(m.smallest_card_full)}), and "
        f"{fmt.gb(m.train_lora_bytes_batch1)} with LoRA r={a['lora_rank']} on a bf16 base "
        f"({_fits(m.smallest_card_lora)}). Serving {fmt.serve_weights(p.quantization)} weights at "
        f"{fmt.count(m.serve_tokens)} tokens per sequence "
        f"starts at {fmt.gb(m.serve_bytes_batch1)} ({_fits(m.smallest_card_serve)}). "
        "Estimated from the config's structure, not measured."))
    if m.job_batch != 1:
        console.print(Text(f"At the priced job's micro batch {m.job_batch}, on one device: full {fmt.gb(m.train_full_bytes_job_batch)}, "
                           f"LoRA {fmt.gb(m.train_lora_bytes_job_batch)}."))
    if m.job:
        console.print(_job_line(m))
    count = Text(f"Parameters: {fmt.count(p.graph)} from the graph")
    if p.checkpoint is None:
        count.append(", no checkpoint count to compare.")
    elif p.match:
        count.append(f" = {fmt.count(p.checkpoint)} in the checkpoint (exact).", style="green")
    else:
        count.append(f" vs {fmt.count(p.checkpoint)} in the checkpoint (see findings).", style="yellow")
    console.print(count)
    if p.experts and p.active and p.active != p.graph:
        console.print(Text(f"Active per token: {fmt.count(p.active)} of {fmt.count(p.graph)} "
                           f"({p.experts_per_token} of {p.experts} routed experts per MoE layer); training and "
                           "serving hold all of them, the cost's compute counts the active ones."))
    if not report.findings:
        console.print(Text("No finding on the reconstructed graph.", style="green"))
    for f in report.findings:
        line = Text(f"[{f.severity}] ", style=_SEVERITY_STYLE.get(f.severity, ""))
        line.append(f"{f.check}: {f.message}")
        console.print(line)
    if plan:
        _print_plan(console, report, settings)


def _job_line(m) -> Text:
    """The exact job's peak, when it happens and what it is made of (estimator.job)."""
    job = dict(m.job)
    what = [job["method"], job["precision"]]
    if job["method"] != "full":
        what.append(f"{job['weights']} base")
    if job["method"] in ("lora", "qlora"):
        what.append(f"r={job['lora_rank']} on {job['lora_targets']}")
    if job["method"] != "inference":
        what.append(job["optimizer"] + (", checkpointed" if job["grad_ckpt"] else ""))
    tokens = f"{fmt.count(job['tokens'])} tokens" + (f" + {fmt.count(job['new_tokens'])} generated"
                                                    if job["new_tokens"] else "")
    parts = ", ".join(f"{k.replace('_', ' ')} {fmt.gb(v)}" for k, v in m.breakdown if v)
    return Text(f"This job ({', '.join(what)}, {job['attention']}, batch {job['batch']} x {tokens}) peaks at "
                f"{fmt.gb(m.peak_bytes)} {job['metric']} during {m.peak_phase}: {parts}.")


def _print_plan(console: Console, report: Report, settings: Settings) -> None:
    m = report.memory
    a = dict(m.assumptions)
    table = Table(title=f"Largest batch per card (training {fmt.count(m.train_tokens)} tokens per sample, "
                        f"serving {fmt.count(m.serve_tokens)} tokens per sequence)")
    for col in ("Card", "Budget", "Full fine-tune", f"LoRA r={a['lora_rank']}",
                f"Serve {fmt.serve_weights(report.params.quantization)}"):
        table.add_column(col)
    for c in m.cards:
        table.add_row(c.name, fmt.gb(c.budget_bytes), fmt.batch(c.train_full_max_batch),
                      fmt.batch(c.train_lora_max_batch), fmt.batch(c.serve_max_batch))
    console.print(table)
    for c in m.cards:
        for s in c.split or ():
            stages = " + ".join(fmt.gb(b) for b in s.stage_bytes_batch1)
            console.print(Text(f"{c.name}, {s.method}: two cards, cut after layer {s.cut_after_layer} "
                               f"({stages} at batch 1): {fmt.batch(s.max_batch)}"))
    console.print(Text(f"Budget = (driver-reported memory - {fmt.gb(a['cuda_context_bytes'])} CUDA context) / "
                       f"{fmt.ratio(a['headroom'])} headroom.", style="dim"))
    cost = Table(title=f"Cost: {a['job_epochs']} epochs x {fmt.count(a['job_samples'])} samples at batch "
                       f"{a['job_batch']} x {fmt.count(a['job_tokens'])} tokens (roofline / MFU)")
    for col in ("GPU", "Method", "Hours", "USD", "Price", "Bound"):
        cost.add_column(col)
    for line in report.cost:
        cost.add_row(line.card, line.method, fmt.hours(line.hours), fmt.usd(line.usd),
                     fmt.usd_per_hour(line.price_usd_per_hour), f"{line.bound} ({line.precision})")
    console.print(cost)
