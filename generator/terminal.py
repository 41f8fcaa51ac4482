"""The terminal summary of one Report (rich): headline, parameters vs checkpoint, findings, --plan."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from . import format as fmt
from . import setups_text
from .accuracy_allocator import AllocatorRow, margin, tight_cards
from .estimator import ENGINE_DEFAULT_SHARE, Report, card_verdict
from .estimator.memory.job_options import Job
from .estimator.memory.recipes import RECIPES
from .estimator.vllm_support import SERVED_NOWHERE
from .terminal_tables import print_plan

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
# What the breakdown's "overhead" holds (memory.parallel.Phase: overhead_weights, overhead_step, overhead_fixed)
_OVERHEAD = ("Overhead: autocast's bf16 copies of the weights, the optimizer step's temporaries (torch.optim's "
             "foreach) and the buffers each process holds whole (a quantised layer's dequantised copy, a chunked "
             "loss's transient, a framework model's own buffers)")


def _fits(card: str | None, tight: str | None = None, spread: bool = True) -> str:
    """Where batch 1 fits with the headroom, and the smaller card that holds it without (Memory.tight_card_*);
    where no card does, whether a setup below spreads it (`spread`: a plan of the method fits) or none does."""
    if card:
        return f"fits one {card}" + (f"; tight on one {tight}" if tight else "")
    return ("fits no single card listed" + (f" (tight on one {tight})" if tight else "")
            + ("; the setups below spread it over several" if spread else "; nor does any setup below"))


def wants_replay(report: Report, asked: bool) -> bool:
    """Whether the summary says what the caching allocator adds: beside a reserved or nvidia-smi peak, or a card
    called tight."""
    return dict(report.memory.job or ()).get("metric") in ("reserved", "nvidia-smi") or _any_tight(report.memory,
                                                                                               asked)


def _any_tight(m, asked: bool) -> bool:
    """A site training job tight on its smallest card, or (asked) the exact job tight on any card: what the
    allocator's replayed steps speak to (serving sizes its own cache: _tight_lines)."""
    exact = asked and bool(m.job) and any(card_verdict(m.held_peak_bytes, c.budget_bytes, c.capacity_bytes) == "tight"
                                          for c in m.cards)
    return exact or any((m.tight_card_full, m.tight_card_lora, m.tight_card_qlora))


def _tight_lines(m, least_over: Sequence[float], least_expandable: Sequence[float]) -> list[Text]:
    """QLoRA's and serving's tight cards, which the summary's sentence does not name (QLoRA) or names with the
    model's own figure (serving), as the page says them (accuracy_allocator.tight_cards): QLoRA's margin and how
    many replayed steps needed no more, serving's margin over that card's own figure and the gpu_memory_utilization
    a vLLM server needs where its default does not do."""
    out = []
    for t in tight_cards(m, least_over, least_expandable):
        spare = fmt.error_pct(t.margin.spare_pct)
        if t.method == "qlora":
            odds = f", enough for {fmt.count(t.margin.runs)} of the {fmt.count(t.margin.of)} steps replayed" \
                if t.margin.of else ""
            out.append(Text(f"QLoRA ({fmt.gb(t.peak_bytes)} at batch 1) is tight on one {t.card}: {spare} of room "
                            f"over its peak{odds}."))
        elif t.method == "serve":
            setting = t.engine_setting
            said = "" if setting is None else "; a vLLM server needs " + (
                "the whole card, gpu_memory_utilization 1" if setting == 1.0 else
                f"gpu_memory_utilization {setting:g} or more") + f" ({ENGINE_DEFAULT_SHARE:g} by default)"
            out.append(Text(f"Serving is tight on one {t.card}: {spare} of room over its {fmt.gb(t.peak_bytes)} there "
                            f"(vLLM's defaults on it){said}."))
    return out


def print_summary(console: Console, report: Report, *, plan: bool, asked: bool = False,
                  replayed: AllocatorRow | None = None, least_over: Sequence[float] = (),
                  least_expandable: Sequence[float] = (), table_width: int | None = None) -> None:
    """Every string from the config is printed as plain Text, never parsed as rich markup. `asked`: the command
    line named an exact setup, so the summary leads with it and says per card whether it fits. `replayed`: the
    measured allocator figures, said beside a reserved or nvidia-smi peak or a tight card; `least_over`: each
    replayed step's least card over its live peak (%), to say how many a tight card's margin would have run, and
    `least_expandable` the same with expandable segments. `table_width`: the --plan tables' width where wider
    than the console's (stdout piped)."""
    m, p, model = report.memory, report.params, report.model
    a = dict(m.assumptions)

    def spread(method: str) -> bool:  # a setup below holds it on more GPUs
        return any(x.method == method and x.fits for x in report.plans)
    float32 = "in float32 there, as vLLM serves it on that card; " if m.serve_named_dtype else ""
    served = _fits(m.smallest_card_serve, m.tight_card_serve, spread("serve")) \
        if SERVED_NOWHERE not in {u.reason for u in report.plans_unreachable} else "vLLM serves it on no priced GPU"
    title = Text(model.id, style="bold")
    title.append(f"  ({model.model_type}", style="dim")
    if model.family != model.model_type:
        title.append(f", read as {model.family}", style="dim")
    title.append(")", style="dim")
    console.print(title)
    if asked and m.job:
        _print_job(console, m)
        if dict(m.job).get("metric") in ("reserved", "nvidia-smi"):
            console.print(_reserved_note(dict(m.job)["metric"], replayed, m.nccl_bytes > 0), style="dim")
        console.print(_verdicts(m, least_over, least_expandable))
    console.print(Text(
        f"{'The site' + chr(39) + 's jobs: f' if asked else 'F'}ine-tuning at batch 1 and {fmt.count(m.train_tokens)} "
        f"tokens takes about {fmt.gb(m.train_full_bytes_batch1)} for a full fine-tune "
        f"({_fits(m.smallest_card_full, m.tight_card_full, spread('full'))}), "
        f"and {fmt.gb(m.train_lora_bytes_batch1)} with LoRA r={a['lora_rank']} on a bf16 base "
        f"({_fits(m.smallest_card_lora, m.tight_card_lora, spread('lora'))}). Serving "
        f"{fmt.serve_weights(p.quantization)} weights at {fmt.count(m.serve_tokens)} tokens per sequence "
        f"starts at {fmt.gb(m.serve_named_bytes)} ({float32}{served}). "
        "Estimated from the config's structure, not measured."))
    if _any_tight(m, asked):
        console.print(_tight_note(a["headroom"], replayed), style="dim")
    for line in _tight_lines(m, least_over, least_expandable):
        console.print(line, style="dim")
    rows = setups_text.headline(report.plans, report.plans_unreachable, report.serving,
                                setups_text.float32_cards(m.cards))
    if rows:
        console.print(Text("Setups that run it: " + " ".join(setups_text.sentence(r) for r in rows)))
    if m.job and not asked:
        _print_job(console, m)
    count = Text(f"Parameters: {fmt.count(p.graph)} from the graph")
    if p.checkpoint is None:  # count_status "none"
        count.append(", no checkpoint count to compare.")
    elif p.count_status == "stored":
        count.append(f"; quantised, they are stored as {fmt.count(p.checkpoint)} elements, the checkpoint's count "
                     "(exact).", style="green")
    elif p.count_status == "match":
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
        method = dict(m.job).get("method") if asked else None
        print_plan(console, report, {"inference": "serve"}.get(str(method), method), table_width)


def _print_job(console: Console, m) -> None:
    """The exact job's line, the recipe it was read from (when one was named), and what its overhead holds."""
    console.print(_job_line(m))
    job = dict(m.job)
    if job.get("recipe"):
        console.print(_recipe_line(job["recipe"], job))
    if dict(m.breakdown).get("overhead"):
        ddp = job.get("gpus", 1) > 1 and job.get("strategy", "ddp") == "ddp"
        console.print(Text(_OVERHEAD + ("; under DDP, its gradient buckets too." if ddp else "."), style="dim"))


def _recipe_line(name: str, job: dict) -> Text:
    """The named recipe (--recipe), its summary, the sources its options were read from (memory.recipes), and
    which of them the flags given replaced: the summary says the recipe's own (r=64), the job line what is priced."""
    recipe = RECIPES.get(name)
    if recipe is None:  # a Report made by another release: its recipe's name is all there is to say
        return Text(f"Recipe {name}.")
    # the recipe's job at the same method (a method given applies or drops its adapter options), less the flags
    own = dataclasses.asdict(Job.from_options(recipe.name, method=job.get("method", "full")))
    replaced = [f"{key} {job[key]} (the recipe's: {own[key]})" for key, _ in recipe.fields
                if key in job and own.get(key, "") != "" and job[key] != own[key]]  # "": resolved from others
    flags = f" The flags given replace {', '.join(replaced)}." if replaced else ""
    return Text(f"Recipe {recipe.name}: {recipe.summary}. Read from: {'; '.join(recipe.sources)}.{flags}")


def _job_line(m) -> Text:
    """The exact job's peak, when it happens and what it is made of (estimator.job)."""
    job = dict(m.job)
    what = [job["method"], job["precision"]]
    if job["method"] != "full":
        what.append(f"{job['weights']} base")
    if job["method"] in ("lora", "qlora"):
        what.append(f"r={job['lora_rank']} on {fmt.lora_targets(job['lora_targets'])}"
                    + ("" if job.get("tower_adapters", True) else " of the text model")
                    + (f", dropout {fmt.decimal(job['lora_dropout'])}" if job.get("lora_dropout") else ""))
    if job["method"] != "inference":
        what.append(job["optimizer"] + (", checkpointed" if job["grad_ckpt"] else "")
                    + (" (the layer inputs in CPU RAM)" if job.get("offload_checkpoints") else ""))
    if job.get("images") is not None:
        each = "prompt" if job["method"] == "inference" else "sample"
        images = job["images"]
        what.append("text only" if images == 0
                    else f"{fmt.count(images)} image{'' if images == 1 else 's'} per {each}")
    if job.get("grad_accum", 1) > 1:
        what.append(f"{fmt.count(job['grad_accum'])} micro-batches per step")
    if job.get("loss", "hf") != "hf":  # transformers' own loss goes unsaid, as the default job's line always has
        what.append(f"{job['loss']} loss")
    tokens = f"{fmt.count(job['tokens'])} tokens" + (f" + {fmt.count(job['new_tokens'])} generated"
                                                    if job["new_tokens"] else "")
    parts = ", ".join(f"{k.replace('_', ' ')} {fmt.gb(v)}" for k, v in m.breakdown if v)
    gpus = job.get("gpus", 1)
    where = "on one GPU" if gpus == 1 else "per GPU, " + fmt.setup(gpus, "GPUs", job.get("strategy", "ddp"),
                                                                   False, job.get("offload", "none"))
    if gpus > 1 and job.get("mixed_units"):
        where += " (FSDP1 units of frozen and trainable params)"
    if gpus > 1 and job.get("sync_each_batch"):
        where += " (gradients synced every micro-batch)"
    cpu = f"; the offload holds {fmt.gb(m.offload_cpu_bytes_per_node)} of CPU memory per node" \
        if m.offload_cpu_bytes_per_node else ""
    padded = " padded to its longest" if job.get("padded") and job["batch"] > 1 else ""
    return Text(f"This job ({', '.join(what)}, {job['attention']}, batch {job['batch']} x {tokens}{padded}) peaks at "
                f"{fmt.gb(m.peak_bytes)} {job['metric']} {where}, during {m.peak_phase}: {parts}{cpu}.")


def _reserved_note(metric: str, replayed: AllocatorRow | None, several: bool = False) -> Text:
    """What a reserved (or nvidia-smi) peak leaves out: the caching allocator's other cached blocks, with the
    measured figures where the accuracy table has them (FINDINGS.md F49). `several`: the job runs on several GPUs,
    whose nvidia-smi peak holds NCCL's buffers too (in its overhead)."""
    smi = "This is reserved memory plus the CUDA context" + \
        (" and NCCL's buffers (in the overhead)" if several else "") + "; reserved"
    text = (smi if metric == "nvidia-smi" else "Reserved") + \
        " here is the live peak plus the freed bf16 logits' blocks. The caching allocator keeps other freed blocks too, " \
        "not priced"
    if replayed is None:
        return Text(text + ".")
    mean = replayed.reserved_error_mean_signed_pct
    return Text(f"{text}: {fmt.count(replayed.runs)} steps replayed through it, each at one length, ran a median "
                f"{fmt.error_pct(replayed.reserved_over_median_pct)} (up to {fmt.error_pct(replayed.reserved_over_max_pct)}) "
                f"over their live peak, where the estimator's reserved figure read {fmt.error_pct(abs(mean))} "
                f"{'low' if mean < 0 else 'high'} on average; steps of varied lengths hold more, and expandable segments "
                "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) held less in the 0.6B-8B runs replayed (/accuracy/).")


def _verdicts(m, least_over: Sequence[float] = (), least_expandable: Sequence[float] = ()) -> Text:
    """Per card, whether the exact job's per-GPU peak fits its budget, or only its capacity (tight: with the
    margin left, and how many replayed steps needed no more than that over their live peak: NCCL's buffers, which
    do not fragment, are held apart from the tensors the replay measured)."""
    said, peak = [], m.held_peak_bytes
    for c in m.cards:
        verdict = card_verdict(peak, c.budget_bytes, c.capacity_bytes)
        if verdict == "tight":
            tensors = c.capacity_bytes - m.nccl_bytes
            got = margin(tensors, peak - m.nccl_bytes, least_over, least_expandable)
            odds = (f", enough for {fmt.count(got.runs)} of {fmt.count(got.of)} replayed steps" if got.of else "")
            if got.of and got.expandable_of:
                odds += f", {fmt.count(got.expandable_runs)} of {fmt.count(got.expandable_of)} with expandable segments"
            said.append(f"{c.name} is tight ({fmt.gb(tensors)} for tensors: {fmt.error_pct(got.spare_pct)} "
                        f"over the peak{odds}; budget {fmt.gb(c.budget_bytes)})")
        else:
            said.append(f"{c.name} {verdict} (budget {fmt.gb(c.budget_bytes)})")
    held = fmt.held_words(m.held_context_bytes, m.held_nccl_bytes)
    return Text(f"Per card{f' ({held})' if held else ''}: " + "; ".join(said) + ".")


def _tight_note(headroom: float, replayed: AllocatorRow | None) -> Text:
    """What "tight" means: the card holds the live peak but not the headroom, and the caching allocator's
    fragmentation decides; with the measured figures where the accuracy table has them (FINDINGS.md F49)."""
    text = (f"Tight: the card holds the estimate but not its {fmt.ratio(headroom)} headroom, kept for the caching "
            "allocator's fragmentation and the estimate's own error. Whether the step runs depends on how the "
            "allocator's blocks fall")
    if replayed is None:
        return Text(text + "; expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) waste less.")
    return Text(f"{text}: {fmt.count(replayed.runs)} steps replayed through it, each at one length, needed a median "
                f"{fmt.error_pct(replayed.least_card_over_median_pct)} (up to "
                f"{fmt.error_pct(replayed.least_card_over_max_pct)}) over their live peak to run; steps of varied "
                "lengths need more, and expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) less "
                "(/accuracy/).")
