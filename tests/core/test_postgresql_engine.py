"""The database engine's own work per checkout: the pool's health check skipped only for a
connection that was given back a moment ago, and every statement counted for /metrics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import ProgrammingError, connection
from prometheus_client import REGISTRY

from contextplatform.postgresql import base as engine


@pytest.fixture
def pooled(db: Any) -> Iterator[psycopg.Connection[Any]]:
    """A connection taken from the engine's pool, given back at the end."""
    pool = connection.pool
    assert pool is not None, "the tests run with the pool, as the server does"
    pool.open()
    conn = pool.getconn()
    try:
        yield conn
    finally:
        pool.putconn(conn)


def terminate(conn: psycopg.Connection[Any]) -> None:
    """The server ends the connection's session (a restart or failover does the same)."""
    pid = conn.info.backend_pid
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])


def test_the_pool_checks_through_the_engine(db: Any) -> None:
    assert connection.pool is not None
    assert connection.pool._check is engine.check_unless_fresh


def test_a_connection_given_back_a_moment_ago_is_not_checked(
    pooled: psycopg.Connection[Any],
) -> None:
    terminate(pooled)
    engine._returned_at[pooled] = engine.monotonic()
    engine.check_unless_fresh(pooled)  # no statement: a broken one is not noticed here


def test_a_connection_idle_longer_is_checked(pooled: psycopg.Connection[Any]) -> None:
    terminate(pooled)
    engine._returned_at[pooled] = engine.monotonic() - engine.FRESH_CHECKOUT_S - 0.1
    with pytest.raises(psycopg.OperationalError):
        engine.check_unless_fresh(pooled)


def test_a_connection_never_given_back_is_checked(pooled: psycopg.Connection[Any]) -> None:
    engine._returned_at.pop(pooled, None)
    terminate(pooled)
    with pytest.raises(psycopg.OperationalError):
        engine.check_unless_fresh(pooled)


def test_giving_a_connection_back_stamps_it(db: Any) -> None:
    connection.ensure_connection()
    conn = connection.connection
    connection.close()  # back to the pool
    assert conn in engine._returned_at
    assert engine.monotonic() - engine._returned_at[conn] < engine.FRESH_CHECKOUT_S


def executed(name: str) -> float:
    labels = {"alias": "default", "vendor": "postgresql"}
    return REGISTRY.get_sample_value(name, labels) or 0.0


COUNTED = ("django_db_execute_total", "django_db_execute_many_total")
TIMED = "django_db_query_duration_seconds_count"


def test_statements_are_counted_for_metrics(db: Any) -> None:
    """The series are the process's: a statement another thread of the test process has in
    flight (a background writer left by an earlier test) lands in them too. Such a round is
    measured again; a backend that does not count fails every round."""
    deltas: list[tuple[float, ...]] = []
    for _ in range(5):
        with connection.cursor() as cursor:  # taking it may set the schema: one more statement
            before = [executed(name) for name in (*COUNTED, TIMED)]
            cursor.execute("SELECT 1")
            cursor.executemany("SELECT %s", [(1,), (2,), (3,)])
        after = [executed(name) for name in (*COUNTED, TIMED)]
        deltas.append(tuple(b - a for a, b in zip(before, after, strict=True)))
        if deltas[-1] == (4, 3, 2):  # 1 + 3 executed, 3 of them in one executemany, 2 timed
            return
    raise AssertionError(f"(execute, execute_many, timed) per round: {deltas}")


def test_a_failing_statement_is_counted_as_an_error(db: Any) -> None:
    # Counted below Django's error wrapping: the type is psycopg's own class.
    labels = {"alias": "default", "vendor": "postgresql", "type": "UndefinedTable"}
    before = REGISTRY.get_sample_value("django_db_errors_total", labels) or 0.0
    with pytest.raises(ProgrammingError), connection.cursor() as cursor:
        cursor.execute("SELECT * FROM no_such_table")
    assert REGISTRY.get_sample_value("django_db_errors_total", labels) == before + 1
