"""`neurarch-trace measure`: parse the options, resolve MODEL, run on CUDA or the CPU simulation, write the JSON line."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, MeasureError, RunFailure, TraceError
from ..estimator.memory.sdpa_table import NO_SDPA


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
        raise ConfigError("command line", "--card", name,
                          f"is not a card of site_config.yaml ({', '.join(cards)})")
    if not torch.cuda.is_available():
        raise MeasureError("emulating a card needs a CUDA device", "command line", "--card", name)
    torch.empty(1, device="cuda")
    free, total = torch.cuda.mem_get_info()
    context = total - free - torch.cuda.memory_reserved()
    return max(0.01, min(1.0, (cards[name].memory_usable_bytes - context) / total))


def _described(setup) -> str:
    """The setup in a few words, for a failed run's message."""
    return f"--method {setup.method} --batch {setup.batch} --tokens {setup.tokens}"


def measure(model: str, setup, *, device: str = "auto", max_layers: int | None = None,
            overrides: dict[str, Any] | None = None, memory_fraction: float | None = None, explain: bool = False,
            snapshot: str | None = None, note: str | None = None, allocator: bool = False) -> dict[str, Any]:
    """Resolve MODEL (folder, config.json, or repo id in the snapshot / on the Hub), run, and return the record.

    Raises a TraceError: ConfigError or ModelNotFound for bad input, MeasureError for a run this install or device
    cannot make, RunFailure when torch (or transformers, peft) stops the run with an error of its own."""
    from ..resolve import resolve_model
    from .record import make_record
    from .setup import context_of, shrink

    record = resolve_model(model, Path(snapshot) if snapshot else None)
    source = record.config()
    config, shrunk = shrink(source, max_layers, overrides)
    if not setup.attention:  # none asked: transformers' own pick, SDPA only where the class has it (sdpa_table)
        setup = dataclasses.replace(setup, attention="eager" if config.get("model_type") in NO_SDPA else "sdpa")
    context = context_of(config)
    if context is not None and setup.tokens + setup.new_tokens > context:
        raise ConfigError(record.id, "--tokens + --new-tokens", setup.tokens + setup.new_tokens,
                          f"is over the model's {context} positions")
    try:
        import torch
    except ImportError:
        raise MeasureError("measuring needs the [measure] extra: pip install -e '.[measure]' in the repository",
                           record.id, "--device", device) from None
    from .run import run_cpu, run_cuda

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise MeasureError("no CUDA device here", record.id, "--device", device)
    if device in ("cpu", "cpu-real"):
        if memory_fraction is not None:
            raise ConfigError(record.id, "--memory-fraction", memory_fraction, "needs a CUDA device (--device cpu)")
        if setup.optimizer == "adamw8bit":
            raise MeasureError("adamw8bit's CUDA kernels are not simulated on the CPU", record.id, "--optimizer",
                               setup.optimizer)
    try:
        if device == "cuda":
            result = run_cuda(config, setup, memory_fraction=memory_fraction)
        else:
            result = run_cpu(config, setup, explain=explain, allocator=allocator, real=device == "cpu-real")
    except MeasureError as exc:
        raise exc.for_model(record.id) from None
    except TraceError:
        raise
    except Exception as exc:  # noqa: BLE001 - torch's own failure: reported as a failed run, not as bad input
        raise RunFailure(record.id, _described(setup), exc) from exc
    return make_record(record.id, config, source, shrunk, setup, result, note)


def _setup_error(args: argparse.Namespace, exc: ValueError) -> ConfigError:
    """setup.py's ValueError ("--flag must ...") as the ConfigError naming the flag and the value given."""
    text = str(exc)
    flag = text.split()[0] if text.startswith("--") else None
    value = getattr(args, flag[2:].replace("-", "_"), None) if flag else None
    reason = text[len(flag):].strip() if flag else text
    return ConfigError("command line", flag, value, reason)


def run_measure(argv: Sequence[str], console) -> int:
    """The `measure` subcommand. Exit 0 with the JSON line written; 3 for an OOM; a TraceError's exit code
    otherwise (2 bad input or a run this machine cannot make, 1 a run torch stopped), its message on stderr."""
    try:
        return _measure_command(argv, console)
    except TraceError as exc:
        print(f"neurarch-trace measure: {exc}", file=sys.stderr)
        return exc.exit_code


def _measure_command(argv: Sequence[str], console) -> int:
    from .record import dumps
    from .setup import parse_overrides, parser, setup_from_args

    p = parser()
    args = p.parse_args(list(argv))
    try:
        setup = setup_from_args(args)
        overrides = parse_overrides(args.set)
    except ValueError as exc:
        raise _setup_error(args, exc) from None
    _quiet()
    fraction = args.memory_fraction
    if fraction is not None and not 0.0 < fraction <= 1.0:
        raise ConfigError("command line", "--memory-fraction", fraction, "must be in (0, 1]")
    if args.card:
        fraction = card_fraction(args.card)
    rec = measure(args.model, setup, device=args.device, max_layers=args.max_layers, overrides=overrides,
                  memory_fraction=fraction, explain=args.explain, snapshot=args.snapshot, allocator=args.allocator,
                  note=f"emulating {args.card}" if args.card else None)
    line = dumps(rec)
    if args.out:
        try:
            with open(args.out, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except OSError as exc:
            raise ConfigError("command line", "--out", args.out, f"cannot write ({exc.strerror or exc})") from None
    else:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    err = sys.stderr
    m, est = rec["measured"], rec["estimate"]
    summary = (f"{rec['model']} {setup.method} {setup.precision} b{setup.batch} t{setup.tokens}: "
               f"{m['status']} peak {m['peak_bytes'] / 2**30:.3f} GiB ({m['metric']})")
    if est:
        summary += f", estimate {est['peak_bytes'] / 2**30:.3f} GiB ({(est['peak_bytes'] / max(m['peak_bytes'], 1) - 1) * 100:+.1f}%)"
    if m.get("reserved_bytes"):  # --allocator: the replay's figures over the live peak
        reserved, least, x_reserved, x_least = (
            f"{(m[key] / max(m['peak_bytes'], 1) - 1) * 100:+.1f}%" for key in (
                "reserved_bytes", "minimum_capacity_bytes", "reserved_bytes_expandable",
                "minimum_capacity_bytes_expandable"))
        summary += f"; reserved {reserved}, least card {least} (expandable segments: {x_reserved}, {x_least})"
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
