"""How much more than its estimate a deployment's calls reserve, learned from what it reports.

The platform's count of a request, the overheads its provider publishes and the deployment's
calibration (an average) still miss what a provider adds without publishing it (a system prompt
of its own), and a provider may answer past the output limit it was sent. Every report is
compared with what its call would have held without a margin (the estimated input and the output
allowance), and the deployment's margin becomes at least the difference plus ``HEADROOM``: its
next reservations hold that many tokens more. Tokens, not a ratio: what providers add unseen is a
fixed prompt or an overrun of the answer, whatever the request's size (the calibration follows
what grows with the size).

The margin is bounded (``MAX_MARGIN_TOKENS``), so that one absurd report cannot shut a
deployment out of every budget, and fades with a half-life of ``HALF_LIFE_S``, so that a margin no
report renews gives the budget back. Kept per process (each worker learns from the calls it
settles), by tenant schema and deployment name. No database, no I/O.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

HEADROOM = 1.1
MAX_MARGIN_TOKENS = 8192
HALF_LIFE_S = 600.0
MAX_DEPLOYMENTS = 4096  # kept per process; the least recently used go first

MarginKey = tuple[str, str]  # (tenant schema, deployment name)


@dataclass(frozen=True)
class Margin:
    tokens: float = 0.0
    at: float = 0.0

    def faded(self, now: float) -> Margin:
        if not self.tokens:
            return self
        return Margin(self.tokens * 0.5 ** (max(now - self.at, 0.0) / HALF_LIFE_S), now)


@dataclass(frozen=True)
class Report:
    """One settled call (or a call and its follow-ups, added up) as the margin reads it."""

    expected: int  # what it would have held without a margin: estimated input + output allowance
    reported: int  # what the provider reported: input + output


class MarginBook:
    def __init__(self) -> None:
        self._margins: OrderedDict[MarginKey, Margin] = OrderedDict()
        self._lock = threading.Lock()

    def tokens(self, key: MarginKey) -> int:
        """What a call of this deployment holds beyond its estimate (0 while nothing was
        learned)."""
        with self._lock:
            margin = self._margins.get(key)
            if margin is None:
                return 0
            self._margins.move_to_end(key)
        return math.ceil(margin.faded(time.monotonic()).tokens)

    def observe(self, key: MarginKey, report: Report) -> Margin:
        """Widen the deployment's margin to what ``report`` needed (it never narrows here: it
        fades with time)."""
        missed = report.reported - report.expected
        needed = min(float(MAX_MARGIN_TOKENS), missed * HEADROOM) if missed > 0 else 0.0
        now = time.monotonic()
        with self._lock:
            margin = self._margins.get(key, Margin()).faded(now)
            widened = Margin(max(margin.tokens, needed), now)
            if widened.tokens:
                self._margins[key] = widened
                self._margins.move_to_end(key)
            while len(self._margins) > MAX_DEPLOYMENTS:
                self._margins.popitem(last=False)
        return widened


MARGINS = MarginBook()


__all__ = ["MARGINS", "Margin", "MarginBook", "MarginKey", "Report"]
