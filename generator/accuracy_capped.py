"""Public runs whose token count is a cap (padding to each batch's longest sample, truncated at the cap): the
estimate at the cap bounds the run's peak from above, so a run that measured more is under-estimated whatever
lengths it ran.

Such a row is left out of every error figure (its step ran at lengths the source does not give), but it still
says something true: no step of it was longer than the cap, and the estimate grows with the tokens (a property
test keeps it so), so the estimate at the cap is at least the estimate of any step it ran. Only the rows left out
for that reason alone are read here; each keeps the cause a miss names (accuracy_words.miss_cause).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .accuracy_rows import clauses, estimate_or_reason, setup_of, tensor_bytes
from .accuracy_words import miss_cause

CAP_CLAUSE = "sequence length not exact"


def capped_rows(rows: Sequence[Mapping[str, Any]],
                assumptions) -> tuple[tuple[str, str, str, int, float, str], ...]:
    """(row id, model, method, the cap in tokens, signed error % of the estimate at the cap, cause) per public row
    left out only because its length is a cap, with an estimate and a measured peak; in the rows' order."""
    out = []
    for row in rows:
        reasons = clauses(str(row.get("excluded") or ""))
        if len(reasons) != 1 or not reasons[0].startswith(CAP_CLAUSE):
            continue
        plain = {**row, "excluded": None}
        tokens = (plain.get("setup") or {}).get("tokens")
        estimate = estimate_or_reason(plain, assumptions)[0]
        measured = tensor_bytes(plain, assumptions.cuda_context_bytes)
        if not tokens or estimate is None or not measured:
            continue
        out.append((str(row.get("id")), str(row.get("model")), str(plain["setup"]["method"]), int(tokens),
                    round((estimate - measured) / measured * 100, 1), miss_cause(plain, setup_of(plain))))
    return tuple(out)
