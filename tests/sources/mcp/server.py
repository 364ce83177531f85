"""A real MCP server for tests, built with the official SDK (``MCPServer``) and served over
Streamable HTTP by uvicorn on a free loopback port, in a thread of the test process.

It offers what the MCP sources read: static resources (text, JSON, a blob, a large one), resource
templates filled by user, session and query, a search tool answering structured documents, one
answering an object holding them, one answering text blocks, a tool that fails (``isError``) and
a slow one. Every HTTP request's headers and every resource read are recorded, so a test can see
what reached the server (header values sent) and what did not (another user's resource).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pydantic import BaseModel

LOOPBACK = "127.0.0.1"

CUSTOMERS = {
    "u_alice": {"name": "Alice", "tier": "gold", "open_tickets": 2},
    "u_bob": {"name": "Bob", "tier": "free", "open_tickets": 0},
    "u a/b": {"name": "Slash", "tier": "odd"},  # a user id that needs URL-encoding
}
DOCUMENTS = [
    {"id": "refund", "title": "Refund policy", "text": "Refunds within 30 days.", "score": 0.92},
    {"id": "warranty", "title": "Warranty", "text": "Two-year warranty.", "score": 0.61},
    {"id": "shipping", "title": "Shipping", "text": "Shipping takes three days.", "score": 0.12},
]
LARGE_CHARS = 50_000
HUGE_BYTES = 5 * 1024 * 1024


class Document(BaseModel):
    id: str
    title: str
    text: str
    score: float


class SearchAnswer(BaseModel):
    total: int
    hits: list[Document]


@dataclass
class Recorder:
    headers: list[dict[str, str]] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)  # JSON-RPC methods POSTed, in order
    reads: list[str] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def clear(self) -> None:
        with self.lock:
            self.headers.clear()
            self.methods.clear()
            self.reads.clear()
            self.calls.clear()


def build_server(recorder: Recorder, slow_seconds: float) -> MCPServer:
    server = MCPServer("test-crm", version="1.0", log_level="WARNING")

    def read(uri: str) -> None:
        with recorder.lock:
            recorder.reads.append(uri)

    @server.resource("crm://status", description="The CRM's status")
    def status() -> str:
        read("crm://status")
        return "All systems green."

    @server.resource("crm://customers/{user}", mime_type="application/json")
    def customer(user: str) -> dict[str, Any]:
        read(f"crm://customers/{user}")
        if user not in CUSTOMERS:
            raise ResourceError(f"no customer {user}")
        return {"user": user, **CUSTOMERS[user]}

    @server.resource("crm://sessions/{session}/notes")
    def session_notes(session: str) -> str:
        read(f"crm://sessions/{session}/notes")
        return f"Notes of session {session}: asked about refunds."

    @server.resource("crm://search/{query}")
    def search_resource(query: str) -> str:
        read(f"crm://search/{query}")
        return f"Results for {query}"

    @server.resource("crm://logo", mime_type="image/png")
    def logo() -> bytes:
        read("crm://logo")
        return b"\x89PNG\r\n\x1a\n"

    @server.resource("crm://large")
    def large() -> str:
        read("crm://large")
        return "L" * LARGE_CHARS

    @server.resource("crm://slow")
    async def slow_resource() -> str:
        read("crm://slow")
        await asyncio.sleep(slow_seconds)
        return "finally"

    @server.resource("crm://huge")
    def huge() -> str:
        read("crm://huge")
        return "H" * HUGE_BYTES

    def called(name: str, **arguments: Any) -> None:
        with recorder.lock:
            recorder.calls.append((name, arguments))

    @server.tool(description="Search the knowledge base")
    def search(query: str, top_k: int = 5) -> list[Document]:
        called("search", query=query, top_k=top_k)
        return [Document(**document) for document in DOCUMENTS][:top_k]

    @server.tool(description="Search, answering an object that holds the hits")
    def search_wrapped(query: str) -> SearchAnswer:
        called("search_wrapped", query=query)
        hits = [Document(**document) for document in DOCUMENTS[:2]]
        return SearchAnswer(total=len(hits), hits=hits)

    @server.tool(description="Search, answering text blocks")
    def search_text(query: str) -> list[types.TextContent]:
        called("search_text", query=query)
        return [
            types.TextContent(type="text", text=f"First passage about {query}."),
            types.TextContent(type="text", text="Second passage."),
        ]

    @server.tool(description="Always fails")
    def broken(query: str) -> str:
        called("broken", query=query)
        raise ToolError("the index is rebuilding")

    @server.tool(description="Answers after a long while")
    async def slow(query: str) -> list[Document]:
        called("slow", query=query)
        await asyncio.sleep(slow_seconds)
        return [Document(**DOCUMENTS[0])]

    return server


class RecordingApp:
    """The server's ASGI app, recording each HTTP request's headers first."""

    def __init__(self, app: Any, recorder: Recorder) -> None:
        self.app = app
        self.recorder = recorder

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        with self.recorder.lock:
            self.recorder.headers.append(headers)
        body = bytearray()

        async def receiving() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body") and body:
                    self.record_method(bytes(body))
            return message

        await self.app(scope, receiving, send)

    def record_method(self, body: bytes) -> None:
        try:
            method = json.loads(body).get("method")
        except (ValueError, AttributeError):
            return
        if method:
            with self.recorder.lock:
                self.recorder.methods.append(method)


@dataclass
class RunningMcpServer:
    url: str
    port: int
    recorder: Recorder

    @property
    def base(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"


@contextmanager
def running_mcp_server(*, slow_seconds: float = 30.0) -> Iterator[RunningMcpServer]:
    recorder = Recorder()
    app = RecordingApp(build_server(recorder, slow_seconds).streamable_http_app(), recorder)
    sock = socket.socket()
    sock.bind((LOOPBACK, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        time.sleep(0.01)
    else:
        raise RuntimeError("the MCP test server did not start")
    try:
        yield RunningMcpServer(url=f"http://{LOOPBACK}:{port}/mcp", port=port, recorder=recorder)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
