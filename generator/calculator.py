"""The model pages' calculator: the estimator itself, run in the browser by Pyodide, for the setup in the
page's URL query.

The query's keys are the CLI's flag names (`?method=lora&tokens=4096&grad-ckpt=1`); job_flags parses them
with the CLI's own parser and builds the same Job and the same assumption overrides, and estimate() prices
it, so the page's `calc-peak` is `neurarch-trace MODEL --json`'s `memory.peak_bytes` for the same flags, to
the byte. The form's fields are read from the same parser (flag_spec), so a flag added to job_flags is in
the page with no change to its script.

Pure: standard library, the estimator, job_flags, errors and format; no file, network, clock or
environment. site/calculator.py ships these modules to the browser as one zip.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import io
import json
import shlex
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

from . import format as f
from . import job_flags
from .errors import TraceError
from .estimator import Assumptions, Card, Gpu, estimate
from .estimator.memory.job_result import PARTS

SITE_FORMAT = 1  # site.json's layout; the page's script refuses another
TRUE = ("1", "true", "on", "yes")  # a switch's value in the query (grad-ckpt=1)
FALSE = ("0", "false", "off", "no")  # off, for a switch that has a --no- form (grad-ckpt=0: --no-grad-ckpt)
BASE_GROUP = "Sizes"  # the legend of the flags argparse keeps in its default group
MAX_BATCH = 1 << 40  # the search for the largest batch stops here (a batch that does not change the peak)


@dataclasses.dataclass(frozen=True)
class Site:
    """What every model page shares: the site's assumptions, cards and GPUs (site.json)."""

    assumptions: Assumptions
    cards: tuple[Card, ...]
    gpus: Mapping[str, Gpu]


def flag_spec(parser: argparse.ArgumentParser | None = None) -> list[dict[str, Any]]:
    """The setup flags as the page's form shows them, in the parser's order: query key (the flag without
    its dashes), kind (switch, choice, int, text), choices, help, metavar and the group's title."""
    p = parser or job_flags.setup_parser()
    groups = {id(a): g.title for g in p._action_groups for a in g._group_actions}
    spec = []
    for a in job_flags.setup_actions(p):
        flag = next(o for o in a.option_strings if o.startswith("--"))
        # a switch: store_true, or on/off (BooleanOptionalAction: --grad-ckpt / --no-grad-ckpt, unset = default)
        switch = isinstance(a, argparse.BooleanOptionalAction) or (a.nargs == 0 and a.const is True)
        kind = ("switch" if switch else "choice" if a.choices is not None
                else "int" if a.type is int else "text")
        title = groups.get(id(a))
        text = a.help or ("one of " + ", ".join(map(str, a.choices)) if a.choices is not None else flag)
        spec.append({"key": flag[2:], "flag": flag, "kind": kind, "help": text,
                     "choices": list(a.choices) if a.choices is not None else None, "metavar": a.metavar,
                     "group": title if title not in (None, "options", "optional arguments") else BASE_GROUP})
    return spec


def site_data(assumptions: Assumptions, cards: tuple[Card, ...], gpus: Mapping[str, Gpu]) -> dict[str, Any]:
    """site.json: the inputs every page shares (load_site reads it back) and the form's flags."""
    return {"format": SITE_FORMAT, "assumptions": dataclasses.asdict(assumptions),
            "cards": [dataclasses.asdict(c) for c in cards],
            "gpus": {k: dataclasses.asdict(g) for k, g in gpus.items()}, "flags": flag_spec()}


def load_site(data: Mapping[str, Any]) -> Site:
    if data.get("format") != SITE_FORMAT:
        raise ValueError(f"site.json format {data.get('format')!r}, expected {SITE_FORMAT}")
    cards = tuple(Card(**{**c, "gpus": tuple(c["gpus"])}) for c in data["cards"])
    return Site(Assumptions(**data["assumptions"]), cards, {k: Gpu(**g) for k, g in data["gpus"].items()})


def setup_from_query(query: str, parser: argparse.ArgumentParser | None = None
                     ) -> tuple[list[tuple[str, str | None]], list[str]]:
    """The query's setup as (flag, value) pairs in the parser's order (value None: a switch that is on),
    and the keys it does not know. A switch is on when its value is 1, true, on or yes; an empty value is
    no flag (the default)."""
    p = parser or job_flags.setup_parser()
    given: dict[str, str] = {}
    for key, value in parse_qsl(query.lstrip("?"), keep_blank_values=True):
        given[key] = value
    setup: list[tuple[str, str | None]] = []
    known = set()
    for spec in flag_spec(p):
        known.add(spec["key"])
        value = given.get(spec["key"], "").strip()
        if spec["kind"] == "switch":
            if value.lower() in TRUE:
                setup.append((spec["flag"], None))
            elif value.lower() in FALSE and f"--no-{spec['key']}" in p._option_string_actions:
                setup.append((f"--no-{spec['key']}", None))  # off, where the flag can say so (a recipe's default)
        elif value:
            setup.append((spec["flag"], value))
    return setup, sorted(k for k in given if k not in known)


def cli_args(setup: list[tuple[str, str | None]]) -> list[str]:
    """The setup as the terminal takes it: --method lora --grad-ckpt."""
    return [x for flag, value in setup for x in ((flag,) if value is None else (flag, value))]


def canonical_query(setup: list[tuple[str, str | None]]) -> str:
    """The setup as the page's query: method=lora&grad-ckpt=1 (grad-ckpt=0 for --no-grad-ckpt)."""
    pairs = []
    for flag, value in setup:
        if value is None and flag.startswith("--no-"):
            pairs.append((flag[len("--no-"):], "0"))
        else:
            pairs.append((flag[2:], "1" if value is None else value))
    return urlencode(pairs)


def command(model_id: str, setup: list[tuple[str, str | None]]) -> str:
    """The same setup for the terminal: `neurarch-trace MODEL --method lora ...`, quoted for a shell."""
    return shlex.join([job_flags.PROG, model_id, *cli_args(setup)])


def calculate(config_text: str, model_id: str, site: Site, query: str) -> dict[str, Any]:
    """The setup in `query` for the model whose config.json (as the estimator reads it) is config_text:
    the peak, its moment and parts, each card's verdict and largest batch, and the CLI command. An input
    the CLI refuses gives {"ok": False, "error": the CLI's message}."""
    parser = job_flags.setup_parser()
    setup, ignored = setup_from_query(query, parser)
    out: dict[str, Any] = {"ok": False, "query": canonical_query(setup), "command": command(model_id, setup),
                           "args": cli_args(setup), "ignored": ignored}
    # `--flag=value` parses as `--flag value` does, and keeps a value that starts with a dash a value.
    argv = [flag if value is None else f"{flag}={value}" for flag, value in setup]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        out["error"] = lines[-1] if lines else "the setup could not be read"
        return out
    try:
        job_flags.check(args)
        given = {k: v for k, v in job_flags.overrides(args).items() if v is not None}
        assumptions = dataclasses.replace(site.assumptions, **given)
        job = job_flags.job(args)
        spread = job_flags.setup(args)
        config = json.loads(config_text)

        def peak(batch: int) -> int:
            return estimate(config, model_id=model_id, assumptions=assumptions, cards=site.cards, gpus=site.gpus,
                            job=dataclasses.replace(job, batch=batch), setup=spread,
                            serve_tokens_asked=args.serve_tokens, structure=False).memory.peak_bytes

        report = estimate(config, model_id=model_id, assumptions=assumptions, cards=site.cards, gpus=site.gpus,
                          job=job, setup=spread, serve_tokens_asked=args.serve_tokens, structure=False)
    except TraceError as exc:
        out["error"] = f"{job_flags.PROG}: {exc}"
        return out
    m = report.memory
    cache = {job.batch: m.peak_bytes}

    def cached(batch: int) -> int:
        if batch not in cache:
            cache[batch] = peak(batch)
        return cache[batch]

    parts = dict(m.breakdown)
    held = m.held_peak_bytes - m.peak_bytes  # what a card holds beside the peak: NCCL's, less a counted context
    out.update(ok=True, peak_bytes=m.peak_bytes, peak=f.gb(m.peak_bytes), peak_phase=m.peak_phase,
               job=dict(m.job), job_text=job_text(dict(m.job)),
               held=f.held_words(m.held_context_bytes, m.held_nccl_bytes),
               breakdown=[{"part": p, "label": p.replace("_", " "), "bytes": parts.get(p, 0),
                           "text": f.gb(parts.get(p, 0))} for p in PARTS],
               # an nvidia-smi peak meets a budget with its CUDA context counted once (Memory.held_context_bytes),
               # a peak on each of several GPUs with NCCL's buffers beside it (Memory.held_nccl_bytes)
               cards=[{"name": c.name, "budget_bytes": c.budget_bytes, "budget": f.gb(c.budget_bytes),
                       "fits": m.held_peak_bytes <= c.budget_bytes,
                       "max_batch": largest_batch(cached, c.budget_bytes - held)} for c in m.cards])
    for card in out["cards"]:
        card["max_batch_text"] = f.count(card["max_batch"]) if card["max_batch"] else f.DASH
    return out


def job_text(job: Mapping[str, Any]) -> str:
    """memory.job in words: "lora, amp, bf16 weights, adamw, batch 4, 4,096 tokens, gradient checkpointing"."""
    words = [str(job["method"]), str(job["precision"]), f"{job['weights']} weights"]
    if job["method"] != "inference":
        words.append(str(job["optimizer"]))
    if job["method"] in ("lora", "qlora"):
        words.append(f"rank {f.count(job['lora_rank'])} on {f.lora_targets(job['lora_targets'])}")
    words += [f"batch {f.count(job['batch'])}", f"{f.count(job['tokens'])} tokens"]
    if job.get("new_tokens"):
        words.append(f"{f.count(job['new_tokens'])} new tokens")
    if job.get("grad_ckpt"):
        words.append("gradient checkpointing")
    words.append(f"{job['attention']} attention, {job['metric']}")
    return ", ".join(words)


def largest_batch(peak: Callable[[int], int], budget: int) -> int:
    """The largest batch whose peak fits `budget` (0: not even batch 1), peak being non-decreasing in the
    batch. First a guess from the peaks at batch 1 and 2 (peaks are close to linear in the batch), checked
    on both sides; then a galloping and a binary search from what the guess showed."""
    if peak(1) > budget:
        return 0
    lo, hi = 1, None  # peak(lo) fits; peak(hi) does not
    slope = peak(2) - peak(1)
    if slope > 0:
        guess = min(MAX_BATCH, 1 + (budget - peak(1)) // slope)
        if peak(guess) <= budget:
            lo = guess
        else:
            hi = guess
    step = 1
    while hi is None:
        if lo >= MAX_BATCH:
            return MAX_BATCH
        probe = min(MAX_BATCH, lo + step)
        if peak(probe) <= budget:
            lo, step = probe, step * 2
        else:
            hi = probe
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if peak(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


def run_page(model_text: str, site_text: str, query: str, config_text: str | None = None) -> str:
    """The page's entry point (static/calc.js): the page's own inputs (the text of its calc-model element:
    {"id", "config"}, or {"id"} with the config in config_text, from the file beside a page whose config is
    large), site.json's text and the query → calculate()'s answer as JSON text."""
    model = json.loads(model_text)
    config = json.dumps(model["config"]) if config_text is None else config_text
    return json.dumps(calculate(config, model["id"], _site(site_text), query))


@functools.lru_cache(maxsize=2)
def _site(text: str) -> Site:
    return load_site(json.loads(text))
