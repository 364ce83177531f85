"""The health of one source of one route from its counts, and the alerts they raise.

Pure: counts in, rates and an alert out. ``stopped_returning_hits`` reads the run of consecutive
empty answers since the source's last hit, so it fires after a few dozen empty requests instead of
waiting for an hour of them to move the window's rates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Upper bounds (ms) of the latency buckets each minute's counts keep; the last is open.
LATENCY_BOUNDS_MS: tuple[float, ...] = (
    1.0,
    2.0,
    5.0,
    10.0,
    20.0,
    50.0,
    100.0,
    200.0,
    500.0,
    1000.0,
    2000.0,
    5000.0,
    10000.0,
    float("inf"),
)
OUTCOMES = ("ok", "empty", "failed", "timeout")


@dataclass(frozen=True)
class Thresholds:
    """When an alert fires (``SOURCE_HEALTH_RULES`` overrides any of them)."""

    # stopped_returning_hits: this many empty answers in a row since the source's last hit...
    empty_streak: int = 30
    # ...from a source whose hit rate before that run (window and baseline) was at least this:
    # a source with a hit rate of 0.2 answers 30 empties in a row by chance once in ~800 runs.
    min_hit_rate: float = 0.2
    # failing: failed + timed out at least this share of the window's requests, and this many.
    failing_rate: float = 0.5
    failing_min_requests: int = 5
    # slow: the window's p95 over this many times the baseline's, and over slow_min_ms...
    slow_factor: float = 2.0
    slow_min_ms: float = 100.0
    # ...with at least this many requests on each side.
    slow_min_requests: int = 20

    @classmethod
    def from_settings(cls, overrides: dict[str, Any] | None) -> Thresholds:
        known = {name: value for name, value in (overrides or {}).items() if name in FIELD_NAMES}
        return cls(**known)


FIELD_NAMES = frozenset(Thresholds.__dataclass_fields__)


@dataclass
class Counts:
    """A source's outcomes summed over some minutes (skipped fetches are not requests)."""

    ok: int = 0
    empty: int = 0
    failed: int = 0
    timeout: int = 0
    kept: int = 0
    latency: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BOUNDS_MS))
    max_ms: float = 0.0

    @property
    def requests(self) -> int:
        return self.ok + self.empty + self.failed + self.timeout

    def add(self, other: Counts) -> Counts:
        return Counts(
            ok=self.ok + other.ok,
            empty=self.empty + other.empty,
            failed=self.failed + other.failed,
            timeout=self.timeout + other.timeout,
            kept=self.kept + other.kept,
            latency=[a + b for a, b in zip(self.latency, other.latency, strict=True)],
            max_ms=max(self.max_ms, other.max_ms),
        )

    def p95_ms(self) -> float | None:
        """The 95th percentile, interpolated inside its latency bucket (the open last bucket
        answers the largest time seen)."""
        total = sum(self.latency)
        if not total:
            return None
        rank = 0.95 * total
        seen = 0
        lower = 0.0
        for bound, count in zip(LATENCY_BOUNDS_MS, self.latency, strict=True):
            if count and seen + count >= rank:
                if bound == float("inf"):
                    return round(self.max_ms, 2)
                upper = min(bound, self.max_ms) if self.max_ms > lower else bound
                return round(lower + (upper - lower) * (rank - seen) / count, 2)
            seen += count
            lower = bound
        return round(self.max_ms, 2)

    def summary(self) -> dict[str, Any]:
        requests = self.requests

        def rate(value: int) -> float | None:
            return round(value / requests, 4) if requests else None

        return {
            "requests": requests,
            "ok_rate": rate(self.ok),
            "empty_rate": rate(self.empty),
            "failed_rate": rate(self.failed),
            "timeout_rate": rate(self.timeout),
            "kept_per_request": round(self.kept / requests, 4) if requests else None,
            "p95_ms": self.p95_ms(),
        }


def latency_bucket(ms: float) -> int:
    for index, bound in enumerate(LATENCY_BOUNDS_MS):
        if ms <= bound:
            return index
    return len(LATENCY_BOUNDS_MS) - 1


def alert(window: Counts, baseline: Counts, empty_streak: int, rules: Thresholds) -> str | None:
    """The one alert the source raises, the most urgent first: ``failing``, then
    ``stopped_returning_hits``, then ``slow``; ``None`` when healthy."""
    failures = window.failed + window.timeout
    if failures >= rules.failing_min_requests and failures >= rules.failing_rate * window.requests:
        return "failing"
    if empty_streak >= rules.empty_streak:
        both = window.add(baseline)
        before_run = both.requests - empty_streak
        if before_run > 0 and both.ok >= rules.min_hit_rate * before_run:
            return "stopped_returning_hits"
    now_p95, usual_p95 = window.p95_ms(), baseline.p95_ms()
    if (
        now_p95 is not None
        and usual_p95 is not None
        and window.requests >= rules.slow_min_requests
        and baseline.requests >= rules.slow_min_requests
        and now_p95 > rules.slow_min_ms
        and now_p95 > rules.slow_factor * usual_p95
    ):
        return "slow"
    return None
