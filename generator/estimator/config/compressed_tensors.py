"""compressed-tensors' quantization_config read as compressed-tensors reads it: each config group's weights and
input activations (QuantizationArgs: quantization/quant_args.py, 0.20), its defaults and lax parsing kept: num_bits 8,
type int, symmetric and not dynamic unless said, a strategy left out inferred from group_size, numbers as strings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

# Digits past which a number in a config is not read: no format has a group or a width near it, and Python refuses to
# read a string of more than 4,300 digits as an int
MAX_DIGITS = 12


class Args(NamedTuple):
    """One QuantizationArgs: what a group quantises its weights or its input activations to."""

    num_bits: int
    type: str
    symmetric: bool
    group_size: int | None
    strategy: str
    dynamic: bool
    actorder: str = ""  # activation ordering: "group" keeps a group index per input (weight_g_idx)


DEFAULT_ARGS = Args(8, "int", True, None, "tensor", False)  # QuantizationArgs() with nothing said


def ct_groups(q: Mapping[str, Any]) -> list[tuple[Args | None, Args | None, str]]:
    """Each config group's weights and input activations (None where it names none or they are not a mapping) and
    its own format ("" where it names none)."""
    groups = q.get("config_groups")
    if not isinstance(groups, Mapping):
        return []
    return [(ct_args(g.get("weights")), ct_args(g.get("input_activations")), text(g.get("format")))
            for g in groups.values() if isinstance(g, Mapping)]


def ct_args(x: Any) -> Args | None:
    """QuantizationArgs' fields with their defaults, the strategy inferred from group_size where it is left out
    (group_size > 0: group; -1: channel; none: tensor); None where `x` is not a mapping."""
    if not isinstance(x, Mapping):
        return None
    group = number(x.get("group_size"))
    strategy = text(x.get("strategy")) or ("tensor" if group is None else "group" if group > 0 else "channel")
    symmetric, dynamic = x.get("symmetric", True), x.get("dynamic", False)
    return Args(number(x.get("num_bits")) or 8, text(x.get("type")) or "int",
                symmetric is True or text(symmetric) == "true", group, strategy,
                dynamic not in (False, None) and text(dynamic) != "false", text(x.get("actorder")))


def text(x: Any) -> str:
    """A string value lower-cased; "" where it is not a string."""
    return x.lower() if isinstance(x, str) else ""


def number(x: Any) -> int | None:
    """An integer as pydantic's lax mode takes one: an int, or a string of one; else None."""
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    digits = x.strip().lstrip("-") if isinstance(x, str) else ""
    return int(x) if digits.isdigit() and len(digits) <= MAX_DIGITS else None
