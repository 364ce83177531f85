"""``take_batch``: a background writer's batch is the first item, then what arrives within the
linger, never more than the limit."""

from __future__ import annotations

import queue
import threading
import time

from contextplatform.core.batches import take_batch


def test_what_is_queued_goes_in_one_batch_up_to_the_limit() -> None:
    items: queue.Queue[int] = queue.Queue()
    for n in range(10):
        items.put(n)
    assert take_batch(items, 4, 0.0) == [0, 1, 2, 3]
    assert take_batch(items, 100, 0.0) == [4, 5, 6, 7, 8, 9]


def test_an_item_arriving_within_the_linger_joins_the_batch() -> None:
    items: queue.Queue[str] = queue.Queue()
    items.put("first")
    threading.Timer(0.05, items.put, args=("late",)).start()
    assert take_batch(items, 10, 2.0) == ["first", "late"]


def test_an_item_arriving_after_the_linger_waits_for_the_next_batch() -> None:
    items: queue.Queue[str] = queue.Queue()
    items.put("first")
    late = threading.Timer(0.5, items.put, args=("late",))
    late.start()
    assert take_batch(items, 10, 0.05) == ["first"]
    late.join()
    assert take_batch(items, 10, 0.0) == ["late"]


def test_the_first_item_is_waited_for() -> None:
    items: queue.Queue[str] = queue.Queue()
    threading.Timer(0.05, items.put, args=("only",)).start()
    started = time.monotonic()
    assert take_batch(items, 10, 0.0) == ["only"]
    assert time.monotonic() - started >= 0.04
