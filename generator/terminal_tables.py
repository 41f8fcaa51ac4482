"""The terminal's --plan tables (rich): the per-card batches, the setups and the serving speeds, and how each folds."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.segment import SegmentLines
from rich.table import Table
from rich.text import Text

from . import format as fmt
from . import setups_text
from .estimator import Report
from .estimator.report import CardPlan, SplitPlan

# The per-card table's columns: (Report method key, CardPlan field's prefix), as the page's table (site.context)
_CARD_METHODS = (("full", "train_full"), ("lora", "train_lora"), ("qlora", "train_qlora"), ("serve", "serve"))


def _table(title: str, columns: Sequence[str]) -> Table:
    """A table whose cells fold a word too long for their column rather than cut it with an ellipsis: a narrow
    terminal (or COLUMNS=80) keeps every figure, if over two lines."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def _print_table(console: Console, grid: Table, width: int | None) -> None:
    """A table at `width` columns where that is wider than the console's (stdout piped: print_summary), so that its
    figures stay whole on one line; the sentences around it keep the console's width."""
    if width is None or width <= console.width:
        console.print(grid)
        return
    lines = console.render_lines(grid, console.options.update_width(width), pad=False)
    console.print(SegmentLines(lines, new_lines=True), crop=False, end="")


def _print_cards(console: Console, report: Report, table_width: int | None) -> None:
    """The largest batch per card and method; where one card cannot hold batch 1, the two-card split where two
    cards hold it (as the page's table), else the setups on more GPUs, or that none the search tried holds it."""
    m = report.memory
    a = dict(m.assumptions)
    qlora = not any(u.method == "qlora" for u in report.plans_unreachable)  # an already quantised checkpoint
    checkpoints = not any(x.check == "no_grad_ckpt" for x in report.findings)  # the model's classes can
    labels = {"full": "Full fine-tune", "lora": f"LoRA r={a['lora_rank']}",
              "qlora": "QLoRA (checkpointed)" if checkpoints else "QLoRA",
              "serve": f"Serve {fmt.serve_weights(report.params.quantization)}"}
    methods = [(short, field) for short, field in _CARD_METHODS if qlora or short != "qlora"]
    grid = _table(f"Largest batch per card (training {fmt.count(m.train_tokens)} tokens per sample, serving "
                  f"{fmt.count(m.serve_tokens)} tokens per sequence)",
                  ("Card", "Budget", *(labels[short] for short, _ in methods)))
    notes = []
    for c in m.cards:
        splits = {s.method: s for s in c.split or ()}
        cells = []
        for short, field in methods:
            split, batch = splits.get(field), getattr(c, f"{field}_max_batch")
            cells.append(_card_cell(report, c, short, batch, split))
            if split is not None and split.max_batch > 0 and batch <= 0:  # tight ones too, as the page gives them
                notes.append(f"{c.name}, {labels[short]}: {fmt.count(split.cards)} cards, cut after layer "
                             f"{fmt.count(split.cut_after_layer)}: "
                             f"{' + '.join(fmt.gb(b) for b in split.stage_bytes_batch1)} at batch 1; "
                             f"{fmt.batch(split.max_batch)}.")
        grid.add_row(c.name, fmt.gb(c.budget_bytes), *cells)
    _print_table(console, grid, table_width)
    if notes:
        console.print(Text("Two cards where one card's budget cannot hold batch 1: a contiguous layer cut (pipeline "
                           "parallel; the second card keeps its own copy of a tied embedding; training's cut balances "
                           "the cards, serving's is vLLM's: the layers halved, the sampler and the hidden states "
                           "handed over on the second, a vision or audio tower on both), each stage's memory at "
                           "batch 1, then the pair's largest batch (training: beside NCCL's buffers on each card)."))
        for note in notes:
            console.print(Text("  " + note))
    console.print(Text(f"Budget = (driver-reported memory - {fmt.gb(a['cuda_context_bytes'])} CUDA context) / "
                       f"{fmt.ratio(a['headroom'])} headroom; tight: the memory less the context holds batch 1, "
                       "the budget does not. In this table the full fine-tune and LoRA run without gradient "
                       "checkpointing, QLoRA (NF4 base, double quantisation, paged AdamW) " + (
                           "with it, as the site's jobs do." if checkpoints else
                           "without it too: this model's classes cannot checkpoint."), style="dim"))


def _card_cell(report: Report, card: CardPlan, method: str, batch: int, split: SplitPlan | None) -> str:
    """One card's largest batch of one method: "tight" where batch 1 fits the card but not its budget; where it
    does not fit, the two-card split's batch, else the setups below (setups_text.card_setups). A serving batch
    priced in float32 (CardPlan.serve_dtype) says so."""
    dtype = f", {card.serve_dtype}" if method == "serve" and card.serve_dtype else ""
    if card.name == getattr(report.memory, f"tight_card_{method}"):
        return "tight" + dtype  # its two-card split, where there is one, is in the lines under the table
    if batch > 0:
        return fmt.batch(batch) + dtype
    if split is not None and split.max_batch > 0:  # and one GPU where a setup holds it on one (checkpointed)
        fewer = setups_text.card_setups(report.plans, method, card.name, split.cards)
        return f"{fmt.count(split.cards)} cards: {fmt.batch(split.max_batch)}" + (f"; {fewer}" if fewer else "")
    # as the page's cell: the setups' words, or where none was searched (the line under the setups says why) that
    # one card, or the split, does not hold it
    return setups_text.card_setups(report.plans, method, card.name, capacity_bytes=card.capacity_bytes) \
        or ("does not fit" if split is None else f"does not fit on {fmt.count(split.cards)} cards")


def print_plan(console: Console, report: Report, method: str | None = None,
               table_width: int | None = None) -> None:
    """The per-card batches, then the setups that run the model (only `method`'s when one was asked for) and the
    serving speeds."""
    m = report.memory
    a = dict(m.assumptions)
    if method is None:
        _print_cards(console, report, table_width)
    plans = [p for p in report.plans if method is None or p.method == method]
    capacity = {c.name: c.capacity_bytes for c in report.memory.cards}
    float32 = setups_text.float32_cards(report.memory.cards)
    if plans:
        grid = _table(f"Setups that hold batch 1, accumulating gradients to batch {a['job_batch']} on fewer GPUs "
                      f"(cost: {a['job_epochs']} epochs x {fmt.count(a['job_samples'])} samples at batch "
                      f"{a['job_batch']} x "
                      f"{fmt.count(a['job_tokens'])} tokens or the context when shorter; "
                      "max(FLOPs / peak, bytes / bandwidth) / "
                      f"(GPUs x MFU); offload: at least its PCIe transfers; training per GPU on 2 or more: "
                      f"with {fmt.gb(a['nccl_bytes_per_gpu'])} of NCCL buffers)",
                      ("Method", "Card", "Setup", "Per GPU", "Price", "Hours", "Job", ""))
        for p in plans:
            marks = ", ".join(w for w, on in (("PCIe-bound", setups_text.link_bound(p)), ("smallest", p.smallest),
                                              ("cheapest", p.cheapest)) if on)
            grid.add_row(setups_text.METHOD_NAMES[p.method], p.gpu, setups_text.label(p) if p.fits else
                         setups_text.unfit_setup(p, capacity[p.gpu]), setups_text.peak_cell(p, float32),
                         fmt.usd_per_hour(p.usd_per_hour) if p.fits else fmt.DASH,  # no price for what cannot run
                         fmt.hours(p.job_hours) if p.job_hours else fmt.DASH,
                         fmt.usd(p.job_usd), marks)
        _print_table(console, grid, table_width)
    for u in report.plans_unreachable:
        if method is None or u.method == method:
            console.print(Text(f"{setups_text.METHOD_NAMES.get(u.method, u.method)}: {u.reason}."))
    floors = [x for x in report.plan_floors if method is None or x.method == method]
    for line in setups_text.floor_sentences(floors, plans, {c.name: c.budget_bytes for c in report.memory.cards},
                                            capacity):
        console.print(Text(line))
    if report.serving and method in (None, "serve"):
        grid = _table(f"Serving speed on the fewest GPUs with tensor parallelism, pipeline stages across nodes "
                      f"past 8 ({fmt.count(m.serve_tokens)} tokens per sequence)",
                      ("Card", "Setup", "Decode, batch 1", "Prefill", "Sequences", "Output tokens"))
        for s in report.serving:
            grid.add_row(s.gpu, fmt.setup(s.gpus, s.gpu_model or s.gpu, s.strategy),
                         fmt.tokens_per_s(s.decode_tokens_per_s), fmt.tokens_per_s(s.prefill_tokens_per_s),
                         fmt.count(s.max_concurrency), fmt.usd_per_million(s.usd_per_million_output_tokens))
        _print_table(console, grid, table_width)
        console.print(Text(f"Sequences: the KV caches of {fmt.count(m.serve_tokens)} tokens a chunked-prefill server "
                           "(vLLM's scheduler) holds beside the weights and the peak it measured at startup (a step's "
                           "forward or its sampler's run), up to `vllm serve`'s default --max-num-seqs "
                           f"({fmt.count(a['serve_max_sequences'])}; {fmt.count(a['serve_max_sequences_large_gpus'])} "
                           "on a GPU of 75.2 GB or more but the A100, which also steps "
                           f"{fmt.count(a['serve_step_tokens_large_gpus'])} tokens, not "
                           f"{fmt.count(a['serve_step_tokens'])}); "
                           "--method inference --batch N prices HF generate instead, whose prefill holds every "
                           "prompt's activations at once.", style="dim"))
