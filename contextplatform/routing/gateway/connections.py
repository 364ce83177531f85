"""The gateway's database connections: a call hands its connection back to the pool after each
piece of ORM work, so it holds none while it waits for its upstream (seconds for a model). A call
keeping one would cap concurrent calls at the pool's size, and with the pool taken the replay
writer, whose record the turn's completion waits for, could get none either."""

from __future__ import annotations

from django.db import connection


def return_to_pool() -> None:
    """Give the thread's connection back to the pool (a new one is taken, cheaply, by the next
    query); without a pool the connection is kept, as Django keeps it, and inside a transaction
    (a test's) it stays open for the transaction's sake."""
    if getattr(connection, "pool", None) is not None and not connection.in_atomic_block:
        connection.close()
