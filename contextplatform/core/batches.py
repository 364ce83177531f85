"""Batches taken from a queue by a background writer: the first item waited for, then what else
arrives within a short linger. A writer that woke for each item paid its round trips per item
under load; lingering a few milliseconds lets one write carry many."""

from __future__ import annotations

import queue
import time
from typing import TypeVar

T = TypeVar("T")


def take_batch(source: queue.Queue[T], limit: int, linger_s: float) -> list[T]:
    """The next item (blocking until there is one), then up to ``limit`` items in all that are
    queued or arrive within ``linger_s`` of it."""
    batch = [source.get()]
    closes = time.monotonic() + linger_s
    while len(batch) < limit:
        try:
            batch.append(source.get(timeout=max(closes - time.monotonic(), 0.0)))
        except queue.Empty:
            break
    return batch
