"""Rows written with one ``COPY ... FROM STDIN`` instead of an ``INSERT`` built by the ORM.

Django's ``bulk_create`` on PostgreSQL sends each column as an array to ``UNNEST``, which psycopg
quotes value by value in Python (with client-side binding, Django's default), and wraps it in a
transaction: for the replay writer that was most of its time. ``COPY`` takes the rows as they are,
in one statement (its own transaction in autocommit), and psycopg formats them in C.

The instances' values are prepared by their fields as Django would for an insert (defaults,
``auto_now_add``, JSON adaptation), so what lands is what ``bulk_create`` would have written. What
``COPY`` does not do: return database defaults or generated keys (the models written here have
their keys set, or take them from a sequence and are not read back), or skip conflicts (a row that
conflicts fails the whole statement, which the caller handles as it did a failed ``bulk_create``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connections
from django.db.models import Field, Model
from psycopg import sql


def copy_instances(
    model: type[Model], instances: Iterable[Model], *, using: str = "default"
) -> int:
    """Insert ``instances`` of ``model`` with one COPY; the number of rows written."""
    connection = connections[using]
    fields = insert_fields(model)
    statement = sql.SQL("COPY {table} ({columns}) FROM STDIN").format(
        table=sql.Identifier(model._meta.db_table),
        columns=sql.SQL(", ").join(sql.Identifier(field.column) for field in fields),
    )
    written = 0
    # Django's own error classes (IntegrityError, OperationalError...), as bulk_create raises:
    # the copy is psycopg's, under Django's cursor wrapper.
    with (
        connection.wrap_database_errors,
        connection.cursor() as cursor,
        cursor.copy(statement) as copy,
    ):
        for instance in instances:
            copy.write_row(row_values(instance, fields, connection))
            written += 1
    return written


def insert_fields(model: type[Model]) -> Sequence[Field[Any, Any]]:
    """The columns an insert writes: the concrete fields, less an auto-incremented key."""
    meta = model._meta
    return [
        field
        for field in meta.concrete_fields
        if not (field.primary_key and getattr(field, "db_returning", False))
    ]


def row_values(instance: Model, fields: Sequence[Field[Any, Any]], connection: Any) -> list[Any]:
    return [field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields]
