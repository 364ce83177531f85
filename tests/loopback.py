"""Real HTTP services for tests, on 127.0.0.1 only, and the tenant allow-list switch.

``running_service()`` starts a threaded ``http.server`` on a free loopback port. Each request is
recorded (method, path, headers, JSON body) and answered by the service's ``responder``, which a
test swaps to play Pinecone, Weaviate, Elasticsearch, a redirecting, slow or broken service.
``tests/fake_models.py`` builds the fake models on it: an OpenAI-compatible chat model and an
embeddings endpoint.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from django_tenants.utils import get_public_schema_name, schema_context

from tenants.models import Tenant

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Seen:
    """One request the service received."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw) if self.raw else None

    @property
    def body(self) -> Any:
        """The JSON body, ``{}`` when there is none."""
        return self.json or {}


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})
    chunked: bool = False  # no Content-Length: the body arrives in 1 KiB chunks
    delay_s: float = 0.0  # wait this long (or until the service stops) before answering


def json_reply(payload: Any, status: int = 200, **fields: Any) -> Reply:
    return Reply(status=status, body=json.dumps(payload).encode(), **fields)


Responder = Callable[[Seen], Reply]


class Service:
    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.server = server
        self.requests: list[Seen] = []
        self.responder: Responder = lambda seen: json_reply({})
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def base(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    @property
    def hits(self) -> int:
        with self.lock:
            return len(self.requests)

    @property
    def paths(self) -> list[str]:
        """The path (with its query) of every request so far, in order."""
        with self.lock:
            return [seen.path for seen in self.requests]

    def stop(self) -> None:
        """Close the port, waking any handler still sleeping on a delayed reply. Stopping twice is
        harmless: a test may stop the service early to play one that is unreachable."""
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def answer(self, payload: Any, status: int = 200) -> None:
        """Always answer ``payload`` as JSON."""
        reply = json_reply(payload, status)
        self.responder = lambda seen: reply

    def answer_in_turn(self, *replies: Reply) -> None:
        """The n-th request gets the n-th reply; later requests get the last one."""

        def respond(seen: Seen) -> Reply:
            return replies[min(self.hits, len(replies)) - 1]

        self.responder = respond


def _handler(service_ref: list[Service]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle_any(self) -> None:
            service = service_ref[0]
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen = Seen(
                self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, raw
            )
            with service.lock:
                service.requests.append(seen)
            reply = service.responder(seen)
            if reply.delay_s:
                service.stopping.wait(reply.delay_s)
            try:
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for start in range(0, len(reply.body), 1024):
                        chunk = reply.body[start : start + 1024]
                        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
            except OSError:  # the client gave up (timeout, size limit): nothing to do
                self.close_connection = True

        do_GET = do_POST = handle_any

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def running_service() -> Iterator[Service]:
    service_ref: list[Service] = []
    server = ThreadingHTTPServer((LOOPBACK, 0), _handler(service_ref))
    server.daemon_threads = True
    service = Service(server)
    service_ref.append(service)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield service
    finally:
        service.stop()
        thread.join(timeout=5)


@contextmanager
def serving_routes(routes: Mapping[str, Reply]) -> Iterator[Service]:
    """A loopback service answering each path from ``routes`` (404 for any other)."""
    with running_service() as running:
        running.responder = lambda seen: routes.get(seen.path, Reply(404, b""))
        yield running


@contextmanager
def outbound_allowlist(schema: str, entries: list[str]) -> Iterator[None]:
    """Set a tenant's outbound allow-list (the tenants table lives in public), restore it after."""
    with schema_context(get_public_schema_name()):
        tenants = Tenant.objects.filter(schema_name=schema)
        previous = tenants.get().outbound_allowlist
        tenants.update(outbound_allowlist=entries)
    try:
        yield
    finally:
        with schema_context(get_public_schema_name()):
            Tenant.objects.filter(schema_name=schema).update(outbound_allowlist=previous)
