"""`neurarch-trace measure`: parse the options, resolve MODEL, run on CUDA or the CPU simulation, write the JSON line."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence


def _quiet() -> None:
    """transformers and peft warn about deprecations on every call; the JSON line is the output."""
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except ImportError:
        pass


def card_fraction(name: str) -> float:
    """The memory fraction that leaves the caching allocator what the named card (site_config.yaml) would:
    its driver-reported memory less the CUDA context this process measures."""
    import torch

    from ..settings import load_settings

    cards = {c.name: c for c in load_settings().cards}
    if name not in cards:
        raise ValueError(f"--card {name!r} is not a card of site_config.yaml ({', '.join(cards)})")
    torch.empty(1, device="cuda")
    free, total = torch.cuda.mem_get_info()
    context = total - free - torch.cuda.memory_reserved()
    return max(0.01, min(1.0, (cards[name].memory_usable_bytes - context) / total))


def measure(model: str, setup, *, device: str = "auto", max_layers: int | None = None,
            overrides: dict[str, Any] | None = None, memory_fraction: float | None = None, explain: bool = False, snapshot: str | None = None,
            note: str | None = None) -> dict[str, Any]:
    """Resolve MODEL (folder, config.json, or repo id in the snapshot / on the Hub), run, and return the record."""
    from ..resolve import resolve_model
    from .record import make_record
    from .setup import context_of, shrink

    record = resolve_model(model, Path(snapshot) if snapshot else None)
    source = record.config()
    config, shrunk = shrink(source, max_layers, overrides)
    context = context_of(config)
    if context is not None and setup.tokens + setup.new_tokens > context:
        raise ValueError(f"{model}: --tokens + --new-tokens = {setup.tokens + setup.new_tokens} is over the model's "
                         f"{context} positions")
    try:
        import torch
    except ImportError:
        raise RuntimeError("measuring needs the [measure] extra: pip install -e '.[measure]' in the repository") from None
    from .run import run_cpu, run_cuda

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        result = run_cuda(config, setup, memory_fraction=memory_fraction)
    else:
        if memory_fraction is not None:
            raise ValueError("--memory-fraction and --card need a CUDA device")
        result = run_cpu(config, setup, explain=explain)
    return make_record(record.id, config, source, shrunk, setup, result, note)


def run_measure(argv: Sequence[str], console) -> int:
    """The `measure` subcommand. Exit 0 with the JSON line written; 2 for a bad option or model; 3 for an OOM."""
    from ..errors import TraceError
    from .record import dumps
    from .setup import parse_overrides, parser, setup_from_args

    p = parser()
    args = p.parse_args(list(argv))
    err = sys.stderr
    try:
        setup = setup_from_args(args)
        overrides = parse_overrides(args.set)
    except ValueError as exc:
        p.error(str(exc))
    _quiet()
    try:
        from .build import MeasureError

        fraction = args.memory_fraction
        if args.card:
            fraction = card_fraction(args.card)
        if fraction is not None and not 0.0 < fraction <= 1.0:
            raise ValueError("--memory-fraction must be in (0, 1]")
        rec = measure(args.model, setup, device=args.device, max_layers=args.max_layers, overrides=overrides,
                      memory_fraction=fraction,
                      explain=args.explain, snapshot=args.snapshot,
                      note=f"emulating {args.card}" if args.card else None)
    except (TraceError, MeasureError, ValueError, RuntimeError) as exc:
        print(f"neurarch-trace measure: {exc}", file=err)
        return 2
    line = dumps(rec)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    else:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    m, est = rec["measured"], rec["estimate"]
    summary = (f"{rec['model']} {setup.method} {setup.precision} b{setup.batch} t{setup.tokens}: "
               f"{m['status']} peak {m['peak_bytes'] / 2**30:.3f} GiB ({m['metric']})")
    if est:
        summary += f", estimate {est['peak_bytes'] / 2**30:.3f} GiB ({(est['peak_bytes'] / max(m['peak_bytes'], 1) - 1) * 100:+.1f}%)"
    if args.out and console is not None:  # stdout is free: the JSON went to the file
        console.print(summary + f" -> {args.out}", markup=False, highlight=False, soft_wrap=True)
    else:
        print(summary, file=err)
    return 3 if m["status"] == "oom" else 0


def main() -> int:  # python -m generator.measure.cli ...
    from rich.console import Console

    return run_measure(sys.argv[1:], Console(stderr=True, highlight=False))


if __name__ == "__main__":
    raise SystemExit(main())
