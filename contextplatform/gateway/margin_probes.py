"""A cold deployment's budgeted calls go one at a time until it has answered once.

A deployment's reservation margin (``reservation_margins``) is learned from its reports, so the
calls of a deployment this process has not settled an answer of (never, or not within the
margin's half-life) reserve without it: a burst of them would all be admitted on an estimate
that misses what the provider adds unseen, and overspend together. So while a deployment is not
``known``, its first budgeted call is the probe: the others wait until it ends, and then reserve
with what its report taught (or, when it ended without one, the first of them becomes the next
probe). Once known, calls run concurrently as before. Only calls that hold a session budget come
here; the others never wait.

A waiter waits at most ``timeout_s`` (the deployment's timeout): past it, it goes ahead with the
margin as it stands rather than hang, and a probe older than that (its call lost) is replaced by
the next call that comes. The probes are futures of the event loop the call runs on (one per
worker process); kept per process, like the margins.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from contextplatform.gateway.reservation_margins import MARGINS, MarginBook, MarginKey


@dataclass
class Probe:
    """A cold deployment's call that the others wait for; ``end`` it once its report is learned
    (or the call failed without one)."""

    gate: ProbeGate
    key: MarginKey
    done: asyncio.Future[None]
    started: float

    def end(self) -> None:
        self.gate._ended(self)


class ProbeGate:
    def __init__(self, book: MarginBook) -> None:
        self._book = book
        self._probes: dict[MarginKey, Probe] = {}

    async def admit(self, key: MarginKey, timeout_s: float) -> Probe | None:
        """Return once the call may reserve: at once when the deployment is known (None), as the
        probe when no other call of it is one (the caller must ``end`` it), else when the probe
        ended and taught its margin, or when ``timeout_s`` has passed (None)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self._book.known(key):
            now = loop.time()
            probe = self._probes.get(key)
            if (
                probe is None
                or probe.done.done()
                or probe.done.get_loop() is not loop
                or now - probe.started >= timeout_s
            ):
                probe = Probe(self, key, loop.create_future(), now)
                self._probes[key] = probe
                return probe
            wait = min(deadline, probe.started + timeout_s) - now
            if deadline <= now:
                break
            try:
                await asyncio.wait_for(asyncio.shield(probe.done), wait)
            except TimeoutError:
                continue  # the probe is stale now (or this call waited long enough): see above
        return None

    def _ended(self, probe: Probe) -> None:
        if self._probes.get(probe.key) is probe:
            del self._probes[probe.key]
        if not probe.done.done() and not probe.done.get_loop().is_closed():
            probe.done.set_result(None)


PROBES = ProbeGate(MARGINS)


__all__ = ["PROBES", "Probe", "ProbeGate"]
