"""ModelRecord + Settings → Report: the one place that feeds a snapshot record to the pure estimator."""

from __future__ import annotations

from .estimator import Report, estimate
from .records import ModelRecord
from .settings import Settings


def report_for_record(record: ModelRecord, settings: Settings, job=None, setup=None,
                      serve_tokens: int | None = None, structure: bool = True) -> Report:
    """Estimate one record; raises ConfigError / UnsupportedArchitecture naming the model. `job`: an
    estimator.memory.job_options.Job for memory.peak_bytes (default: the site's job), on `setup` (memory.parallel.Setup; default
    one GPU). `serve_tokens`: a serving length the user named (checked against the context, not capped).
    `structure`: whether the Report carries the structure table (the terminal summary does without it)."""
    return estimate(
        record.config(),
        model_id=record.id,
        assumptions=settings.assumptions,
        cards=settings.cards,
        gpus=settings.gpus,
        checkpoint_params=record.checkpoint_params,
        downloads=record.downloads,
        sha=record.sha,
        job=job,
        setup=setup,
        serve_tokens_asked=serve_tokens,
        structure=structure,
        config_provenance=record.config_provenance,
    )
