"""Statements that carry their tenant's ``search_path`` with them, for a transaction pool.

Behind PgBouncer in transaction pooling (``DATABASE_POOLED``), a client connection is lent a
server connection for one transaction only, and the next transaction may run on another one that
a different process, serving a different tenant, used last. django-tenants sets ``search_path``
once per connection and trusts it to stay: through such a pool, a ``SET`` and the query after it
may run on two server connections, and a query may run on a server connection whose session still
searches another tenant's schema. In autocommit, Django's mode outside ``atomic``, every statement
is a transaction of its own, so no per-connection or per-request ``SET`` can be right.

So every statement is sent as ``SET LOCAL search_path = ...; <statement>`` in one message (Django's
client-side binding cursor sends a query as one simple-protocol string): PostgreSQL runs a
message's statements as one transaction (inside ``atomic``, as part of the transaction already
open), which PgBouncer serves on one server connection, and ``SET LOCAL`` ends with that
transaction, so no server connection is ever left searching a tenant's schema. ``COPY`` cannot be
joined to another statement: it runs in a transaction of its own (or the one open) after a
``SET LOCAL``. The cost is the ``SET``'s parse in the same round trip; the per-checkout ``SET`` of
the unpooled engine is not sent at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from django_tenants.utils import quote_schema_name
from psycopg import sql
from psycopg.pq import TransactionStatus


def set_local(schemas: tuple[str, ...]) -> str:
    """The statement setting ``schemas`` for the transaction it runs in."""
    return "SET LOCAL search_path = " + ",".join(quote_schema_name(s) for s in schemas)


@cache  # Django asks for the connection's parameters at every checkout: one class, made once
def pooled_cursor(cursor_class: type) -> type:
    """``cursor_class`` prefixing each statement with its wrapper's ``SET LOCAL search_path``.

    The wrapper (``search_path_of``) is given by the engine when it creates the cursor; a cursor
    psycopg makes on its own (type lookups at connect) has none and sends statements as they are:
    what it reads is in the server's default path."""

    class PooledCursor(cursor_class):  # type: ignore[misc, valid-type]
        search_path_of: Any = None  # the engine's DatabaseWrapper, set by create_cursor

        def _local_path(self) -> str | None:
            wrapper = self.search_path_of
            if wrapper is None or not wrapper.schema_name:
                return None
            return set_local(tuple(wrapper._get_cursor_search_paths()))

        def execute(self, query: Any, params: Any = None, *args: Any, **kwargs: Any) -> Any:
            local = self._local_path()
            if local is None:
                return super().execute(query, params, *args, **kwargs)
            result = super().execute(_prefixed(local, query, params), params, *args, **kwargs)
            self.nextset()  # the statement's own result, not the SET's
            return result

        def executemany(self, query: Any, params_seq: Any, *args: Any, **kwargs: Any) -> Any:
            # psycopg pipelines executemany, where one message holds one statement: one by one.
            for params in params_seq:
                self.execute(query, params)

        @contextmanager
        def copy(self, statement: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            local = self._local_path()
            if local is None:
                with super().copy(statement, *args, **kwargs) as copying:
                    yield copying
                return
            own = self.connection.info.transaction_status == TransactionStatus.IDLE
            if own:  # autocommit: a transaction of its own, so the SET LOCAL holds for the COPY
                super().execute("BEGIN")
            try:
                super().execute(local)
                with super().copy(statement, *args, **kwargs) as copying:
                    yield copying
            except BaseException:
                if own and self.connection.info.transaction_status != TransactionStatus.UNKNOWN:
                    super().execute("ROLLBACK")
                raise
            if own:
                super().execute("COMMIT")

    PooledCursor.__name__ = PooledCursor.__qualname__ = f"Pooled{cursor_class.__name__}"
    return PooledCursor


def _prefixed(local: str, query: Any, params: Any) -> Any:
    # With parameters, the query's % are placeholders or escaped: the prefix's must be too.
    prefix = f"{local}; " if params is None else f"{local}; ".replace("%", "%%")
    if isinstance(query, str):
        return prefix + query
    if isinstance(query, bytes):
        return prefix.encode() + query
    return sql.Composed([sql.SQL(prefix), query])
