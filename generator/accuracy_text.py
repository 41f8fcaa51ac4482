"""The accuracy table as plain text: what `python -m generator.accuracy` prints (accuracy.json holds the same)."""

from __future__ import annotations

from typing import Any

from .accuracy_rows import MISS_PCT


def _pct(v: float | None) -> str:
    """A percentage figure, "-" where it has no rows."""
    return "-" if v is None else f"{v:.1f}"


def _error_line(e: Any) -> str:
    """One ErrorRow under the header render() writes."""
    return (f"{e.dataset:<10} {e.method:<10} {e.compared:>4} {_pct(e.median_abs_pct):>14} {_pct(e.p90_abs_pct):>11} "
            f"{_pct(e.max_abs_pct):>8} {_pct(e.mean_signed_pct):>10}")


def render(table: Any) -> str:
    """Plain-text table (the command's output)."""
    lines = [f"estimator {table.estimator_version}; rows compared: "
             + ", ".join(f"{d} {c}/{n}" for d, n, c in table.rows), "",
             f"{'dataset':<10} {'method':<10} {'n':>4} {'median |err|%':>14} {'p90 |err|%':>11} {'max':>8} {'mean err%':>10}"]
    lines += [_error_line(e) for e in table.errors]
    lines += ["", "public rows by what they measured (the pages price the allocated peak):"]
    lines += [f"  {_error_line(e)}" for e in table.public_metrics]
    lines += ["", f"{'dataset':<10} {'method':<10} {'card':<18} {'jobs':>5} {'non-fit flagged':>16} {'false no-fit':>13} "
                  f"{'fit, tight':>11}"]
    for r in table.fits:
        lines.append(f"{r.dataset:<10} {r.method:<10} {r.card:<18} {r.jobs:>5} {f'{r.nonfit_flagged}/{r.nonfit}':>16} "
                     f"{f'{r.false_wont_fit}/{r.fit}':>13} {f'{r.fit_tight}/{r.fit}':>11}")
    lines += ["", "CPU-simulated rows by setup:"]
    lines += [f"  {e.method:<62} {e.compared:>4} {_pct(e.median_abs_pct):>6} {_pct(e.p90_abs_pct):>6} {_pct(e.max_abs_pct):>6}"
              for e in table.setups]
    lines += ["", "CPU-simulated training rows by family (leave-one-family-out: nothing is fitted):"]
    lines += [f"  {e.dataset:<16} {e.compared:>4} {_pct(e.median_abs_pct):>6} {_pct(e.p90_abs_pct):>6} {_pct(e.max_abs_pct):>6}"
              for e in table.families]
    lines += ["", "CPU-simulated steps replayed through the caching allocator: reserved and least card over the live "
                  "peak (median, max %), the reserved estimate's error (median |err|, mean %), headroom margin (min %), "
                  "runs short of headroom:"]
    lines += [f"  {a.setup:<62} {a.runs:>3} {a.reserved_over_median_pct:>5} {a.reserved_over_max_pct:>5} "
              f"{a.least_card_over_median_pct:>5} {a.least_card_over_max_pct:>5} {a.reserved_error_median_abs_pct:>5} "
              f"{a.reserved_error_mean_signed_pct:>6} {a.headroom_margin_min_pct:>6} {a.headroom_short:>3}"
              for a in table.allocator]
    lines += ["", f"public rows missed by more than {MISS_PCT:.0f}%, with their named cause:"]
    lines += [f"  {i:<6} {m[:36]:<36} {k:<9} {e:+6.1f}%  {c}" for i, m, k, e, c in table.misses]
    lines += ["", "public runs that ran out of memory where the estimate fits the card, with their named cause:"]
    lines += [f"  {i:<6} {m[:36]:<36} {k:<9} {card}: {e / 1e9:.2f} GB estimated, budget {b / 1e9:.2f} GB;  {c}"
              for i, m, k, card, e, b, c in table.unflagged_oom]
    lines += ["", "public runs whose length is a cap (in no figure above): the error of the estimate at the cap, which "
                  "bounds the run's peak from above:"]
    lines += [f"  {i:<6} {m[:36]:<36} {k:<9} {n:>6} {e:+6.1f}%  {c}" for i, m, k, n, e, c in table.capped]
    lines += ["", "public rows whose unit is not stated (in no figure above), the error if GB and if GiB:"]
    lines += [f"  {i:<6} {m[:36]:<36} {k:<9} {gb:+6.1f}% {gib:+6.1f}%  {c}" for i, m, k, gb, gib, c in table.unit_ambiguous]
    if table.excluded:
        lines += ["", "not compared (dataset, rows, why):"]
        lines += [f"  {d:<10} {n:>4}  {r}" for d, r, n in table.excluded]
    return "\n".join(lines)
