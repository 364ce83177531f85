"""What this process knows of each deployment for balancing a route's pool (``model.balance``):
the calls it has in flight to it and the moving average of its answers' latency (until the whole
answer, or a stream's first byte). Per tenant schema and deployment name; shared by the threads
and loops of the process, never by other workers: each balances on what it sees itself."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from contextplatform.deployments.balancing import next_latency

Key = tuple[str, str]


class PoolStats:
    def __init__(self) -> None:
        self._in_flight: dict[Key, int] = {}
        self._latency_ms: dict[Key, float] = {}
        self._lock = threading.Lock()

    def started(self, key: Key) -> None:
        with self._lock:
            self._in_flight[key] = self._in_flight.get(key, 0) + 1

    def ended(self, key: Key, ms: float | None) -> None:
        """A call to ``key`` ended; ``ms``: how long its answer took (None when none came)."""
        with self._lock:
            left = self._in_flight.get(key, 0) - 1
            if left > 0:
                self._in_flight[key] = left
            else:
                self._in_flight.pop(key, None)
            if ms is not None:
                self._latency_ms[key] = next_latency(self._latency_ms.get(key), ms)

    def of(self, schema: str, names: Sequence[str]) -> tuple[dict[str, int], dict[str, float]]:
        """The calls in flight and the latency average of each of ``names`` (a name not yet
        measured is absent from the second)."""
        with self._lock:
            in_flight = {name: self._in_flight.get((schema, name), 0) for name in names}
            latency = {
                name: self._latency_ms[(schema, name)]
                for name in names
                if (schema, name) in self._latency_ms
            }
        return in_flight, latency

    def forget(self) -> None:
        with self._lock:
            self._in_flight.clear()
            self._latency_ms.clear()


POOL_STATS = PoolStats()

__all__ = ["POOL_STATS", "PoolStats"]
