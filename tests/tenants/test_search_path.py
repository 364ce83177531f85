"""The schema is set once per connection and tenant (``TENANT_LIMIT_SET_CALLS``), and never
trusted after PostgreSQL has discarded it: a ``SET search_path`` issued inside a transaction or
savepoint that is rolled back is undone by the database, so the next statement must set it again
or it would run in the schema that was current before (another tenant's, or public)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test.utils import CaptureQueriesContext

from contextplatform.demo.defaults import DEMO_RESOLVE_BODY
from tests.conftest import ApiClient, TenantFixture


@pytest.fixture
def own_connection(db: Any) -> Iterator[BaseDatabaseWrapper]:
    """A connection outside the test's transaction, so that it can commit and roll back."""
    wrapper = connections.create_connection("default")
    try:
        yield wrapper
    finally:
        wrapper.close()


def current_search_path(wrapper: BaseDatabaseWrapper) -> str:
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT current_setting('search_path')")
        (value,) = cursor.fetchone()
    return str(value)


def test_the_schema_is_set_once_per_tenant_not_per_statement(
    own_connection: BaseDatabaseWrapper, acme: TenantFixture, globex: TenantFixture
) -> None:
    # From the pool, the connection may already be on acme (a set is skipped then): start on
    # another tenant.
    own_connection.set_tenant(globex.tenant)
    assert current_search_path(own_connection) == "globex, public"
    own_connection.set_tenant(acme.tenant)
    with CaptureQueriesContext(own_connection) as captured:
        for _ in range(3):
            current_search_path(own_connection)
    sets = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("SET search_path")]
    assert len(sets) == 1, captured.captured_queries
    assert current_search_path(own_connection) == "acme, public"


def test_a_set_undone_by_a_rollback_is_issued_again(
    own_connection: BaseDatabaseWrapper, acme: TenantFixture, globex: TenantFixture
) -> None:
    own_connection.set_tenant(globex.tenant)
    assert current_search_path(own_connection) == "globex, public"  # set outside a transaction
    own_connection.set_tenant(acme.tenant)
    own_connection.set_autocommit(False)
    assert current_search_path(own_connection) == "acme, public"  # set inside the transaction
    own_connection.rollback()  # PostgreSQL reverts the SET: the session is back on globex
    own_connection.set_autocommit(True)
    assert current_search_path(own_connection) == "acme, public"


def test_a_set_undone_by_a_savepoint_rollback_is_issued_again(
    own_connection: BaseDatabaseWrapper, acme: TenantFixture, globex: TenantFixture
) -> None:
    own_connection.set_tenant(globex.tenant)
    own_connection.set_autocommit(False)
    assert current_search_path(own_connection) == "globex, public"
    savepoint = own_connection.savepoint()
    own_connection.set_tenant(acme.tenant)
    assert current_search_path(own_connection) == "acme, public"  # set after the savepoint
    own_connection.savepoint_rollback(savepoint)  # reverts it: the session is back on globex
    assert current_search_path(own_connection) == "acme, public"
    own_connection.rollback()
    own_connection.set_autocommit(True)


def test_a_resolve_sets_the_schema_per_switch_not_per_statement(
    acme_api: ApiClient, acme: TenantFixture
) -> None:
    created = acme_api.post(
        "/api/v1/routes",
        {"name": "support", "context": {"sources": [{"name": "profile", "type": "user_profile"}]}},
    )
    assert created.status_code == 201, created.json()
    connection = connections["default"]
    with CaptureQueriesContext(connection) as captured:
        response = acme_api.post("/api/v1/resolve", json.loads(json.dumps(DEMO_RESOLVE_BODY)))
    assert response.status_code == 200, response.json()
    statements = [q["sql"] for q in captured.captured_queries]
    sets = [sql for sql in statements if sql.startswith("SET search_path")]
    assert len(statements) - len(sets) >= 3, statements  # key, route, profile at least
    # Before: a SET ahead of every statement. Now: one per schema switch (the key's lookup in
    # public, the tenant's schema, and again after code that switched schemas and back).
    assert len(sets) * 2 < len(statements) - len(sets), statements


def test_a_checkout_already_in_the_schema_sets_nothing(
    own_connection: BaseDatabaseWrapper, acme: TenantFixture
) -> None:
    """A pooled connection comes back in the schema it was left in, and PostgreSQL reports it:
    the next request on it for the same tenant sends no SET (django-tenants forgot it at close)."""
    own_connection.set_tenant(acme.tenant)
    assert current_search_path(own_connection) == "acme, public"
    own_connection.set_tenant(acme.tenant)  # forgets the schema, as a checkout does
    with CaptureQueriesContext(own_connection) as captured:
        assert current_search_path(own_connection) == "acme, public"
    statements = [q["sql"] for q in captured.captured_queries]
    assert not [sql for sql in statements if sql.startswith("SET search_path")], statements


def test_a_schema_changed_behind_the_backend_is_set_again(
    own_connection: BaseDatabaseWrapper, acme: TenantFixture, globex: TenantFixture
) -> None:
    """The skip trusts what the server reports, never a remembered SET: a search_path changed by
    a statement the backend did not issue is replaced before the tenant's next query."""
    own_connection.set_tenant(acme.tenant)
    assert current_search_path(own_connection) == "acme, public"
    with own_connection.cursor() as cursor:
        cursor.execute('SET search_path = "globex", "public"')
    own_connection.set_tenant(acme.tenant)
    assert current_search_path(own_connection) == "acme, public"


def test_a_rolled_back_set_is_not_taken_for_the_current_schema(
    own_connection: BaseDatabaseWrapper, acme: TenantFixture, globex: TenantFixture
) -> None:
    """A SET of acme inside a transaction that is rolled back leaves the session on globex; the
    next checkout for acme must set it, though acme's SET was the last one sent."""
    own_connection.set_tenant(globex.tenant)
    assert current_search_path(own_connection) == "globex, public"
    own_connection.set_autocommit(False)
    own_connection.set_tenant(acme.tenant)
    assert current_search_path(own_connection) == "acme, public"
    own_connection.connection.rollback()  # under Django's bookkeeping, as a pool's reset does
    own_connection.set_autocommit(True)
    own_connection.set_tenant(acme.tenant)
    assert current_search_path(own_connection) == "acme, public"
