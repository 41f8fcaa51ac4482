"""The `neurarch-trace` command: estimate one model (terminal, --json, --plan, --html), build, crawl."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Sequence

from rich.console import Console

from .errors import ConfigError, ModelNotFound, TraceError
from .records import REPO_ID_RE, ModelRecord

MAX_CONFIG_BYTES = 16 * 1024 * 1024
LOCAL = "local config.json"  # config_source of a record read from the user's own file  # the largest real config.json files are a few hundred KB


def _model_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="neurarch-trace",
        description="GPU memory and cost to fine-tune and serve a Hugging Face model, from its config.json alone. "
                    "Other commands: `neurarch-trace build` (the site), `neurarch-trace crawl` (the Hub snapshot), "
                    "`neurarch-trace measure` (a measured run; needs the [measure] extra).",
    )
    p.add_argument("model", metavar="MODEL", help="a folder holding config.json, a config.json path, or a Hub repo id")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print only the Report JSON on stdout")
    out.add_argument("--html", metavar="FILE", type=Path, help="write the model's page as one self-contained HTML file")
    p.add_argument("--plan", action="store_true", help="add the per-card plan: largest batches, splits and cost")
    p.add_argument("--tokens", type=int, metavar="T", help="tokens per training sample (default from site_config.yaml)")
    p.add_argument("--batch", type=int, metavar="B", help="micro batch of the priced job")
    p.add_argument("--lora-rank", type=int, metavar="R", help="LoRA rank")
    p.add_argument("--serve-tokens", type=int, metavar="T", help="tokens per served sequence")
    from .estimator.memory import job as j

    ex = p.add_argument_group("exact setup", "memory.peak_bytes / peak_phase / breakdown for one real run "
                                             "(default: full AMP AdamW at batch 1 and the training tokens)")
    ex.add_argument("--method", choices=j.METHODS, help="full, lora, qlora or inference (HF generate)")
    ex.add_argument("--precision", choices=j.PRECISIONS,
                    help="amp (fp32 master weights, bf16 autocast), bf16 (pure), fp32")
    ex.add_argument("--weights", choices=j.WEIGHTS, help="how the base is stored (default: follows precision; "
                                                         "nf4 for qlora)")
    ex.add_argument("--optimizer", choices=j.OPTIMIZERS)
    ex.add_argument("--grad-ckpt", action="store_true", help="gradient checkpointing")
    ex.add_argument("--lora-targets", metavar="NAMES", help="all-linear, or comma-separated module names (q_proj,v_proj)")
    ex.add_argument("--new-tokens", type=int, metavar="N", help="tokens generated after the prompt (inference)")
    ex.add_argument("--attention", choices=j.ATTENTIONS)
    ex.add_argument("--metric", choices=j.METRICS,
                    help="allocated (tensors), reserved (+ the allocator's cache), nvidia-smi (+ CUDA context)")
    from .estimator.memory import parallel

    ex.add_argument("--gpus", type=int, metavar="N", default=1, help="GPUs the job runs on (default 1); "
                                                                     "memory.peak_bytes is per GPU")
    ex.add_argument("--strategy", choices=[x for x in parallel.STRATEGIES if x not in ("single", "tp+pp")],
                    help="how the job is spread (default: ddp when --gpus > 1)")
    ex.add_argument("--offload", choices=parallel.OFFLOADS, default="none",
                    help="ZeRO-Offload (optimizer) or parameter offload (params) to CPU memory")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="site_config.yaml whose keys override the defaults (default: ./site_config.yaml when present)")
    p.add_argument("--snapshot", type=Path, metavar="DIR", help="snapshot folder to look repo ids up in")
    return p


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neurarch-trace build", description="Build the static site from the snapshot.")
    p.add_argument("--snapshot", type=Path, metavar="DIR", help="snapshot folder (default: the committed one)")
    p.add_argument("--out", type=Path, default=Path("public"), metavar="DIR", help="output folder (default: public)")
    p.add_argument("--strict", action="store_true", help="any failed model makes the build fail (exit 1)")
    p.add_argument("--max-problems", type=int, metavar="N",
                   help="fail (exit 1, previous site kept) when more than N models fail")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="site_config.yaml whose keys override the defaults (default: ./site_config.yaml when present)")
    p.add_argument("--site-url", metavar="URL", help="the public URL the site is served from (default: site.url)")
    p.add_argument("--full", action="store_true",
                   help="render every model again instead of copying the unchanged ones from the previous build")
    p.add_argument("--jobs", type=int, metavar="N", help="worker processes (default: one per core)")
    p.add_argument("--no-search", action="store_true", help="skip the Pagefind search index")
    p.add_argument("--search-shard-size", type=int, metavar="N",
                   help="models per search-index shard, each indexed by its own Pagefind run (default: 5000)")
    return p


def _crawl_parser(site_config: Path | None) -> argparse.ArgumentParser:
    from .hub.crawl import add_crawl_arguments

    p = argparse.ArgumentParser(prog="neurarch-trace crawl", description="Refresh the snapshot from the Hugging Face Hub.")
    add_crawl_arguments(p, site_config)
    p.add_argument("--config", type=Path, metavar="FILE", help="site_config.yaml whose keys override the defaults")
    return p


def read_config_file(path: Path, model: str) -> str:
    """The text of a local config.json, refusing huge or unreadable files with one clear line."""
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(model, None, None, f"config.json is {size:,} bytes, over the {MAX_CONFIG_BYTES:,}-byte limit")
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(model, None, None, "config.json is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(model, None, None, f"cannot read config.json ({exc.strerror or exc})") from None


def resolve_model(arg: str, snapshot_dir: Path | None) -> ModelRecord:
    """MODEL → record: a local folder or file first, then the snapshot, then the Hub (hub/client.py)."""
    path = Path(arg)
    # A local model is named as the user typed it (less a trailing config.json), so that every
    # message names the file they gave.
    name = arg[: -len("config.json")].rstrip("/\\") if path.name == "config.json" else arg.rstrip("/\\")
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except OSError:  # a name the file system refuses (e.g. longer than 255 bytes) is no local path
        is_dir = is_file = False
    if is_dir:
        cfg = path / "config.json"
        if not cfg.is_file():
            raise ModelNotFound(arg, "folder holds no config.json")
        return ModelRecord(id=name or arg, config_json=read_config_file(cfg, name or arg), config_source=LOCAL,
                           config_provenance="local")
    if is_file:
        return ModelRecord(id=name or arg, config_json=read_config_file(path, name or arg), config_source=LOCAL,
                           config_provenance="local")
    if not REPO_ID_RE.fullmatch(arg):
        raise ModelNotFound(arg, "no such file or folder, and not a Hub repo id (org/name)")
    from .hub import snapshot

    record = snapshot.load_record(snapshot_dir or snapshot.DEFAULT_SNAPSHOT_DIR, arg)
    if record is not None:
        return record
    from .hub import client

    return client.fetch_record(arg)


def _run_model(argv: Sequence[str], console: Console, err: Console) -> int:
    args = _model_parser().parse_args(argv)
    from .pipeline import report_for_record
    from .settings import load_settings

    overrides = {"train_tokens": args.tokens, "job_tokens": args.tokens, "job_batch": args.batch,
                 "lora_rank": args.lora_rank, "serve_tokens": args.serve_tokens}
    for flag, value in (("--tokens", args.tokens), ("--batch", args.batch), ("--lora-rank", args.lora_rank),
                        ("--serve-tokens", args.serve_tokens)):
        if value is not None and value < 1:
            raise ConfigError("command line", flag, value, "must be a positive integer")
    if args.new_tokens is not None and args.new_tokens < 0:
        raise ConfigError("command line", "--new-tokens", args.new_tokens, "must be >= 0")
    settings = load_settings(args.config, **overrides)
    record = resolve_model(args.model, args.snapshot)
    if args.gpus < 1:
        raise ConfigError("command line", "--gpus", args.gpus, "must be a positive integer")
    from .estimator.memory.setups import default_setup

    setup = default_setup(args.gpus, args.strategy, args.offload)
    report = report_for_record(record, settings, _job(args), setup, args.serve_tokens)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), sort_keys=True, indent=1) + "\n")
        return 0
    if args.html:
        from .site.build import render_model_page

        page = render_model_page(report, None if record.config_source == LOCAL else record, settings, standalone=True)
        try:
            args.html.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise ModelNotFound(str(args.html), f"cannot write the page ({exc.strerror or exc})") from None
        err.print(f"wrote {args.html} ({len(page.encode()):,} bytes)", markup=False, highlight=False)
        return 0
    from .terminal import print_summary

    print_summary(console, report, plan=args.plan, settings=settings, asked=_asked(args))
    return 0


def _asked(args: argparse.Namespace) -> bool:
    """Whether the command line names an exact setup (then the summary leads with it)."""
    return any(v is not None for v in (args.method, args.precision, args.weights, args.optimizer, args.lora_targets,
                                       args.new_tokens, args.attention, args.metric, args.strategy)) \
        or bool(args.grad_ckpt) or args.gpus != 1 or args.offload != "none"


def _job(args: argparse.Namespace):
    """The exact setup the options name; tokens 0 = the site's training tokens (capped at the context)."""
    from .estimator.memory.job import Job

    given = {k: v for k, v in (("method", args.method), ("precision", args.precision), ("weights", args.weights),
                                ("optimizer", args.optimizer), ("lora_rank", args.lora_rank),
                                ("lora_targets", args.lora_targets), ("batch", args.batch), ("tokens", args.tokens),
                                ("new_tokens", args.new_tokens), ("attention", args.attention),
                                ("metric", args.metric)) if v is not None}
    return Job(**{"tokens": 0, **given, "grad_ckpt": bool(args.grad_ckpt)})


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    console, err = Console(highlight=False), Console(stderr=True, highlight=False)
    try:
        if argv[:1] == ["build"]:
            from .settings import load_settings
            from .site.build import run_build
            from .site.search import SHARD_SIZE
            from .hub.snapshot import DEFAULT_SNAPSHOT_DIR

            args = _build_parser().parse_args(argv[1:])
            if args.jobs is not None and args.jobs < 1:
                raise ConfigError("command line", "--jobs", args.jobs, "must be a positive integer")
            if args.search_shard_size is not None and args.search_shard_size < 1:
                raise ConfigError("command line", "--search-shard-size", args.search_shard_size,
                                  "must be a positive integer")
            settings = load_settings(args.config)
            if args.site_url is not None:
                settings = dataclasses.replace(settings, site={**settings.site, "url": args.site_url})
            return run_build(snapshot_dir=args.snapshot or DEFAULT_SNAPSHOT_DIR, out_dir=args.out,
                             strict=args.strict, settings=settings, console=err, max_problems=args.max_problems,
                             incremental=not args.full, jobs=args.jobs, search_index=not args.no_search,
                             background_cleanup=True, search_shard_size=args.search_shard_size or SHARD_SIZE)
        if argv[:1] == ["measure"]:
            from .measure.cli import run_measure

            return run_measure(argv[1:], err)
        if argv[:1] == ["crawl"]:
            from .hub.crawl import chosen_tags, run_crawl

            pre = argparse.ArgumentParser(add_help=False)
            pre.add_argument("--config", type=Path)
            known, _ = pre.parse_known_args(argv[1:])
            args = _crawl_parser(known.config).parse_args(argv[1:])
            return run_crawl(limit=args.limit, pipeline_tags=chosen_tags(args), snapshot_dir=args.snapshot,
                             console=err)
        return _run_model(argv, console, err)
    except TraceError as exc:
        err.print(f"neurarch-trace: {exc}", markup=False, highlight=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("neurarch-trace: interrupted", markup=False)
        return 130
    except RecursionError:
        err.print("neurarch-trace: input is nested too deeply", markup=False)
        return 2
    except Exception as exc:  # noqa: BLE001 - the promise is "never a traceback"
        err.print(f"neurarch-trace: internal error ({type(exc).__name__}: {exc}); please report it",
                  markup=False, highlight=False, soft_wrap=True)
        return 70


if __name__ == "__main__":
    raise SystemExit(main())
