"""The gateway's database connections: a call hands its connection back to the pool after each
piece of ORM work, so it holds none while it waits for its upstream (seconds for a model). A call
keeping one would cap concurrent calls at the pool's size, and with the pool taken the replay
writer, whose record the turn's completion waits for, could get none either."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from asgiref.sync import sync_to_async
from django.db import connection
from django_tenants.utils import tenant_context

from tenants.models import Tenant

T = TypeVar("T")


def return_to_pool() -> None:
    """Give the thread's connection back to the pool (a new one is taken, cheaply, by the next
    query); without a pool the connection is kept, as Django keeps it, and inside a transaction
    (a test's) it stays open for the transaction's sake."""
    if getattr(connection, "pool", None) is not None and not connection.in_atomic_block:
        connection.close()


def in_tenant(tenant: Tenant, work: Callable[[], T]) -> Awaitable[T]:
    """Run ORM work on the request's thread (its connection) in the tenant's schema, the
    connection given back to the pool after it."""

    def run() -> T:
        try:
            with tenant_context(tenant):
                return work()
        finally:
            return_to_pool()

    return sync_to_async(run, thread_sensitive=True)()
