"""The upstream call's retries: only a connection that could not be made (no byte of the request
sent) is tried again, a bounded number of times with backoff; an answer, even a 5xx, never is.

In process, against real sockets on loopback: a port that is bound but not listening refuses
connections the way a restarting upstream does, and starts listening when the gateway logs its
first retry, so the test needs no timing."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from contextplatform.core.outbound import policy as outbound
from contextplatform.core.outbound.policy import OutboundError
from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway.forward import UpstreamAnswer, call_upstream
from contextplatform.gateway.protocol import GatewayError
from tests.loopback import LOOPBACK
from tests.upstream import openai_completion, running_upstream

GATEWAY_LOGGER = "contextplatform.gateway"
BODY = {"model": "client-model", "messages": [{"role": "user", "content": "hi"}]}


class Completions(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        data = json.dumps(openai_completion(body, "back again")).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def upstream_at(base_url: str) -> Upstream:
    return Upstream(
        protocol="openai",
        base_url=base_url,
        model="upstream-gpt",
        api_key="sk-retry-test",
        timeout_ms=10_000,
        context_window=128_000,
        max_output_tokens=None,
        headers={},
        may_judge=False,
        name="retried",
    )


def call(upstream: Upstream) -> UpstreamAnswer:
    return asyncio.run(
        call_upstream(upstream, BODY, allowlist=[LOOPBACK], client_headers={"x-other": "1"})
    )


@contextmanager
def retries_logged(on_retry: Callable[[], None] = lambda: None) -> Iterator[list[str]]:
    """The gateway's retry messages, ``on_retry`` run at each (before the backoff's sleep)."""
    seen: list[str] = []

    class Retries(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith("connecting to the upstream deployment"):
                seen.append(message)
                on_retry()

    handler = Retries(level=logging.WARNING)
    logger = logging.getLogger(GATEWAY_LOGGER)
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


@contextmanager
def refusing_port() -> Iterator[tuple[ThreadingHTTPServer, Callable[[], None]]]:
    """A server whose port is bound but not yet listening; calling ``listen`` opens it."""
    server = ThreadingHTTPServer((LOOPBACK, 0), Completions, bind_and_activate=False)
    server.daemon_threads = True
    server.server_bind()
    threads: list[threading.Thread] = []

    def listen() -> None:
        if threads:
            return
        server.server_activate()
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        threads.append(thread)

    try:
        yield server, listen
    finally:
        if threads:
            server.shutdown()
        server.server_close()


def test_a_refused_connection_is_retried_until_the_upstream_listens() -> None:
    with refusing_port() as (server, listen), retries_logged(on_retry=listen) as retries:
        base_url = f"http://{LOOPBACK}:{server.server_address[1]}/v1"
        answer = call(upstream_at(base_url))
    assert answer.status == 200
    assert answer.payload["choices"][0]["message"]["content"] == "back again"
    assert len(retries) == 1  # refused once, answered on the second attempt
    assert "sk-retry-test" not in retries[0]


def test_retries_are_bounded_then_the_call_is_502(settings: Any) -> None:
    settings.GATEWAY_CONNECT_RETRIES = 2
    with refusing_port() as (server, _), retries_logged() as retries:
        base_url = f"http://{LOOPBACK}:{server.server_address[1]}/v1"
        with pytest.raises(GatewayError) as refused:
            call(upstream_at(base_url))
    assert refused.value.status == 502
    assert refused.value.code == "upstream_error"
    # The deployment by name and the kind of failure; the URL and aiohttp's words to the log.
    assert refused.value.message == "deployment 'retried' refused the connection"
    assert len(retries) == 2  # three attempts in all


def test_no_retries_when_they_are_turned_off(settings: Any) -> None:
    settings.GATEWAY_CONNECT_RETRIES = 0
    with refusing_port() as (server, _), retries_logged() as retries:
        base_url = f"http://{LOOPBACK}:{server.server_address[1]}/v1"
        with pytest.raises(GatewayError):
            call(upstream_at(base_url))
    assert retries == []


def test_an_upstream_that_answered_is_never_retried() -> None:
    # A 5xx came from an upstream that received the request and may have acted on it.
    with running_upstream() as upstream, retries_logged() as retries:
        upstream.fail(503)
        with pytest.raises(GatewayError) as failed:
            call(upstream_at(upstream.openai_base_url))
        assert failed.value.status == 502
        assert upstream.hits == 1
    assert retries == []


def test_a_name_that_does_not_resolve_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """It will not resolve on the next attempt either: one attempt, a 502 that says why."""
    resolved: list[str] = []

    def resolve(host: str, port: int) -> list[outbound.IPAddress]:
        resolved.append(host)
        raise OutboundError(f"cannot resolve {host}: no address")

    monkeypatch.setattr(outbound, "_resolve", resolve)
    with retries_logged() as retries, pytest.raises(GatewayError) as failed:
        call(upstream_at("http://gone.test:9/v1"))
    assert failed.value.status == 502
    assert failed.value.message.endswith("could not be reached: its host name does not resolve")
    assert "gone.test" not in failed.value.message
    assert retries == []
    assert resolved == ["gone.test"]


@pytest.mark.parametrize("host", ["0177.0.0.1", "127.000.000.001"])
def test_a_stored_base_url_httpx_cannot_use_is_a_502_not_a_500(host: str) -> None:
    """Deployments written before such URLs were refused at the write still answer clearly."""
    with pytest.raises(GatewayError) as refused:
        call(upstream_at(f"http://{host}:9/v1"))
    assert refused.value.status == 502
    assert refused.value.code == "upstream_error"
    assert "not a valid URL" in refused.value.message
