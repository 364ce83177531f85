"""The engine behind a transaction pool (``DATABASE_POOLED``): every statement carries its
tenant's ``search_path`` in its own transaction, and the session keeps none of it, so whichever
server connection PgBouncer lends next, no statement runs on another tenant's path. Played here
on a connection of its own, in autocommit as Django runs outside ``atomic``; the same engine
through a real PgBouncer is tests/reliability/test_pooling.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from contextplatform import database
from contextplatform.postgresql.base import DatabaseWrapper
from tests.conftest import TenantFixture

SERVER_DEFAULT = '"$user", public'


@pytest.fixture
def pooled(db: Any) -> Iterator[DatabaseWrapper]:
    """The test database through the engine as ``DATABASE_POOLED`` configures it."""
    settings = {**connection.settings_dict, "TRANSACTION_POOLED": True}
    settings["OPTIONS"] = {k: v for k, v in settings["OPTIONS"].items() if k != "pool"}
    wrapper = DatabaseWrapper(settings, alias=connection.alias)  # a wrapper of its own
    try:
        yield wrapper
    finally:
        wrapper.close()


def session_search_path(wrapper: DatabaseWrapper) -> str:
    """What the session itself searches, asked without the engine's prefix."""
    with wrapper.connection.cursor() as raw:
        raw.execute("SHOW search_path")
        row = raw.fetchone()
    assert row is not None
    return str(row[0])


def test_each_statement_runs_on_its_tenants_path_and_leaves_the_session_as_it_was(
    pooled: DatabaseWrapper, acme: TenantFixture, globex: TenantFixture
) -> None:
    for tenant in (acme, globex, acme):
        pooled.set_schema(tenant.schema)
        with pooled.cursor() as cursor:
            cursor.execute("SELECT current_schemas(false)")
            assert cursor.fetchone() == ([tenant.schema, "public"],)
            # The statement's own result, counted as such (not the SET's).
            cursor.execute(
                "SELECT name FROM tenants_tenant WHERE schema_name = %s", [tenant.schema]
            )
            assert cursor.rowcount == 1
        assert session_search_path(pooled) == SERVER_DEFAULT
    pooled.set_schema_to_public()
    with pooled.cursor() as cursor:
        cursor.execute("SELECT current_schemas(false)")
        assert cursor.fetchone() == (["public"],)


def test_percent_signs_and_many_parameter_sets_pass_through(
    pooled: DatabaseWrapper, acme: TenantFixture
) -> None:
    pooled.set_schema(acme.schema)
    with pooled.cursor() as cursor:
        cursor.execute("SELECT %s::text, 'literal %%'", ["50%"])
        assert cursor.fetchone() == ("50%", "literal %")
        cursor.execute("SELECT 'no parameters: 100%'")
        assert cursor.fetchone() == ("no parameters: 100%",)
        cursor.execute("CREATE TEMPORARY TABLE seen (schema text)")
        # A temporary table lives in the session: fine here, where the session is the client's.
        cursor.executemany("INSERT INTO seen SELECT current_schema() || %s", [["-1"], ["-2"]])
        cursor.execute("SELECT schema FROM seen ORDER BY schema")
        assert cursor.fetchall() == [(f"{acme.schema}-1",), (f"{acme.schema}-2",)]


def test_copy_runs_on_its_tenants_path_in_a_transaction_of_its_own(
    pooled: DatabaseWrapper, acme: TenantFixture
) -> None:
    pooled.set_schema(acme.schema)
    with pooled.cursor() as cursor:
        with cursor.copy("COPY (SELECT current_schema()) TO STDOUT") as copy:
            rows = [bytes(row).decode().strip() for row in copy]
        assert rows == [acme.schema]
    assert session_search_path(pooled) == SERVER_DEFAULT
    assert pooled.connection.info.transaction_status == 0  # idle: committed, nothing left open


def test_pooled_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://app:secret@pgbouncer:6432/contextplatform")
    monkeypatch.setenv("DATABASE_POOLED", "1")
    monkeypatch.delenv("DATABASE_DIRECT_URL", raising=False)
    with pytest.raises(ImproperlyConfigured, match="DATABASE_DIRECT_URL"):
        database.database_config(database.Path("."))
    monkeypatch.setenv(
        "DATABASE_DIRECT_URL", "postgresql://app:secret@postgres:5432/contextplatform"
    )
    config = database.database_config(database.Path("."))
    assert config["TRANSACTION_POOLED"] is True
    assert config["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert config["OPTIONS"]["prepare_threshold"] is None
