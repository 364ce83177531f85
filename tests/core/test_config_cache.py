"""Configuration kept per process (``contextplatform.core.config_cache``): API keys and routes are
read once, and a change anywhere, in this process or another one, is seen by the next request.

The test's own connection is inside the test's transaction, where nothing is kept (a read there
may see uncommitted writes); what is kept is read on connections of their own (a thread), whose
writes commit, so each test removes what it wrote."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from contextplatform.core import config_cache
from contextplatform.core.config_cache import ProcessCache
from tenants.models import ApiKey
from tenants.selectors import active_api_key
from tenants.services import issue_api_key, revoke_api_key
from tests.conftest import TENANT_KEYS, TenantFixture, side_connection
from tests.live import live_server

T = TypeVar("T")


def outside_the_test_transaction(work: Callable[[], T]) -> T:
    """``work`` on a thread of its own: its own connection, autocommit, closed afterwards."""

    def run() -> T:
        try:
            return work()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result(timeout=60)


def statements(work: Callable[[], Any]) -> tuple[Any, int]:
    with CaptureQueriesContext(connection) as captured:
        result = work()
    return result, len(captured.captured_queries)


@pytest.fixture
def listening(db: Any) -> None:
    assert config_cache.wait_until_listening()


def heard_since(clears: int) -> None:
    """Wait until this process's listener handled a notification after the count ``clears``."""
    listener = config_cache._listener
    with listener.cleared:
        assert listener.cleared.wait_for(lambda: listener.clears > clears, timeout=30)


@pytest.fixture
def fresh_key(acme: TenantFixture, listening: None) -> Iterator[str]:
    clears = config_cache._listener.clears
    issued = outside_the_test_transaction(lambda: issue_api_key(tenant=acme.tenant, name="cache"))
    heard_since(clears)  # the issue's own notification, before anything is kept
    yield issued.plain_key
    outside_the_test_transaction(lambda: ApiKey.objects.filter(pk=issued.api_key.pk).delete())


def test_a_key_is_read_once_then_kept(fresh_key: str) -> None:
    first, read = outside_the_test_transaction(
        lambda: statements(lambda: active_api_key(fresh_key))
    )
    again, reread = outside_the_test_transaction(
        lambda: statements(lambda: active_api_key(fresh_key))
    )
    assert first is not None and again is not None and again.pk == first.pk
    assert read >= 1
    assert reread == 0


def test_a_revoked_key_is_refused_at_once_in_this_process(fresh_key: str) -> None:
    key = outside_the_test_transaction(lambda: active_api_key(fresh_key))
    assert key is not None
    outside_the_test_transaction(lambda: revoke_api_key(api_key=key))
    assert outside_the_test_transaction(lambda: active_api_key(fresh_key)) is None


def test_a_key_revoked_by_another_process_is_refused_once_it_commits(fresh_key: str) -> None:
    key = outside_the_test_transaction(lambda: active_api_key(fresh_key))
    assert key is not None
    clears = config_cache._listener.clears
    # Another process: a connection of its own, no signal of this process runs; only its NOTIFY
    # (sent in the revoking transaction, delivered at its commit) reaches this one.
    with side_connection() as other:
        other.execute("UPDATE tenants_apikey SET revoked_at = now() WHERE id = %s", [key.pk])
        other.execute("SELECT pg_notify(%s, %s)", [config_cache.CHANNEL, "api_keys"])
        other.commit()
    heard_since(clears)
    assert outside_the_test_transaction(lambda: active_api_key(fresh_key)) is None


def test_nothing_read_inside_a_transaction_is_kept(acme: TenantFixture, listening: None) -> None:
    plain = TENANT_KEYS["acme"]
    assert connection.in_atomic_block  # the test's transaction
    _, first = statements(lambda: active_api_key(plain))
    _, second = statements(lambda: active_api_key(plain))
    assert first >= 1 and second >= 1


def test_a_read_overtaken_by_a_change_is_not_kept(listening: None) -> None:
    cache: ProcessCache[str, int] = ProcessCache("test-overtaken")
    loads: list[int] = []

    def load_while_changing() -> int:
        loads.append(1)
        config_cache.changed("test-overtaken")  # a change lands while the read is under way
        return len(loads)

    def twice() -> tuple[int, int]:
        return cache.get("k", load_while_changing), cache.get("k", lambda: 99)

    assert outside_the_test_transaction(twice) == (1, 99)


def test_nothing_is_kept_while_the_listener_is_not_connected(
    listening: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starting, or the database restarting: a change would go unheard, so reads go to the loader."""
    cache: ProcessCache[str, int] = ProcessCache("test-unconnected")
    monkeypatch.setattr(config_cache._listener, "listening", lambda: False)
    assert outside_the_test_transaction(lambda: (cache.get("k", lambda: 1), len(cache))) == (1, 0)


def test_the_listener_reconnects_and_drops_what_it_kept(listening: None) -> None:
    cache: ProcessCache[str, int] = ProcessCache("test-reconnect")
    outside_the_test_transaction(lambda: cache.get("k", lambda: 1))
    assert len(cache) == 1
    clears = config_cache._listener.clears
    with side_connection() as admin:  # the database ends the listener's session
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            ["contextplatform-config-listener"],
        )
        admin.commit()
    heard_since(clears)  # counted when it is connected again
    assert outside_the_test_transaction(lambda: cache.get("k", lambda: 2)) == 2


def test_a_route_changed_through_one_server_is_seen_by_another(
    django_db_setup: Any, django_db_blocker: Any
) -> None:
    headers = {"Authorization": f"Bearer {TENANT_KEYS['acme']}"}

    def route(secret: str) -> dict[str, Any]:
        return {
            "name": "kept",
            "context": {
                "sources": [{"type": "skill_guardrails", "texts": [secret]}],
                "injection": {"mode": "system_prompt"},
            },
        }

    body = {"route": "kept", "request": {"messages": [{"role": "user", "content": "hi"}]}}
    with (
        live_server() as writer,
        live_server() as reader,
        httpx.Client(timeout=30, headers=headers) as client,
    ):
        client.delete(f"{writer}/api/v1/routes/kept")
        try:
            assert client.post(f"{writer}/api/v1/routes", json=route("FIRST")).status_code == 201
            for _ in range(2):  # the second answer comes from what the reader kept
                answer = client.post(f"{reader}/api/v1/resolve", json=body)
                assert "FIRST" in answer.json()["request"]["messages"][0]["content"]
            replaced = client.put(f"{writer}/api/v1/routes/kept", json=route("SECOND"))
            assert replaced.status_code == 200, replaced.text
            seen = ""
            for _ in range(200):  # the notification's trip between the two processes
                time.sleep(0.05)
                answer = client.post(f"{reader}/api/v1/resolve", json=body)
                seen = answer.json()["request"]["messages"][0]["content"]
                if "SECOND" in seen:
                    break
            assert "SECOND" in seen and "FIRST" not in seen
        finally:
            client.delete(f"{writer}/api/v1/routes/kept")


def test_a_collection_indexed_again_is_read_again(acme: TenantFixture, listening: None) -> None:
    """A new version (an update(), no signal) drops the collections kept for RAG fetches."""
    from sources.ingestion import bump_version, create_collection
    from sources.rag.backends import kept_collections

    name = f"kept-{uuid.uuid4().hex[:8]}"
    clears = config_cache._listener.clears

    def create() -> int:
        connection.set_tenant(acme.tenant)
        return create_collection(name=name).pk

    pk = outside_the_test_transaction(create)
    heard_since(clears)  # the creation's own notification, before anything is kept

    def read_bump_read() -> tuple[int, int, int]:
        connection.set_tenant(acme.tenant)
        (first,) = kept_collections(acme.schema, [name], 5.0)
        _, kept_reads = statements(lambda: kept_collections(acme.schema, [name], 5.0))
        bump_version(pk)
        (again,) = kept_collections(acme.schema, [name], 5.0)
        return first.version, kept_reads, again.version

    def remove() -> None:
        connection.set_tenant(acme.tenant)
        from sources.models import Collection

        Collection.objects.filter(pk=pk).delete()

    try:
        before, kept_reads, after = outside_the_test_transaction(read_bump_read)
    finally:
        outside_the_test_transaction(remove)
    assert kept_reads == 0  # the second read came from what this process kept
    assert after == before + 1


def test_a_tenant_saved_drops_what_every_cache_kept_for_tenant_schemas(
    acme: TenantFixture, listening: None
) -> None:
    """A tenant's schema dropped with it (and one made again under the same name) sends no
    signal of its rows: any tenant saved or deleted drops every cache, here and elsewhere."""
    from sources.selectors import PROFILES

    key = ("acme", f"u_{uuid.uuid4().hex[:8]}")
    outside_the_test_transaction(lambda: PROFILES.get(key, lambda: '{"plan": "gold"}'))
    assert PROFILES.peek(key) == (True, '{"plan": "gold"}')
    acme.tenant.save()
    assert PROFILES.peek(key) == (False, None)
