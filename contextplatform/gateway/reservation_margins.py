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
report renews gives the budget back. A deployment is ``known`` while an answer of it was settled
within that half-life, whether or not the answer went past its estimate (a margin of 0 is learned
too): until then its budgeted calls wait for a first one's report (``margin_probes``). Kept per
process (each worker learns from the calls it settles), by tenant schema and deployment name. No
database, no I/O.
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
    answered_at: float | None = None  # when an answer of the deployment was last settled

    def faded(self, now: float) -> Margin:
        if not self.tokens:
            return self
        tokens = self.tokens * 0.5 ** (max(now - self.at, 0.0) / HALF_LIFE_S)
        return Margin(tokens, now, self.answered_at)


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

    def known(self, key: MarginKey) -> bool:
        """Whether an answer of the deployment was settled within the last ``HALF_LIFE_S``: its
        margin is what its reports taught, not a guess."""
        with self._lock:
            margin = self._margins.get(key)
        answered_at = margin.answered_at if margin is not None else None
        return answered_at is not None and time.monotonic() - answered_at < HALF_LIFE_S

    def observe(self, key: MarginKey, report: Report | None) -> Margin:
        """Widen the deployment's margin to what ``report`` needed (it never narrows here: it
        fades with time); None: an answer that reported no usage, which teaches nothing but that
        the deployment answers (its charge is the platform's own estimate)."""
        missed = report.reported - report.expected if report is not None else 0
        needed = min(float(MAX_MARGIN_TOKENS), missed * HEADROOM) if missed > 0 else 0.0
        now = time.monotonic()
        with self._lock:
            margin = self._margins.get(key, Margin()).faded(now)
            widened = Margin(max(margin.tokens, needed), now, answered_at=now)
            self._margins[key] = widened
            self._margins.move_to_end(key)
            while len(self._margins) > MAX_DEPLOYMENTS:
                self._margins.popitem(last=False)
        return widened


MARGINS = MarginBook()


__all__ = ["MARGINS", "Margin", "MarginBook", "MarginKey", "Report"]
