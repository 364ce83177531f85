"""Work queued on a request's thread runs there, in order, before what the request sends next; a
failure is logged and does not stop what follows; outside a request nothing is queued."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import async_to_sync

from contextplatform.core.request_thread import (
    on_request_thread,
    queue_on_request_thread,
    serving_on,
)


def test_queued_work_runs_on_the_request_thread_before_its_next_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[tuple[str, int]] = []

    def broken() -> None:
        raise RuntimeError("queued work failed")

    with ThreadPoolExecutor(max_workers=1) as thread, serving_on(thread):
        assert queue_on_request_thread(lambda: ran.append(("first", threading.get_ident())))
        assert queue_on_request_thread(broken)
        assert queue_on_request_thread(lambda: ran.append(("second", threading.get_ident())))
        view_ran_on = thread.submit(threading.get_ident).result(timeout=10)
    assert ran == [("first", view_ran_on), ("second", view_ran_on)]
    assert view_ran_on != threading.get_ident()
    failures = [r for r in caplog.records if r.getMessage() == "request_thread_work_failed"]
    assert len(failures) == 1 and failures[0].levelno == logging.ERROR
    assert "queued work failed" in str(failures[0].exc_info[1] if failures[0].exc_info else "")


def test_outside_a_request_nothing_is_queued_and_the_work_is_awaited() -> None:
    ran: list[str] = []
    assert not queue_on_request_thread(lambda: ran.append("lost"))
    assert ran == []
    async_to_sync(on_request_thread)(lambda: ran.append("ran"))
    assert ran == ["ran"]
