"""The server's cap on a request's head (contextplatform/server.py), on a real uvicorn on loopback:
over ``API_MAX_HEADER_BYTES`` of request line and headers, 431 and the connection closed before
the rest is read; under it, served as before."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from contextplatform.server import HeadLimitedHttpToolsProtocol, UvicornWorker
from tests.live import ROOT, live_server

CHUNK = b"a" * 65536


@pytest.fixture(scope="module")
def live_url(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    with live_server() as base:
        yield base


def send_long_header(base: str, size: int) -> tuple[int, bytes]:
    """Send a request whose one header is ``size`` bytes long, a chunk at a time, with no key; give
    back how many of its bytes the server let through before it closed the connection (a server
    that reads on takes them all) and what it answered."""
    address = urlsplit(base)
    sent = 0
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        try:
            sock.sendall(b"GET /api/v1/routes HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: ")
            while sent < size:
                sock.sendall(CHUNK[: size - sent])
                sent += min(len(CHUNK), size - sent)
            sock.sendall(b"\r\nConnection: close\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed the connection: what it answered first is still to be read
        answer = b""
        try:
            while data := sock.recv(65536):
                answer += data
        except ConnectionResetError:
            pass
    return sent, answer


def test_a_head_of_one_mebibyte_is_answered_431_and_the_connection_closed(live_url: str) -> None:
    _, answer = send_long_header(live_url, 1024 * 1024)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"connection: close" in answer.lower()


def test_a_head_of_64_mebibytes_is_not_read_past_the_limit(live_url: str) -> None:
    """The server stops reading at the limit and closes: the client's sending fails long before the
    end (what it got through sits in the kernel's socket buffers, never in the worker)."""
    size = 64 * 1024 * 1024
    sent, answer = send_long_header(live_url, size)
    assert sent < size // 4, sent
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]


def test_a_head_under_the_limit_is_served(live_url: str) -> None:
    """60 KiB of headers reach the application (401: no key), twice on one kept-alive
    connection: the count starts again at each request."""
    with httpx.Client(base_url=live_url, timeout=30) as client:
        for _ in range(2):
            response = client.get("/api/v1/routes", headers={"X-Long": "a" * 60 * 1024})
            assert response.status_code == 401, response.text
            assert response.json()["error"]["code"] == "unauthorized"
        assert client.get("/healthz").status_code == 200


def test_the_limit_is_the_setting(django_db_setup: Any, django_db_blocker: Any) -> None:
    with django_db_blocker.unblock(), live_server({"API_MAX_HEADER_BYTES": "8192"}) as base:
        headers = {"X-Long": "a" * 4096}
        assert httpx.get(f"{base}/healthz", headers=headers, timeout=30).status_code == 200
        headers = {"X-Long": "a" * 10240}
        assert httpx.get(f"{base}/healthz", headers=headers, timeout=30).status_code == 431


def test_every_way_the_server_starts_runs_the_capped_protocol() -> None:
    """``make run``, ``make cluster`` (and so the fault tests), deploy/'s Procfile, compose and
    image name the worker class of contextplatform/server.py; the tests' uvicorn its protocol."""
    from scripts import cluster
    from tests import live

    starts = {
        "Makefile": (ROOT / "Makefile").read_text(),
        "deploy/Procfile": (ROOT / "deploy" / "Procfile").read_text(),
        "deploy/compose.yaml": (ROOT / "deploy" / "compose.yaml").read_text(),
        "deploy/Dockerfile": (ROOT / "deploy" / "Dockerfile").read_text(),
        "make cluster": " ".join(cluster.web_command("127.0.0.1", 8000, 2)),
    }
    for name, text in starts.items():
        assert "--worker-class" in text, name
        assert "uvicorn_worker.UvicornWorker" not in text, name
        assert "contextplatform.server.UvicornWorker" in text, name
    assert live.SERVER_PROTOCOL == ["--http", "contextplatform.server:HeadLimitedHttpToolsProtocol"]
    assert UvicornWorker.CONFIG_KWARGS["http"] is HeadLimitedHttpToolsProtocol
