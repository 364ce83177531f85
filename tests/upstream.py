"""A loopback model upstream for the gateway's tests: one server on 127.0.0.1 that speaks OpenAI
Chat Completions (``POST /v1/chat/completions``, ``/chat/completions``) and Anthropic Messages
(``POST /v1/messages``), each non-streaming or with ``stream: true`` as Server-Sent Events in the
provider's own event format, with usage.

Every request is recorded (``Seen``: headers and body) so that a test can assert what the
upstream received: the injected context, the deployment's model, the key header. Its answer echoes
the request ("seen N messages; question: ...; model: ..."). A test may make it answer an error status
(``fail``), never answer (``hang``) or stream slowly (``stream_slowly``); ``disconnected`` is set
when a client closes the connection before a stream is over (the cancelled upstream call).

Its own threaded ``http.server`` rather than ``tests/loopback.py``'s service: a stream is written
event by event, flushed, with pauses between events.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.loopback import LOOPBACK, Seen

OPENAI_PATHS = ("/v1/chat/completions", "/chat/completions")
ANTHROPIC_PATH = "/v1/messages"
HANG_LIMIT_S = 60.0  # a hanging answer gives up at the latest then (or when the server stops)


@dataclass(frozen=True)
class Behaviour:
    """How the next requests are answered."""

    status: int = 200
    error: dict[str, Any] | None = None  # the body of an error status
    hang: bool = False
    pieces: int = 0  # 0: one piece per word of the answer; more: the answer padded to that many
    piece_delay_s: float = 0.0


def text_of(content: Any) -> str:
    """A message's text: a string, or the text blocks of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            block.get("text", "")
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return ""


def echo(body: dict[str, Any]) -> str:
    """What the answer says: how many messages came, the latest user text, the model."""
    messages = body.get("messages") or []
    texts = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
    question = next((text for text in reversed(texts) if text.strip()), "")
    return f"seen {len(messages)} messages; question: {question[:80]}; model: {body.get('model')}"


def word_pieces(text: str, count: int) -> list[str]:
    words = text.split(" ")
    pieces = [word if index == 0 else " " + word for index, word in enumerate(words)]
    while len(pieces) < count:
        pieces.append(" .")
    return pieces


def prompt_tokens(body: dict[str, Any]) -> int:
    return max(1, len(json.dumps(body)) // 4)


def openai_completion(body: dict[str, Any], text: str) -> dict[str, Any]:
    prompt, completion = prompt_tokens(body), len(text.split())
    return {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "created": 1,
        "model": body.get("model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def openai_events(body: dict[str, Any], pieces: list[str]) -> Iterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-loopback",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": body.get("model"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    frames = [chunk({"role": "assistant", "content": ""})]
    frames += [chunk({"content": piece}) for piece in pieces]
    frames.append(chunk({}, "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        prompt = prompt_tokens(body)
        frames.append(
            {
                **chunk({}),
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": len(pieces),
                    "total_tokens": prompt + len(pieces),
                },
            }
        )
    for frame in frames:
        yield f"data: {json.dumps(frame)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def anthropic_message(body: dict[str, Any], text: str) -> dict[str, Any]:
    return {
        "id": "msg_loopback",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt_tokens(body), "output_tokens": len(text.split())},
    }


def anthropic_events(body: dict[str, Any], pieces: list[str]) -> Iterator[bytes]:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    start = {**anthropic_message(body, ""), "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": prompt_tokens(body), "output_tokens": 1}
    yield event("message_start", {"message": start})
    yield event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    yield event("ping", {})
    for piece in pieces:
        delta = {"type": "text_delta", "text": piece}
        yield event("content_block_delta", {"index": 0, "delta": delta})
    yield event("content_block_stop", {"index": 0})
    yield event(
        "message_delta",
        {
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": len(pieces)},
        },
    )
    yield event("message_stop", {})


class LoopbackUpstream:
    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.server = server
        self.requests: list[Seen] = []
        self.behaviour = Behaviour()
        self.stopping = threading.Event()
        self.disconnected = threading.Event()
        self.lock = threading.Lock()

    @property
    def base(self) -> str:
        return f"http://{LOOPBACK}:{self.server.server_address[1]}"

    @property
    def openai_base_url(self) -> str:
        """What the openai SDK (and a deployment) takes as the base URL."""
        return self.base + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.base

    @property
    def last(self) -> Seen:
        with self.lock:
            return self.requests[-1]

    @property
    def hits(self) -> int:
        with self.lock:
            return len(self.requests)

    def fail(self, status: int, error: dict[str, Any] | None = None) -> None:
        self.behaviour = Behaviour(status=status, error=error or {"error": {"message": "broken"}})

    def hang(self) -> None:
        self.behaviour = Behaviour(hang=True)

    def stream_slowly(self, pieces: int, piece_delay_s: float) -> None:
        self.behaviour = Behaviour(pieces=pieces, piece_delay_s=piece_delay_s)

    def behave(self) -> None:
        self.behaviour = Behaviour()

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


def _handler(upstream_ref: list[LoopbackUpstream]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            upstream = upstream_ref[0]
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {name.lower(): value for name, value in self.headers.items()}
            seen = Seen(self.command, self.path, headers, raw)
            with upstream.lock:
                upstream.requests.append(seen)
            behaviour = upstream.behaviour
            path = self.path.split("?")[0]
            if path not in (*OPENAI_PATHS, ANTHROPIC_PATH):
                return self.send_json(404, {"error": {"message": f"no route {path}"}})
            if behaviour.hang:
                upstream.stopping.wait(HANG_LIMIT_S)
                self.close_connection = True
                return None
            if behaviour.status >= 400:
                return self.send_json(behaviour.status, behaviour.error or {})
            body = seen.body
            text = echo(body)
            anthropic = path == ANTHROPIC_PATH
            if not body.get("stream"):
                answer = (
                    anthropic_message(body, text) if anthropic else openai_completion(body, text)
                )
                return self.send_json(200, answer)
            pieces = word_pieces(text, behaviour.pieces)
            events = anthropic_events(body, pieces) if anthropic else openai_events(body, pieces)
            return self.send_stream(upstream, events, behaviour.piece_delay_s)

        def send_json(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def send_stream(
            self, upstream: LoopbackUpstream, events: Iterator[bytes], delay_s: float
        ) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in events:
                    self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    self.wfile.flush()
                    if delay_s and upstream.stopping.wait(delay_s):
                        break
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:  # the client closed the connection: its call was cancelled
                upstream.disconnected.set()
                self.close_connection = True

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def running_upstream() -> Iterator[LoopbackUpstream]:
    upstream_ref: list[LoopbackUpstream] = []
    server = ThreadingHTTPServer((LOOPBACK, 0), _handler(upstream_ref))
    server.daemon_threads = True
    upstream = LoopbackUpstream(server)
    upstream_ref.append(upstream)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield upstream
    finally:
        upstream.stop()
        thread.join(timeout=5)
