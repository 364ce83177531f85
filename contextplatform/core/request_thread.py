"""The request's own thread, and work queued on it without waiting.

Under ASGI each request's synchronous code runs on one thread of its own (``contextplatform.asgi``),
and its database connection is that thread's. Setting that connection up for the request (the
request-start check of Django's connections, the tenant's schema) used to be a round trip to the
thread and back before the view's own trip there, each costing a wake-up of both threads and about
as much CPU as a cached lookup of the request's key. The thread runs one call at a time, first in,
first out, so work queued on it runs there before anything the request sends to it later: queued
without waiting, it is done by the time the view runs, at no round trip of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from asgiref.sync import sync_to_async

logger = logging.getLogger("contextplatform.request_thread")

_request_thread: ContextVar[Executor | None] = ContextVar("request_thread", default=None)


@contextmanager
def serving_on(executor: Executor) -> Iterator[None]:
    """While a request is served: ``executor`` is its thread (one worker, in order)."""
    token = _request_thread.set(executor)
    try:
        yield
    finally:
        _request_thread.reset(token)


def queue_on_request_thread(work: Callable[[], Any]) -> bool:
    """Queue ``work`` on the current request's thread, ahead of whatever the request sends there
    next; ``False`` (nothing queued) outside a request served on a thread of its own, where the
    caller runs ``work`` itself. A failure is logged: no caller waits to be told."""
    executor = _request_thread.get()
    if executor is None:
        return False
    executor.submit(work).add_done_callback(_log_failure)
    return True


async def on_request_thread(work: Callable[[], Any]) -> None:
    """``work`` queued on the request's thread; outside a request served on a thread of its own,
    run on a thread now (``sync_to_async``, thread-sensitive) and waited for."""
    if not queue_on_request_thread(work):
        await sync_to_async(work)()


def _log_failure(done: Future[Any]) -> None:
    error = done.exception()
    if error is not None:
        logger.error("request_thread_work_failed", exc_info=error)
