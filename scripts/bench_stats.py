"""Percentile summaries shared by the benchmark sections."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sizes:
    """A section's run: ``rounds`` measured after ``warmup`` unmeasured ones."""

    rounds: int
    warmup: int


@dataclass(frozen=True)
class Summary:
    count: int
    p50: float
    p95: float
    p99: float
    mean: float
    minimum: float
    maximum: float

    def row(self) -> list[str]:
        values = (self.p50, self.p95, self.p99, self.mean, self.minimum, self.maximum)
        return [str(self.count), *(f"{value:.2f}" for value in values)]


SUMMARY_HEADER = ["n", "p50", "p95", "p99", "mean", "min", "max"]


def summarize(samples: list[float]) -> Summary:
    if not samples:
        nan = float("nan")
        return Summary(0, nan, nan, nan, nan, nan, nan)
    data = np.asarray(samples, dtype=float)
    p50, p95, p99 = np.percentile(data, [50, 95, 99])
    return Summary(
        count=len(samples),
        p50=float(p50),
        p95=float(p95),
        p99=float(p99),
        mean=float(data.mean()),
        minimum=float(data.min()),
        maximum=float(data.max()),
    )


def pct(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (numpy's linear interpolation); NaN with no samples."""
    return float(np.percentile(np.asarray(samples, dtype=float), q)) if samples else math.nan


def median(values: Sequence[float]) -> float:
    return float(np.median(values)) if values else math.nan
