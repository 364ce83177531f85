"""Helpers of the reliability suite (tests/reliability/).

``schema_left_as_found``: a live server commits what its calls write, in the test database every
later test of the run shares. The block's writes in one tenant's schema are undone when it ends:
each table's rows are read before (as JSON) and, if the table changed, put back as they were.
Django's foreign keys are deferred to the commit, so tables are restored in any order."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction

from contextplatform.core import config_cache

Snapshot = dict[str, list[str]]


def _tables(schema: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY table_name",
            [schema],
        )
        return [name for (name,) in cursor.fetchall()]


def _rows(schema: str, table: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT to_jsonb(t)::text FROM "{schema}"."{table}" t ORDER BY 1')
        return [row for (row,) in cursor.fetchall()]


def _writable_columns(schema: str, table: str) -> list[str]:
    """The columns an INSERT may set (not the generated ones, a tsvector for one)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s AND is_generated = 'NEVER' ORDER BY ordinal_position",
            [schema, table],
        )
        return [name for (name,) in cursor.fetchall()]


def snapshot(schema: str) -> Snapshot:
    return {table: _rows(schema, table) for table in _tables(schema)}


def restore(schema: str, kept: Snapshot) -> list[str]:
    """Put every table of ``schema`` back as ``kept`` found it; the tables that had changed."""
    changed: list[str] = []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        for table in _tables(schema):
            before = kept.get(table, [])
            if _rows(schema, table) == before:
                continue
            changed.append(table)
            cursor.execute(f'DELETE FROM "{schema}"."{table}"')
            if before:
                columns = ", ".join(f'"{name}"' for name in _writable_columns(schema, table))
                cursor.execute(
                    f'INSERT INTO "{schema}"."{table}" ({columns}) SELECT {columns} FROM '
                    f'jsonb_populate_recordset(NULL::"{schema}"."{table}", %s::jsonb)',
                    ["[" + ",".join(before) + "]"],
                )
    config_cache.clear_all()  # what this process kept of the schema's configuration
    return changed


@contextmanager
def schema_left_as_found(schema: str, django_db_blocker: Any) -> Iterator[None]:
    with django_db_blocker.unblock():
        kept = snapshot(schema)
    try:
        yield
    finally:
        with django_db_blocker.unblock():
            restore(schema, kept)
            assert snapshot(schema) == kept, f"{schema} was not put back as it was"
