"""The pure estimator: config.json dict → layer graph → parameters → memory → cost → checks → Report."""

from .estimate import estimate
from .inputs import Assumptions, Card, Gpu
from .memory.profile import card_verdict
from .report import Report

__all__ = ["Assumptions", "Card", "Gpu", "Report", "card_verdict", "estimate"]
