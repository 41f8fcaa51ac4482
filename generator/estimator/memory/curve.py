"""Memory against tokens per sample at batch 1 (`memory.curve`): the points the page's memory chart draws.

Each point is the same three peaks the Report gives at its own token counts (memory.train_profile
for a full fine-tune and for LoRA, memory.serve_profile for serving, each `.total(1)`), evaluated at
512, 1,024, 2,048, ... tokens up to the model's context, and at the context itself when it is not a
power of two (short contexts start lower, see curve_tokens). Nothing here is a new formula: the curve is the estimator's own profiles swept over
tokens, so a change to memory/profile.py moves the curve with the headline figures.

Cost: a profile is a walk over the model's blocks; a 12-point curve built naively would walk them 36 more
times per model. The profiles the estimate already built (training at train_tokens, serving at
serve_tokens) are moved to each point instead: O(1) per training point, one pass over the caches per
serving point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..config.arch import Arch
from ..graph.nodes import Graph
from ..inputs import Assumptions
from .profile import serve_profile, serve_token_curve, train_profile
from .stages import Profile

FIRST_TOKENS = 512  # the chart starts here (lower only for contexts under 2,048: see curve_tokens)


@dataclass(frozen=True)
class CurvePoint:
    """Peak bytes at batch 1 and `tokens` per sample for each method."""

    tokens: int
    train_full_bytes: int
    train_lora_bytes: int
    serve_bytes: int


MAX_POINTS = 12  # 512 .. 1M tokens (2^9 .. 2^20): longer contexts keep their last point (see curve_tokens)


def curve_tokens(context: int, first: int = FIRST_TOKENS, max_points: int = MAX_POINTS) -> tuple[int, ...]:
    """first, 2 x first, ... up to context, plus context when it is not one of them.

    With more than max_points, the first max_points - 1 powers of two are kept and the context
    ends the curve (a 10M-token context: 512 .. 512K, then 10M), so the chart always reaches the
    model's context. A context under 4 x first (BERT's and T5's 512, GPT-2's 1,024) starts at the
    power of two at most context / 8 instead, so that it is still a line of four or five points
    (512: 64, 128, 256, 512) rather than one or two."""
    if context <= 0:
        return ()
    if context < 4 * first:
        first = 1 << max(0, (context // 8).bit_length() - 1)
    points = []
    tokens = first
    while tokens <= context:
        points.append(tokens)
        tokens *= 2
    if not points or points[-1] != context:
        points.append(context)
    if len(points) > max_points:
        points = points[: max_points - 1] + [context]
    return tuple(points)


def memory_curve(a: Arch, g: Graph, s: Assumptions, known: Mapping[tuple[str, int], Profile] | None = None,
                 tokens: tuple[int, ...] | None = None) -> tuple[CurvePoint, ...]:
    """The curve at batch 1 for every token count of curve_tokens(a.max_context) (or `tokens`).

    known: profiles already built, by (method, tokens) with method "full", "lora" or "serve". One profile per
    method is enough: a training profile moves to other token counts with Profile.total_at (its per-sample
    bytes are linear in tokens), serving by swapping its token-dependent bytes (profile.serve_token_curve).
    Both are held equal to building each profile at each point by tests/test_curve.py."""
    points = curve_tokens(a.max_context) if tokens is None else tokens
    if not points:
        return ()
    have = {method: (t, p) for (method, t), p in (known or {}).items()}
    full = have.get("full", (0, None))[1] or train_profile(a, g, s, points[0], "full", s.lora_rank)
    lora = have.get("lora", (0, None))[1] or train_profile(a, g, s, points[0], "lora", s.lora_rank)
    serve_tokens, serve = have.get("serve", (points[0], None))
    serve = serve or serve_profile(a, g, s, serve_tokens)
    # the serving length's own token bytes first, then every point's, in one pass
    token_bytes = serve_token_curve(g, s, (serve_tokens, *points))
    serve_fixed = serve.total(1) - token_bytes[0]
    return tuple([CurvePoint(t, f, lo, serve_fixed + b) for t, f, lo, b in
                  zip(points, full.totals_at(points), lora.totals_at(points), token_bytes[1:], strict=True)])
