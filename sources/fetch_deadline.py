"""The running source's deadline: what is left of its ``timeout_ms`` while its fetch runs.

``sources.fetch`` starts the clock when a source's fetch starts; whatever the source does inside
(a connection, a backend's own timeout, a database statement, several connectors at once) asks
``shortened`` for its own bound, so a backend's ``timeout_ms`` can only shorten the source's
deadline, never extend it. The deadline lives in a context variable, so the event loop's tasks
and ``sync_to_async`` threads started by the fetch see it too (both copy the context).     [pure]
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# When the running fetch must have ended, on the monotonic clock (None: not inside a fetch).
_DEADLINE: ContextVar[float | None] = ContextVar("source_fetch_deadline", default=None)


@contextmanager
def running(seconds: float) -> Iterator[float]:
    """Inside: the source's deadline is ``seconds`` from now. Yields the deadline."""
    deadline = time.monotonic() + seconds
    token = _DEADLINE.set(deadline)
    try:
        yield deadline
    finally:
        _DEADLINE.reset(token)


def remaining() -> float | None:
    """Seconds left before the running fetch's deadline (0 once it is past); None outside one."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())


def shortened(seconds: float) -> float:
    """``seconds``, or what is left of the source's deadline when that is shorter."""
    left = remaining()
    return seconds if left is None else min(seconds, left)


def binds(seconds: float) -> bool:
    """True when the source's deadline, not ``seconds``, is the shorter bound right now."""
    left = remaining()
    return left is not None and left < seconds
