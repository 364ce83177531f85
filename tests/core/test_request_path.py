"""The request path on Django's async stack (``contextplatform.asgi.application``, in process):
the middleware's hooks run on the event loop rather than going to a thread and back, a probe
never leaves the loop, each request's synchronous code runs on a reused thread of its own, and a
request with a kept key goes to that thread once, for its view: the tenant's schema, the
request-start check and the response's close are queued there instead of awaited."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.contrib.messages.storage.fallback import FallbackStorage
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection
from django.middleware.security import SecurityMiddleware as DjangoSecurity
from django.test import RequestFactory

from contextplatform import asgi
from contextplatform.core import config_cache, inline_middleware
from tests.conftest import TENANT_KEYS
from tests.thread_trips import count_trips_to_a_thread


async def get(path: str, **headers: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=asgi.application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        return await client.get(path, headers=headers)


async def send(method: str, path: str, key: str, body: Any = None) -> httpx.Response:
    transport = httpx.ASGITransport(app=asgi.application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        headers = {"Authorization": f"Bearer {key}"}
        return await client.request(method, path, json=body, headers=headers)


@pytest.fixture
def one_request_thread(monkeypatch: pytest.MonkeyPatch) -> asgi.RequestThreads:
    """Every request on the same thread: what one request leaves on it, the next one meets."""
    threads = asgi.RequestThreads(idle_limit=1)
    monkeypatch.setattr(asgi.ReusedThreadsASGIHandler, "threads", threads)
    return threads


@pytest.fixture
def trips_to_the_thread(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return count_trips_to_a_thread(monkeypatch)


@pytest.fixture
def committed(django_db_setup: Any, django_db_blocker: Any) -> Iterator[None]:
    """Requests served on other threads see what is written: nothing is left in a transaction."""
    with django_db_blocker.unblock():
        assert config_cache.wait_until_listening()
        yield


def test_a_kept_key_goes_to_the_request_thread_once_for_its_view(
    committed: None, trips_to_the_thread: list[str]
) -> None:
    async def until_kept() -> list[str]:
        for _ in range(20):  # the first one reads the key and keeps it
            trips_to_the_thread.clear()
            response = await get("/api/v1/routes", Authorization=f"Bearer {TENANT_KEYS['acme']}")
            assert response.status_code == 200
            if len(trips_to_the_thread) == 1:
                break
        return list(trips_to_the_thread)

    assert async_to_sync(until_kept)() == ["View.as_view.<locals>.view"]


def test_requests_of_two_tenants_on_one_thread_each_read_their_own_schema(
    committed: None, one_request_thread: asgi.RequestThreads
) -> None:
    name = f"only-in-acme-{uuid.uuid4().hex[:8]}"
    acme, globex = TENANT_KEYS["acme"], TENANT_KEYS["globex"]
    path = f"/api/v1/routes/{name}"

    async def alternate() -> list[tuple[str, int]]:
        created = await send("POST", "/api/v1/routes", acme, {"name": name})
        assert created.status_code == 201, created.text
        try:
            seen = []
            for _ in range(3):
                for tenant, key in (("acme", acme), ("globex", globex)):
                    seen.append((tenant, (await send("GET", path, key)).status_code))
            return seen
        finally:
            await send("DELETE", path, acme)

    # Had a request run in the schema the one before it left on the thread, globex would read
    # acme's route (200) and acme, after globex, would miss it (404).
    assert async_to_sync(alternate)() == [("acme", 200), ("globex", 404)] * 3


def test_the_database_connection_is_given_back_once_the_response_is_closed(
    committed: None, one_request_thread: asgi.RequestThreads
) -> None:
    async def read() -> bool:
        response = await send("GET", "/api/v1/routes", TENANT_KEYS["acme"])
        assert response.status_code == 200
        (executor,) = one_request_thread._idle
        # Queued behind the response's close: the thread's connection is back in the pool.
        return executor.submit(lambda: connection.connection is None).result(timeout=10)

    assert async_to_sync(read)()


def test_the_middleware_hooks_stay_on_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, db: Any
) -> None:
    ran_on: list[str] = []
    original = DjangoSecurity.process_response

    def recording(self: Any, request: Any, response: Any) -> Any:
        ran_on.append(threading.current_thread().name)
        return original(self, request, response)

    monkeypatch.setattr(DjangoSecurity, "process_response", recording)
    loop_thread: list[str] = []

    async def page() -> httpx.Response:
        loop_thread.append(threading.current_thread().name)
        return await get("/api/v1/no-such-endpoint")  # Django's 404, the whole stack

    response = async_to_sync(page)()
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert response.headers["X-Content-Type-Options"] == "nosniff"  # the hook did run
    assert ran_on == loop_thread  # on the loop itself, not on a request thread


def test_the_browsers_middleware_is_passed_by_on_the_gateways_paths(
    monkeypatch: pytest.MonkeyPatch, db: Any
) -> None:
    ran: list[tuple[str, str]] = []
    browsers = (
        inline_middleware.SessionMiddleware,
        inline_middleware.CsrfViewMiddleware,
        inline_middleware.AuthenticationMiddleware,
        inline_middleware.MessageMiddleware,
    )
    for middleware in browsers:
        original = middleware.process_request

        def recording(self: Any, request: Any, original: Any = original) -> Any:
            ran.append((type(self).__name__, request.path))
            return original(self, request)

        monkeypatch.setattr(middleware, "process_request", recording)

    async def both() -> tuple[httpx.Response, httpx.Response]:
        return await get("/v1/models"), await get("/api/v1/no-such-endpoint")

    gateway, api = async_to_sync(both)()
    assert gateway.status_code == 401  # the gateway's own answer, in OpenAI's shape
    assert gateway.json()["error"]["type"]
    assert gateway.headers["X-Content-Type-Options"] == "nosniff"  # the security hook still ran
    assert api.status_code == 404
    assert sorted(ran) == sorted((m.__name__, "/api/v1/no-such-endpoint") for m in browsers)


def test_liveness_is_answered_in_front_of_django(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_django(*args: Any) -> None:
        raise AssertionError("Django was called for the liveness probe")

    monkeypatch.setattr(asgi.ReusedThreadsASGIHandler, "__call__", no_django)
    response = async_to_sync(get)("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_each_requests_sync_code_runs_on_a_reused_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    threads = asgi.RequestThreads(idle_limit=1)
    monkeypatch.setattr(asgi.ReusedThreadsASGIHandler, "threads", threads)
    ran_on: list[int] = []

    async def readiness_twice() -> None:
        for _ in range(2):  # /readyz is a sync view: it runs on the request's thread
            response = await get("/readyz")
            assert response.status_code in (200, 503)
            (executor,) = threads._idle
            ran_on.append(executor.submit(threading.get_ident).result(timeout=10))

    async_to_sync(readiness_twice)()
    assert ran_on[0] == ran_on[1]  # the second request was served by the first one's thread
    extra = threads.take(), threads.take()
    for executor in extra:
        threads.give_back(executor)
    assert len(threads._idle) == 1  # past the idle limit a finished thread is let go


def test_a_changed_session_is_saved_on_a_thread_and_an_untouched_one_is_not() -> None:
    middleware = inline_middleware.SessionMiddleware(lambda request: None)
    request = RequestFactory().get("/admin/")
    request.session = SessionStore()
    assert not middleware.response_needs_thread(request)
    request.session["seen"] = True
    assert middleware.response_needs_thread(request)


def test_used_messages_are_stored_on_a_thread() -> None:
    middleware = inline_middleware.MessageMiddleware(lambda request: None)
    request = RequestFactory().get("/admin/")
    request.session = SessionStore()
    request._messages = FallbackStorage(request)
    assert not middleware.response_needs_thread(request)
    request._messages.add(20, "saved")
    assert middleware.response_needs_thread(request)


def test_the_handlers_request_loop_is_djangos_own_version() -> None:
    """``ReusedThreadsASGIHandler.handle`` is Django 5.2's ``handle`` with two steps queued instead
    of awaited: another Django's may differ, and the copy must be read against it again."""
    import django

    assert django.VERSION[:2] == (5, 2)
