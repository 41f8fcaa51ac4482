"""The `neurarch-trace` command: estimate one model (terminal, --json, --plan, --html), build, crawl."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from .errors import ConfigError, FileAccessError, InternalError, JobError, TraceError
from .resolve import LOCAL, resolve_model

# The --plan tables' width on stdout piped or redirected with no COLUMNS set, where rich would take 80: wide enough
# for their figures to stay on one line; the sentences keep rich's width
PIPED_TABLE_WIDTH = 120


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
    from . import job_flags

    job_flags.add_setup_arguments(p)  # --tokens ... --metric: the page's calculator reads the same flags
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


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _crawl_parser(site_config: Path | None) -> tuple[argparse.ArgumentParser, tuple[str, ...]]:
    """The crawl's options, their defaults read from the settings (crawl.limit, crawl.pipeline_tags); returns the
    parser and the pipeline tags crawled when no --pipeline-tag is given."""
    from .hub.crawl import crawl_defaults
    from .hub.snapshot import DEFAULT_SNAPSHOT_DIR

    limit, tags = crawl_defaults(site_config)
    p = argparse.ArgumentParser(prog="neurarch-trace crawl", description="Refresh the snapshot from the Hugging Face Hub.")
    p.add_argument("--limit", type=_positive_int, default=limit, metavar="N",
                   help=f"how many of the most downloaded models to list per tag (default {limit})")
    p.add_argument("--pipeline-tag", dest="pipeline_tags", action="append", metavar="T",
                   help=f"list this task (repeatable); '' for every task (default: {', '.join(tags)})")
    p.add_argument("--snapshot", type=Path, default=DEFAULT_SNAPSHOT_DIR, metavar="DIR",
                   help="snapshot folder to update (default: snapshot/ at the repo root)")
    p.add_argument("--config", type=Path, metavar="FILE", help="site_config.yaml whose keys override the defaults")
    return p, tags


def _run_model(argv: Sequence[str], console: Console, err: Console) -> int:
    args = _model_parser().parse_args(argv)
    from . import job_flags
    from .pipeline import report_for_record
    from .settings import load_settings

    job_flags.check(args, args.model)
    settings = load_settings(args.config, **job_flags.overrides(args))
    if args.snapshot is not None and not args.snapshot.is_dir():  # else a missing folder reads as "not in it"
        raise ConfigError("command line", "--snapshot", str(args.snapshot),
                          "the snapshot folder does not exist" if not args.snapshot.exists() else "is not a folder")
    record = resolve_model(args.model, args.snapshot)
    # The structure table is for the JSON twin and the page; the terminal summary does without it.
    try:
        report = report_for_record(record, settings, job_flags.job(args), job_flags.setup(args), args.serve_tokens,
                                   structure=bool(args.json or args.html))
    except JobError as exc:  # a value the recipe set, not a flag the user gave: say where it came from
        flag = "--" + (exc.key or "").replace("_", "-")
        action = next((a for a in _model_parser()._actions if flag in a.option_strings), None)
        # a flag that takes a value (not a switch, whose --no- form would replace it) and was not given in any form
        if args.recipe and action is not None and action.nargs != 0 and action.const is None \
                and getattr(args, action.dest, None) is None:
            raise JobError(exc.model, exc.key, exc.value, f"{exc.reason} (the value --recipe {args.recipe} sets; "
                                                          f"{flag} replaces it)") from None
        raise
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), sort_keys=True, indent=1) + "\n")
        return 0
    if args.html:
        from .site.build import render_model_page

        page = render_model_page(report, None if record.config_source == LOCAL else record, settings, standalone=True)
        try:
            args.html.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise ConfigError("command line", "--html", str(args.html),
                              f"cannot write the page ({exc.strerror or exc})") from None
        err.print(f"wrote {args.html} ({len(page.encode()):,} bytes)", markup=False, highlight=False)
        return 0
    from .terminal import print_summary, wants_replay

    replayed = None
    least_over: tuple[float, ...] = ()
    least_expandable: tuple[float, ...] = ()
    if wants_replay(report, job_flags.asked(args)):
        from .site import accuracy_page

        table = accuracy_page.load()  # what the caching allocator adds, measured: None where the table is absent
        if table is not None:
            replayed, least_over = accuracy_page.replayed_all(table), table.least_card_over_pct
            least_expandable = table.least_card_expandable_pct
    piped = not console.is_terminal and not os.environ.get("COLUMNS")
    print_summary(console, report, plan=args.plan, asked=job_flags.asked(args), replayed=replayed,
                  least_over=least_over, least_expandable=least_expandable,
                  table_width=PIPED_TABLE_WIDTH if piped else None)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    console, err = Console(highlight=False), Console(stderr=True, highlight=False)
    try:
        if argv[:1] == ["build"]:
            from .hub.snapshot import DEFAULT_SNAPSHOT_DIR
            from .settings import load_settings
            from .site.build import run_build
            from .site.search import SHARD_SIZE

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
            from .hub.crawl import run_crawl

            pre = argparse.ArgumentParser(add_help=False)
            pre.add_argument("--config", type=Path)
            known, _ = pre.parse_known_args(argv[1:])
            parser, default_tags = _crawl_parser(known.config)
            args = parser.parse_args(argv[1:])
            return run_crawl(limit=args.limit, pipeline_tags=tuple(args.pipeline_tags or default_tags),
                             snapshot_dir=args.snapshot, console=err)
        return _run_model(argv, console, err)
    except KeyboardInterrupt:
        err.print("neurarch-trace: interrupted", markup=False)
        return 130
    except Exception as exc:  # noqa: BLE001 - the promise is "never a traceback": one line, a TraceError
        error = _as_trace_error(exc, argv)
        err.print(f"neurarch-trace: {error}", markup=False, highlight=False, soft_wrap=True)
        return error.exit_code


def _as_trace_error(exc: Exception, argv: Sequence[str]) -> TraceError:
    """Every error the command prints is a TraceError: the project's own as they are; input nested too deeply
    for Python, a file the system refuses, and anything unexpected (a bug) named with the command they hit."""
    if isinstance(exc, TraceError):
        return exc
    command = " ".join(argv[:1]) if argv[:1] in (["build"], ["crawl"], ["measure"]) else (argv[0] if argv else "")
    if isinstance(exc, RecursionError):
        return ConfigError(command, None, None, "input is nested too deeply")
    if isinstance(exc, OSError):
        return FileAccessError(command, exc)
    return InternalError(command, exc)

if __name__ == "__main__":
    raise SystemExit(main())
