"""Memory against tokens per sample at batch 1 (`memory.curve`): the points the page's memory chart draws.

Each point is the same three peaks the Report gives at its own token counts (memory.train_profile
for a full fine-tune and for LoRA, memory.serve_profile for serving, each `.total(1)`), evaluated at
512, 1,024, 2,048, ... tokens up to the model's context, and at the context itself when it is not a
power of two (short contexts start lower, see curve_tokens). Nothing here is a new formula: the curve is the estimator's own profiles swept over
tokens, so a change to memory.py moves the curve with the headline figures.

Cost: a profile is a walk over the model's blocks; a 12-point curve would walk them 36 more times
per model. Profiles the estimate already built (training at train_tokens, serving at serve_tokens)
are passed in and reused, so those points cost nothing.
"""

from __future__ import annotations

from typing import Mapping

from .arch import Arch
from .graph import Graph
from .inputs import Assumptions
from .memory import Profile, serve_profile, train_profile
from .report import CurvePoint

FIRST_TOKENS = 512  # the chart starts here (lower only for contexts under 2,048: see curve_tokens)
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

    known: profiles already built, by (method, tokens) with method "full", "lora" or "serve"; they
    are used as they are instead of being built again."""
    known = known or {}
    points = []
    for t in (curve_tokens(a.max_context) if tokens is None else tokens):
        full = known.get(("full", t)) or train_profile(a, g, s, t, "full", s.lora_rank)
        lora = known.get(("lora", t)) or train_profile(a, g, s, t, "lora", s.lora_rank)
        serve = known.get(("serve", t)) or serve_profile(a, g, s, t)
        points.append(CurvePoint(t, full.total(1), lora.total(1), serve.total(1)))
    return tuple(points)
