"""The pure estimator: config.json dict → layer graph → parameters → memory → cost → checks → Report."""

from .estimate import estimate
from .inputs import Assumptions, Card, Gpu
from .memory.profile import ENGINE_DEFAULT_SHARE, card_verdict, engine_setting, engine_share
from .report import Report

__all__ = ["ENGINE_DEFAULT_SHARE", "Assumptions", "Card", "Gpu", "Report", "card_verdict", "engine_setting",
           "engine_share", "estimate"]
