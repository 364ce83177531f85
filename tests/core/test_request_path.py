"""The request path on Django's async stack (``contextplatform.asgi.application``, in process):
the middleware's hooks run on the event loop rather than going to a thread and back, a probe
never leaves the loop, and each request's synchronous code runs on a reused thread of its own."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.contrib.messages.storage.fallback import FallbackStorage
from django.contrib.sessions.backends.db import SessionStore
from django.middleware.security import SecurityMiddleware as DjangoSecurity
from django.test import RequestFactory

from contextplatform import asgi
from contextplatform.core import inline_middleware


async def get(path: str, **headers: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=asgi.application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        return await client.get(path, headers=headers)


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
