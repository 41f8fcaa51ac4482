"""One measured run as a JSON line: model, config hash, setup, device, versions, measured bytes, peak, estimate."""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from .setup import Setup, config_hash, estimate_for, job_of

RECORD_SCHEMA = 1


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("torch", "transformers", "peft", "bitsandbytes", "neurarch-trace"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def estimate_or_reason(config: Mapping[str, Any], model_id: str, setup: Setup,
                       kernels: str = "cuda") -> tuple[dict | None, str | None]:
    """The estimator's figure for the setup, or None with why (unsupported setup, or the estimator refused)."""
    try:
        est = estimate_for(config, model_id, setup, kernels=kernels)
    except Exception as exc:  # noqa: BLE001 - the estimator's own error (unsupported family, bad key) is data here
        return None, f"estimator refused: {type(exc).__name__}: {exc}"[:300]
    if est is None:
        return None, job_of(setup)[1] or "the estimator has no such setup"
    from .. import __version__

    est["estimator_version"] = __version__
    return est, None


def make_record(model_id: str, config: Mapping[str, Any], source_config: Mapping[str, Any] | None,
                shrunk: Mapping[str, Any] | None, setup: Setup, result: Mapping[str, Any],
                note: str | None = None) -> dict[str, Any]:
    """The JSON-line object. `result` is run_cpu's or run_cuda's dict."""
    kernels = "cpu" if result["device"].get("kind") == "cpu-simulated" else "cuda"
    estimate, why = estimate_or_reason(config, model_id, setup, kernels)
    measured = dict(result["measured"])
    rec: dict[str, Any] = {
        "schema": RECORD_SCHEMA,
        "model": model_id,
        "model_type": config.get("model_type"),
        "config_hash": config_hash(config),
        "source_config_hash": config_hash(source_config) if source_config is not None and shrunk else None,
        "config_changes": dict(shrunk) if shrunk else None,
        "config": dict(config),
        "setup": setup.to_dict(),
        "device": dict(result["device"]),
        "versions": versions(),
        "params": dict(result["params"]),
        "measured": measured,
        "peak": result.get("peak"),
        "estimate": estimate,
        "estimate_note": why,
        "seconds": result.get("seconds"),
    }
    if result.get("live_at_peak") is not None:
        rec["live_at_peak"] = result["live_at_peak"][:400]
    if note:
        rec["note"] = note
    return rec


def dumps(record: Mapping[str, Any]) -> str:
    """One line, keys sorted, so that identical runs give identical lines (less `seconds`)."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def read_jsonl(path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise ValueError(f"{path}:{n}: not a JSON line ({exc})") from None
    return rows
