"""A source's database work stops at its timeout.

Sources run their queries on the request's own thread (its connection carries the tenant's
schema). ``asyncio.wait_for`` alone cannot interrupt a query that waits on a lock, so the query
gets the same deadline as the source through PostgreSQL's ``statement_timeout``: what is left of
it when the statement starts (``sources.fetch_deadline``), so a query begun late in the fetch
cannot outlive the source.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from django.db import connection, transaction

from sources.fetch_deadline import shortened

T = TypeVar("T")


@contextmanager
def statement_deadline(timeout_seconds: float) -> Iterator[None]:
    timeout_seconds = shortened(timeout_seconds)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('statement_timeout', %s, true)",
            [str(max(1, int(timeout_seconds * 1000)))],
        )
        yield


def within_deadline(timeout_seconds: float, work: Callable[[], T]) -> T:
    with statement_deadline(timeout_seconds):
        return work()
