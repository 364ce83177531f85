"""The engine: django-tenants' backend, paying per connection checkout only what is needed.

With a connection pool, Django takes a connection from the pool at a request's first query and
gives it back at its end, and each checkout used to cost two statements before the request's own:

- the pool's health check (an empty statement), guarding against connections that broke while
  they waited (PostgreSQL restarted or failed over). A connection given back less than
  ``FRESH_CHECKOUT_S`` ago was working a moment ago, so it is handed out unchecked; one idle
  longer is checked as before.
- ``SET search_path``: django-tenants forgets the schema it set when the connection goes back, so
  every request set it again. PostgreSQL 18 reports the session's ``search_path`` to the client
  whenever it changes, rollbacks included (a ``SET`` in a transaction that is rolled back reverts
  it, and the server reports the old value), so the connection's reported value is the truth:
  when it already is the schema this request wants, the ``SET`` is skipped. Servers that do not
  report it (before 18) get the ``SET`` at every checkout, as before.

Behind a transaction pool (PgBouncer, ``DATABASE_POOLED``: the settings entry
``TRANSACTION_POOLED``) neither holds: a session's state is not the connection's, so no ``SET``
at checkout is sent or skipped; every statement carries a ``SET LOCAL search_path`` instead
(``contextplatform/postgresql/pooled.py``).
"""

from __future__ import annotations

import threading
import weakref
from time import monotonic
from typing import Any

from cachetools import LRUCache
from django_tenants.postgresql_backend import base as tenants
from django_tenants.utils import get_limit_set_calls
from psycopg import Connection
from psycopg_pool import ConnectionPool

from contextplatform.postgresql.pooled import pooled_cursor

FRESH_CHECKOUT_S = 1.0

# A connection's last return to the pool, by connection (weakly: closed ones go away).
_returned_at: weakref.WeakKeyDictionary[Connection[Any], float] = weakref.WeakKeyDictionary()
_returned_lock = threading.Lock()

# The search_path value PostgreSQL reports after this process set a given list of schemas
# (``demo, public`` for ``SET search_path = "demo","public"``): the server quotes and spaces it.
# One entry per tenant a process has served: bounded, as a worker touching thousands of tenants
# would otherwise keep one for each forever; a dropped entry costs one ``SET`` the next time.
SEARCH_PATHS_KEPT = 4096
_reported_search_path: LRUCache[tuple[str, ...], str] = LRUCache(maxsize=SEARCH_PATHS_KEPT)
_reported_lock = threading.Lock()  # an LRUCache reorders itself on reads


def check_unless_fresh(connection: Connection[Any]) -> None:
    """The pool's check: skipped for a connection given back less than ``FRESH_CHECKOUT_S`` ago."""
    with _returned_lock:
        returned = _returned_at.get(connection)
    if returned is not None and monotonic() - returned < FRESH_CHECKOUT_S:
        return
    ConnectionPool.check_connection(connection)


class DatabaseWrapper(tenants.DatabaseWrapper):  # type: ignore[misc]
    @property
    def transaction_pooled(self) -> bool:
        return bool(self.settings_dict.get("TRANSACTION_POOLED"))

    def get_connection_params(self) -> dict[str, Any]:
        params: dict[str, Any] = super().get_connection_params()
        if self.transaction_pooled:
            params["cursor_factory"] = pooled_cursor(params["cursor_factory"])
        return params

    def create_cursor(self, name: str | None = None) -> Any:
        cursor = super().create_cursor(name)
        if self.transaction_pooled:
            cursor.search_path_of = self
        return cursor

    @property
    def pool(self) -> ConnectionPool[Any] | None:
        pool: ConnectionPool[Any] | None = super().pool
        # Django builds the pool with psycopg's own check when CONN_HEALTH_CHECKS is on; the
        # pool takes its check only as a constructor argument, so it is swapped here, once.
        if pool is not None and pool._check is ConnectionPool.check_connection:
            pool._check = check_unless_fresh
        return pool

    def _close(self) -> Any:
        if self.connection is not None and self.pool is not None:
            with _returned_lock:
                _returned_at[self.connection] = monotonic()
        return super()._close()

    def _handle_search_path(self, cursor: Any = None) -> None:
        if self.transaction_pooled:
            # Each statement sets its own (pooled.py); a session-wide SET would only leave a
            # tenant's path on whichever server connection ran it.
            if not self.schema_name:
                super()._handle_search_path(cursor)  # django-tenants' error for a missing schema
            self.search_path_set_schemas = self._get_cursor_search_paths()
            return
        if self._search_path_already_current():
            return
        super()._handle_search_path(cursor)
        if self.search_path_set_schemas and self.connection is not None:
            reported = self.connection.info.parameter_status("search_path")
            if reported is not None:
                with _reported_lock:
                    _reported_search_path[tuple(self.search_path_set_schemas)] = reported

    def _search_path_already_current(self) -> bool:
        """The session already searches the schemas wanted (PostgreSQL says so): no ``SET``."""
        if (
            self._setting_search_path
            or self.search_path_set_schemas
            or not self.schema_name
            or self.connection is None
            or not get_limit_set_calls()
        ):
            return False
        wanted = self._get_cursor_search_paths()
        with _reported_lock:
            expected = _reported_search_path.get(tuple(wanted))
        if expected is None or self.connection.info.parameter_status("search_path") != expected:
            return False
        self.search_path_set_schemas = wanted
        return True
