"""Calibration of the token estimate per deployment, from what its provider reports.

After each answer the gateway compares the provider's input tokens with the platform's estimate
of the same request (``observed_ratio``) and moves the deployment's ratio toward it as an
exponentially weighted average (``next_ratio``); a resolve on a route whose deployment has a ratio
multiplies its estimates by it (``CalibratedEstimator``) and labels them ``provider_calibrated``,
the label vLLM Semantic Router gives counts corrected by the provider's usage.

The ratio starts at 1 (the estimator as it is), so one odd answer moves it by ``ALPHA`` of the
difference only, and it is clamped to ``[MIN_RATIO, MAX_RATIO]``: a provider that reports nonsense
cannot make budgets unbounded or zero. ``services.calibrate_deployments`` applies it to the stored
ratio under the deployment's row lock (the formula written in SQL there, step over step, in one
UPDATE); this module is the formula. Pure: no database, no I/O.
"""

from __future__ import annotations

import math

from contextplatform.core.estimation import TokenEstimator

ALPHA = 0.2
INITIAL_RATIO = 1.0
MIN_RATIO = 0.25
MAX_RATIO = 4.0


def clamp(ratio: float) -> float:
    return min(MAX_RATIO, max(MIN_RATIO, ratio))


def observed_ratio(provider_input: int, estimated_input: float) -> float | None:
    """What one answer says of the estimate: provider tokens per estimated token (None when
    either side counted nothing, which says nothing)."""
    if provider_input <= 0 or estimated_input <= 0:
        return None
    return provider_input / estimated_input


def next_ratio(current: float | None, observed: float) -> float:
    """The ratio after one more observation: ``(1 - ALPHA) * current + ALPHA * observed``,
    ``current`` being ``INITIAL_RATIO`` before the first, clamped."""
    base = INITIAL_RATIO if current is None else current
    return clamp((1 - ALPHA) * base + ALPHA * observed)


class CalibratedEstimator:
    """An estimator's counts times the deployment's ratio, rounded up (a budget never gains from
    the rounding)."""

    def __init__(self, base: TokenEstimator, ratio: float) -> None:
        self.base = base
        self.ratio = clamp(ratio)
        self.name = f"{base.name}_calibrated"

    def count(self, text: str) -> int:
        raw = self.base.count(text)
        return math.ceil(raw * self.ratio) if raw else 0

    def uncalibrated(self, count: int) -> float:
        """The base estimator's count behind a calibrated one (for the next observation)."""
        return count / self.ratio
