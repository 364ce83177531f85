"""A loopback model upstream for the gateway's tests: one server on 127.0.0.1 that speaks OpenAI
Chat Completions (``POST /v1/chat/completions``, ``/chat/completions``) and Anthropic Messages
(``POST /v1/messages``), and minimally OpenAI Responses (``POST /v1/responses``: the body read as
Chat Completions and the answer written back, by the gateway's own translation), each non-streaming or with ``stream: true`` as Server-Sent Events in the
provider's own event format, with usage.

Every request is recorded (``Seen``: headers and body) so that a test can assert what the
upstream received: the injected context, the deployment's model, the key header. Its answer echoes
the request ("seen N messages; question: ...; model: ...") unless the test chooses its text
(``answer_with``), and its usage bills as a provider would (``bill``: hidden input added to every
prompt, a completion count that honours or ignores the request's output limit). A test may make
it answer an error status (``fail``, with a ``Retry-After`` when asked), never answer (``hang``),
stream slowly (``stream_slowly``) or close a stream's connection after some events (``cut_stream``); ``disconnected`` is set when a client closes the connection before a stream
is over (the cancelled upstream call).

Its own threaded ``http.server`` rather than ``tests/loopback.py``'s service: a stream is written
event by event, flushed, with pauses between events.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from contextplatform.protocols import openai_responses
from tests.loopback import LOOPBACK, Seen

OPENAI_PATHS = ("/v1/chat/completions", "/chat/completions")
RESPONSES_PATHS = ("/v1/responses", "/responses")
ANTHROPIC_PATH = "/v1/messages"
HANG_LIMIT_S = 60.0  # a hanging answer gives up at the latest then (or when the server stops)


CUT_GRACE_S = 0.3  # between a cut stream's last event and the cut


@dataclass(frozen=True)
class Behaviour:
    """How the next requests are answered."""

    status: int = 200
    error: dict[str, Any] | None = None  # the body of an error status
    retry_after: str | None = None  # the Retry-After header of an error status
    cut_after_events: int | None = None  # a stream's connection closed after this many events
    hang: bool = False
    delay_s: float = 0.0  # seconds each answer waits before it is sent (a slow deployment)
    pieces: int = 0  # 0: one piece per word of the answer; more: the answer padded to that many
    piece_delay_s: float = 0.0
    text: Callable[[dict[str, Any]], str] | None = None  # the answer's text; None: the echo
    # Call the offered tool of this name (or, ending in "*", of this prefix) before answering:
    # once per conversation, or on every answer with ``tool_always``.
    tool: str | None = None
    tool_arguments: dict[str, Any] | None = None
    tool_always: bool = False
    also_client_tool: str | None = None  # a client tool called in the same turn
    # What the usage reports, as a provider's bill: input it adds to every prompt without showing
    # it (a hidden system prompt), and the completion it generated (None: the answer's words),
    # cut to the request's output limit when it honours that limit.
    hidden_input: int = 0
    completion_tokens: int | None = None
    honours_max_tokens: bool = True
    # Of the prompt, how many tokens a non-streaming OpenAI answer reports read from the
    # provider's prompt cache (``prompt_tokens_details.cached_tokens``).
    cached_input: int = 0


PREAMBLE = "Looking it up."


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
    """What the answer says: how many messages came, the latest user text, the model, and the
    result of a tool when the conversation carries one."""
    messages = body.get("messages") or []
    texts = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
    question = next((text for text in reversed(texts) if text.strip()), "")
    answer = f"seen {len(messages)} messages; question: {question[:80]}; model: {body.get('model')}"
    result = last_tool_result(body)
    return answer if result is None else f"{answer}; tool: {len(result)} chars: {result[:300]}"


def last_tool_result(body: dict[str, Any]) -> str | None:
    """The text of the conversation's latest tool result (OpenAI ``role: tool`` message,
    Anthropic ``tool_result`` block), or None."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "tool":
            return text_of(message.get("content"))
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    inner = block.get("content")
                    return inner if isinstance(inner, str) else text_of(inner)
    return None


def called_tools(body: dict[str, Any]) -> set[str]:
    """The names of the tools the conversation's assistant turns called."""
    names: set[str] = set()
    for message in body.get("messages") or []:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            names.add(str((call.get("function") or {}).get("name")))
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                names.add(str(block.get("name")))
    return names


def tool_schema(tool: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    function = tool.get("function")
    if isinstance(function, dict):
        return str(function.get("name")), function.get("parameters") or {}
    return str(tool.get("name")), tool.get("input_schema") or {}


def chosen_tool(body: dict[str, Any], behaviour: Behaviour) -> tuple[str, dict[str, Any]] | None:
    """The tool this answer calls, with its arguments, or None."""
    wanted = behaviour.tool
    if wanted is None:
        return None
    for tool in body.get("tools") or []:
        name, schema = tool_schema(tool)
        matches = name.startswith(wanted[:-1]) if wanted.endswith("*") else name == wanted
        if not matches or (name in called_tools(body) and not behaviour.tool_always):
            continue
        if behaviour.tool_arguments is not None:
            return name, behaviour.tool_arguments
        properties = schema.get("properties") or {}
        if "key" in properties:
            return name, {"key": (properties["key"].get("enum") or ["no-key"])[0]}
        messages = body.get("messages") or []
        texts = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
        return name, {"query": next((t for t in reversed(texts) if t.strip()), "")}
    return None


def tool_calls_of(body: dict[str, Any], behaviour: Behaviour) -> list[tuple[str, str, str]]:
    """(id, name, arguments as JSON) of each tool the answer calls."""
    chosen = chosen_tool(body, behaviour)
    if chosen is None:
        return []
    calls = [("call_reserved_1", chosen[0], json.dumps(chosen[1]))]
    if behaviour.also_client_tool:
        calls.append(("call_client_2", behaviour.also_client_tool, json.dumps({"city": "Oslo"})))
    return calls


def word_pieces(text: str, count: int) -> list[str]:
    words = text.split(" ")
    pieces = [word if index == 0 else " " + word for index, word in enumerate(words)]
    while len(pieces) < count:
        pieces.append(" .")
    return pieces


def prompt_tokens(body: dict[str, Any]) -> int:
    return max(1, len(json.dumps(body)) // 4)


OUTPUT_LIMITS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def output_limit(body: dict[str, Any]) -> int | None:
    """The smallest output limit the request names (None: it names none)."""
    limits = [body[name] for name in OUTPUT_LIMITS if isinstance(body.get(name), int)]
    return min(limits) if limits else None


def reported_usage(body: dict[str, Any], words: int, behaviour: Behaviour) -> tuple[int, int]:
    """(input, output) as the usage reports them."""
    completion = words if behaviour.completion_tokens is None else behaviour.completion_tokens
    limit = output_limit(body)
    if behaviour.honours_max_tokens and limit is not None:
        completion = min(completion, limit)
    return prompt_tokens(body) + behaviour.hidden_input, completion


def openai_completion(
    body: dict[str, Any],
    text: str,
    calls: list[tuple[str, str, str]] | None = None,
    behaviour: Behaviour = Behaviour(),
) -> dict[str, Any]:
    prompt, completion = reported_usage(body, len(text.split()), behaviour)
    if calls:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": PREAMBLE,
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in calls
            ],
        }
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": text}, "stop"
    return {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "created": 1,
        "model": body.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            **(
                {"prompt_tokens_details": {"cached_tokens": min(behaviour.cached_input, prompt)}}
                if behaviour.cached_input
                else {}
            ),
        },
    }


def openai_events(
    body: dict[str, Any],
    pieces: list[str],
    calls: list[tuple[str, str, str]] | None = None,
    behaviour: Behaviour = Behaviour(),
) -> Iterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-loopback",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": body.get("model"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    frames = [chunk({"role": "assistant", "content": ""})]
    if calls:
        frames.append(chunk({"content": PREAMBLE}))
        for index, (call_id, name, arguments) in enumerate(calls):
            head = {"index": index, "id": call_id, "type": "function"}
            function = {"name": name, "arguments": ""}
            frames.append(chunk({"tool_calls": [{**head, "function": function}]}))
            half = len(arguments) // 2
            for part in (arguments[:half], arguments[half:]):
                frames.append(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
                )
        frames.append(chunk({}, "tool_calls"))
    else:
        frames += [chunk({"content": piece}) for piece in pieces]
        frames.append(chunk({}, "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        prompt, completion = reported_usage(body, len(pieces), behaviour)
        frames.append(
            {
                **chunk({}),
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )
    for frame in frames:
        yield f"data: {json.dumps(frame)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def anthropic_message(
    body: dict[str, Any],
    text: str,
    calls: list[tuple[str, str, str]] | None = None,
    behaviour: Behaviour = Behaviour(),
) -> dict[str, Any]:
    if calls:
        content: list[dict[str, Any]] = [{"type": "text", "text": PREAMBLE}]
        content += [
            {"type": "tool_use", "id": i, "name": n, "input": json.loads(a)} for i, n, a in calls
        ]
        plain = anthropic_message(body, text, behaviour=behaviour)
        return {**plain, "content": content, "stop_reason": "tool_use"}
    prompt, completion = reported_usage(body, len(text.split()), behaviour)
    return {
        "id": "msg_loopback",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }


def anthropic_events(
    body: dict[str, Any],
    pieces: list[str],
    calls: list[tuple[str, str, str]] | None = None,
    behaviour: Behaviour = Behaviour(),
) -> Iterator[bytes]:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    prompt, completion = reported_usage(body, len(pieces), behaviour)
    start = {**anthropic_message(body, ""), "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": prompt, "output_tokens": 1}
    yield event("message_start", {"message": start})
    yield event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    yield event("ping", {})
    for piece in [PREAMBLE] if calls else pieces:
        delta = {"type": "text_delta", "text": piece}
        yield event("content_block_delta", {"index": 0, "delta": delta})
    yield event("content_block_stop", {"index": 0})
    for index, (call_id, name, arguments) in enumerate(calls or [], start=1):
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        yield event("content_block_start", {"index": index, "content_block": block})
        half = len(arguments) // 2
        for part in (arguments[:half], arguments[half:]):
            delta = {"type": "input_json_delta", "partial_json": part}
            yield event("content_block_delta", {"index": index, "delta": delta})
        yield event("content_block_stop", {"index": index})
    yield event(
        "message_delta",
        {
            "delta": {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": completion},
        },
    )
    yield event("message_stop", {})


def responses_events(
    frame: openai_responses.ResponseFrame, chunks: Iterator[bytes]
) -> Iterator[bytes]:
    """A chat completion stream as the Responses API's events."""
    stream = openai_responses.ResponsesStream(frame)
    for chunk in chunks:
        if out := stream.feed(chunk):
            yield out
    yield from stream.end()


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

    def fail(
        self, status: int, error: dict[str, Any] | None = None, retry_after: str | None = None
    ) -> None:
        self.behaviour = Behaviour(
            status=status,
            error=error or {"error": {"message": "broken"}},
            retry_after=retry_after,
        )

    def cut_stream(self, after_events: int) -> None:
        """Close a stream's connection after ``after_events`` events (0: right after its
        headers), without ending it."""
        self.behaviour = Behaviour(cut_after_events=after_events)

    def hang(self) -> None:
        self.behaviour = Behaviour(hang=True)

    def answer_slowly(self, delay_s: float) -> None:
        """Wait ``delay_s`` before each answer (the echo), as a slower deployment does."""
        self.behaviour = Behaviour(delay_s=delay_s)

    def stream_slowly(self, pieces: int, piece_delay_s: float) -> None:
        self.behaviour = Behaviour(pieces=pieces, piece_delay_s=piece_delay_s)

    def answer_with(self, text: Callable[[dict[str, Any]], str]) -> None:
        """Answer each request with ``text(body)`` (in the protocol's shape) instead of the echo."""
        self.behaviour = Behaviour(text=text)

    def behave(self) -> None:
        self.behaviour = Behaviour()

    def bill(
        self,
        *,
        hidden_input: int = 0,
        completion_tokens: int | None = None,
        honours_max_tokens: bool = True,
    ) -> None:
        """Answer with usage that adds ``hidden_input`` to every prompt and reports
        ``completion_tokens`` (cut to the request's output limit unless it is ignored)."""
        self.behaviour = Behaviour(
            hidden_input=hidden_input,
            completion_tokens=completion_tokens,
            honours_max_tokens=honours_max_tokens,
        )

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        always: bool = False,
        also_client_tool: str | None = None,
    ) -> None:
        """Answer by calling the offered tool ``name`` (a trailing ``*`` matches a prefix) unless
        the conversation already called it (or always); an answer echoes the latest tool result."""
        self.behaviour = Behaviour(
            tool=name,
            tool_arguments=arguments,
            tool_always=always,
            also_client_tool=also_client_tool,
        )

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
            if path not in (*OPENAI_PATHS, ANTHROPIC_PATH, *RESPONSES_PATHS):
                return self.send_json(404, {"error": {"message": f"no route {path}"}})
            if behaviour.hang:
                upstream.stopping.wait(HANG_LIMIT_S)
                self.close_connection = True
                return None
            if behaviour.delay_s:
                upstream.stopping.wait(behaviour.delay_s)
            if behaviour.status >= 400:
                extra = {"Retry-After": behaviour.retry_after} if behaviour.retry_after else {}
                return self.send_json(behaviour.status, behaviour.error or {}, extra)
            body = seen.body
            responses = path in RESPONSES_PATHS
            frame = openai_responses.ResponseFrame.of(body)
            if responses:
                body = openai_responses.chat_request(body)
            text = behaviour.text(body) if behaviour.text else echo(body)
            calls = tool_calls_of(body, behaviour)
            anthropic = path == ANTHROPIC_PATH
            if not body.get("stream"):
                answer = (
                    anthropic_message(body, text, calls, behaviour)
                    if anthropic
                    else openai_completion(body, text, calls, behaviour)
                )
                if responses:
                    answer = openai_responses.response_object(frame, answer)
                return self.send_json(200, answer)
            pieces = word_pieces(text, behaviour.pieces)
            events = (
                anthropic_events(body, pieces, calls, behaviour)
                if anthropic
                else openai_events(body, pieces, calls, behaviour)
            )
            if responses:
                events = responses_events(frame, events)
            return self.send_stream(
                upstream, events, behaviour.piece_delay_s, behaviour.cut_after_events
            )

        def send_json(
            self, status: int, payload: Any, headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def send_stream(
            self,
            upstream: LoopbackUpstream,
            events: Iterator[bytes],
            delay_s: float,
            cut_after: int | None = None,
        ) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for sent, event in enumerate(events):
                    if cut_after is not None and sent >= cut_after:
                        self.wfile.flush()
                        if sent:
                            # Let the events sent reach the reader before the cut: a reader that
                            # sees the end of the connection first fails the read, its buffered
                            # events unread (aiohttp's), which a loaded machine makes likely.
                            upstream.stopping.wait(CUT_GRACE_S)
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
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
