"""The estimate guard: every Report the estimator makes for the snapshot and transformers' classes is unchanged.

tests/guard/estimates.json holds a hash and the headline figures of each case (tools/estimate_guard.py). A change
of any number fails here with the list of what moved; after reviewing it, rewrite the guard with
`.venv/bin/python tools/estimate_guard.py --write` and say in the commit message why each figure moved.
"""

from __future__ import annotations

import json

from tools.estimate_guard import GUARD, current, differences


def test_every_estimate_is_unchanged_or_the_guard_says_why():
    diff = differences(json.loads(GUARD.read_text(encoding="utf-8")), current())
    assert not diff, f"{len(diff)} estimates changed:\n" + "\n".join(diff[:60])


def test_differences_name_the_figure_that_moved():
    old = {"a": {"sha256": "1", "params.graph": 10, "sections": {"params": "p", "cost": "c"}}, "b": {"sha256": "2"},
           "d": {"sha256": "5", "params.graph": 1, "sections": {"provenance": "x"}}}
    new = {"a": {"sha256": "3", "params.graph": 11, "sections": {"params": "q", "cost": "c"}}, "c": {"sha256": "4"},
           "d": {"sha256": "6", "params.graph": 1, "sections": {"provenance": "y"}}}
    assert differences(old, new) == ["a: params.graph 10 -> 11 [params changed]", "b: removed", "c: added",
                                     "d: no headline figure moved [provenance changed]"]
