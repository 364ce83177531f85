"""A source's ``timeout_ms`` is a deadline on its whole fetch, whatever its backend does inside:
the connection and its name lookup, a trickling answer, a hybrid's fallback, the judge after
recall, a locked table. A backend's own ``timeout_ms`` can only shorten it, and a source cut by
either reports ``timeout``, not ``failed``.

Each test measures behaviour, not speed: the resolve came back, said ``timeout``, and the
source's own ``ms`` stays below its deadline plus a generous slack (scheduling on a shared
machine), where the old per-step timeouts ran for seconds.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.test import override_settings

from contextplatform.core.outbound import httpx_client as outbound
from tests.conftest import ApiClient, TenantFixture, table_locked
from tests.loopback import LOOPBACK, Service, json_reply, outbound_allowlist, running_service
from tests.sources.knowledge.conftest import rag_route, resolve
from tests.unchecked_routes import save_unchecked

QUESTION = "can I return my headphones for a refund?"
RECALL_ALL = {"recall": {"top_k": 10, "min_similarity": -1}}
DOCUMENTS = [{"id": "refund", "title": "Refund policy", "text": "Returns within 30 days."}]
SLACK_MS = 100


def external_route(endpoint: str, *, source_ms: int, backend_ms: int, **source: Any) -> dict:
    return {
        "name": "r",
        "context": {
            "sources": [
                {
                    "type": "rag",
                    "name": "search",
                    "backend": "external_api",
                    "backend_config": {"endpoint": endpoint, "timeout_ms": backend_ms},
                    "timeout_ms": source_ms,
                    "match": source.pop("match", RECALL_ALL),
                    **source,
                }
            ]
        },
    }


def create(api: ApiClient, route: dict[str, Any]) -> None:
    response = api.post("/api/v1/routes", route)
    assert response.status_code == 201, response.content


def the_source(api: ApiClient) -> dict[str, Any]:
    return resolve(api, "r", QUESTION)["sources"][0]


def assert_cut_at(source: dict[str, Any], deadline_ms: int) -> None:
    assert source["status"] == "timeout", source
    assert source["ms"] < deadline_ms + SLACK_MS, source


@contextmanager
def trickling_service(interval_s: float = 0.05) -> Iterator[str]:
    """An HTTP service that sends its headers at once, then one byte of its JSON body every
    ``interval_s`` (three seconds in all): every read is in time, the whole answer is not."""
    listener = socket.create_server((LOOPBACK, 0))
    stopping = threading.Event()
    body = b"[" + b" " * 58 + b"]"

    def serve(connection: socket.socket) -> None:
        with connection:
            received = b""
            while b"\r\n\r\n" not in received:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                received += chunk
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            try:
                connection.sendall(head.encode())
                for index in range(len(body)):
                    if stopping.wait(interval_s):
                        return
                    connection.sendall(body[index : index + 1])
            except OSError:  # the client gave up, as it should
                return

    def accept() -> None:
        while not stopping.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{listener.getsockname()[1]}/q"
    finally:
        stopping.set()
        listener.close()
        thread.join(timeout=5)


@pytest.fixture
def slow(service: Service) -> Service:
    service.responder = lambda seen: json_reply(DOCUMENTS, delay_s=5)
    return service


# --- the backend's own timeout -------------------------------------------------------------------


def test_a_backend_timeout_reports_timeout_within_it(
    allow_acme: None, acme_api: ApiClient, slow: Service
) -> None:
    create(acme_api, external_route(slow.url("/q"), source_ms=10_000, backend_ms=300))
    source = the_source(acme_api)
    assert_cut_at(source, 300)
    assert "external API timed out after 300 ms" in source["error"]


def test_a_trickling_answer_is_cut_at_the_backend_timeout_not_read_by_read(
    allow_acme: None, acme_api: ApiClient
) -> None:
    with trickling_service() as url:
        create(acme_api, external_route(url, source_ms=10_000, backend_ms=300))
        source = the_source(acme_api)
    assert_cut_at(source, 300)
    assert "timed out after 300 ms" in source["error"]


def test_the_source_deadline_bounds_a_longer_backend_timeout(
    allow_acme: None, acme_api: ApiClient, slow: Service
) -> None:
    create(acme_api, external_route(slow.url("/q"), source_ms=300, backend_ms=20_000))
    source = the_source(acme_api)
    assert_cut_at(source, 300)
    assert "timed out" in source["error"]


def test_a_backend_timeout_with_on_failure_block_refuses_as_timed_out(
    allow_acme: None, acme_api: ApiClient, slow: Service
) -> None:
    route = external_route(slow.url("/q"), source_ms=10_000, backend_ms=300, on_failure="block")
    create(acme_api, route)
    response = acme_api.post(
        "/api/v1/resolve",
        {"route": "r", "request": {"messages": [{"role": "user", "content": QUESTION}]}},
    )
    assert response.status_code == 503, response.content
    assert "'search' timed out" in response.json()["error"]["message"]


# --- inside the fetch: a hybrid's fallback, the judge, the name lookup, the database ------------


def test_a_hybrid_fallback_gets_only_what_is_left_of_the_deadline(
    allow_acme: None, acme_api: ApiClient, slow: Service
) -> None:
    with running_service() as fallback:
        fallback.responder = lambda seen: json_reply(DOCUMENTS, delay_s=5)
        config = {
            "primary": {
                "backend": "external_api",
                "backend_config": {"endpoint": slow.url("/q"), "timeout_ms": 250},
            },
            "fallback": {
                "backend": "external_api",
                "backend_config": {"endpoint": fallback.url("/q"), "timeout_ms": 20_000},
            },
            "strategy": "sequential",
        }
        route = external_route("http://unused/", source_ms=500, backend_ms=1)
        route["context"]["sources"][0].update(backend="hybrid", backend_config=config)
        create(acme_api, route)
        source = the_source(acme_api)
        assert fallback.hits == 1  # the fallback was asked, after the primary's 250 ms
    assert_cut_at(source, 500)


def test_a_slow_judge_after_recall_is_cut_at_the_deadline(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer(DOCUMENTS)
    with running_service() as model:
        model.responder = lambda seen: json_reply({}, delay_s=5)
        deployments = {"judge-llm": {"url": model.base, "model": "m", "timeout_ms": 20_000}}
        with override_settings(LLM_DEPLOYMENTS=deployments):
            match = {**RECALL_ALL, "judge": {"deployment": "judge-llm"}}
            route = external_route(service.url("/q"), source_ms=400, backend_ms=5000, match=match)
            create(acme_api, route)
            source = the_source(acme_api)
            assert model.hits == 1  # recall answered, then the judge was asked
    assert_cut_at(source, 400)


def test_a_slow_name_lookup_is_cut_at_the_deadline(
    acme: TenantFixture, acme_api: ApiClient, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resolver that takes seconds for one name (played by wrapping ``socket.getaddrinfo`` for
    that name only: a slow DNS server cannot be had on loopback). The lookup's thread is left to
    finish; the source is not held by it."""
    service.answer(DOCUMENTS)
    real = socket.getaddrinfo
    released = threading.Event()

    def slow_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "slow-dns.test":
            released.wait(5)
            host = LOOPBACK
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow_lookup)
    endpoint = f"http://slow-dns.test:{service.port}/q"
    create(acme_api, external_route(endpoint, source_ms=300, backend_ms=20_000))
    try:
        with outbound_allowlist(acme.schema, ["127.0.0.1"]):
            source = the_source(acme_api)
    finally:
        released.set()
    assert_cut_at(source, 300)
    assert service.hits == 0


def test_a_locked_table_stops_the_source_at_its_deadline_as_a_timeout(
    acme_api: ApiClient, acme: TenantFixture
) -> None:
    """The statement's timeout is what is left of the source's deadline when it starts, and a
    statement cancelled by it is the source timing out."""
    save_unchecked(acme.schema, rag_route("r", "kb", timeout_ms=300))
    with table_locked(acme.schema, "sources_collection", give_up_s=10) as gave_up:
        source = the_source(acme_api)
        assert not gave_up.is_set()
    assert_cut_at(source, 300)


# --- what made the old overrun ---------------------------------------------------------------------


def test_guarded_clients_share_one_tls_context() -> None:
    """Loading the CA bundle for every client blocked the event loop for tens of milliseconds
    inside each source's deadline (no timer fires meanwhile): every guarded client now uses the
    process's one context."""
    first = outbound.guarded_async_client(allowlist=[], timeout_s=1)
    second = outbound.guarded_async_client(allowlist=["127.0.0.1"], timeout_s=2)
    contexts = {id(client._transport._pool._ssl_context) for client in (first, second)}  # type: ignore[attr-defined]
    assert contexts == {id(outbound.shared_ssl_context())}
