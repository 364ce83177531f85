"""The gateway benchmark's upstream model: OpenAI Chat Completions on loopback, as fast as a
Python process answers, so that what the benchmark measures is what sits between the client and
it (the gateway, LiteLLM's proxy), not the model.

``POST /v1/chat/completions`` (or ``/chat/completions``) answers a fixed short completion with
usage; with ``"stream": true`` it streams Server-Sent Events as OpenAI does: a first chunk with
the role and the first piece of text, the other pieces ``PIECE_GAP_S`` apart (so that a proxy which
held the stream back would show it in the time to first token), the finish chunk, the usage chunk
when ``stream_options.include_usage`` asks for it, then ``data: [DONE]``. ``GET`` on any path
answers 200 (readiness). HTTP/1.1 with keep-alive on plain asyncio streams, standard library
only, no Django: it runs in its own process (``python -m scripts.bench_gateway_upstream --port N
--parent PID``), so that it shares no interpreter lock with the client or the servers it answers,
and it exits when its parent is gone. ``--delay-ms`` makes each answer wait that long first (a
slower deployment, for the balancing bench: ``scripts/bench_balance.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from typing import Any

HOST = "127.0.0.1"
CHAT_PATHS = (b"/v1/chat/completions", b"/chat/completions")
ANSWER_PIECES = ("OK", ",", " this", " is", " the", " bench", " upstream", ".")
PIECE_GAP_S = 0.001
MAX_BODY_BYTES = 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
PARENT_POLL_S = 0.5
CREATED = 1_700_000_000
# Seconds each answer waits before it is sent (``--delay-ms``).
DELAY_S = 0.0


def prompt_tokens(raw: bytes) -> int:
    """A cheap stand-in for a tokenizer: the usage a provider would report, roughly."""
    return max(1, len(raw) // 4)


def completion(model: str, prompt: int) -> bytes:
    text = "".join(ANSWER_PIECES)
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": len(ANSWER_PIECES),
                "total_tokens": prompt + len(ANSWER_PIECES),
            },
        }
    ).encode()


def chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def event(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


def stream_events(model: str, prompt: int, with_usage: bool) -> list[bytes]:
    events = [event(chunk(model, {"role": "assistant", "content": ANSWER_PIECES[0]}))]
    events += [event(chunk(model, {"content": piece})) for piece in ANSWER_PIECES[1:]]
    events.append(event(chunk(model, {}, "stop")))
    if with_usage:
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": len(ANSWER_PIECES),
            "total_tokens": prompt + len(ANSWER_PIECES),
        }
        events.append(event({**chunk(model, {}), "choices": [], "usage": usage}))
    events.append(event("[DONE]"))
    return events


def head(status: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def plain(status: str, body: bytes, content_type: str = "application/json") -> bytes:
    return head(status, [("content-type", content_type), ("content-length", str(len(body)))]) + body


class BadRequest(Exception):
    pass


async def read_request(
    reader: asyncio.StreamReader,
) -> tuple[bytes, bytes, dict[bytes, bytes], bytes]:
    """Method, path, headers (names lower-cased) and body of the next request on the connection."""
    try:
        raw_head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as error:
        raise BadRequest("headers too large") from error
    request_line, *header_lines = raw_head[:-4].split(b"\r\n")
    try:
        method, path, _version = request_line.split(b" ", 2)
    except ValueError as error:
        raise BadRequest("bad request line") from error
    headers: dict[bytes, bytes] = {}
    for line in header_lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            body += await reader.readexactly(size + 2)
            del body[-2:]
            if len(body) > MAX_BODY_BYTES:
                raise BadRequest("body too large")
        return method, path.split(b"?")[0], headers, bytes(body)
    length = int(headers.get(b"content-length", b"0") or 0)
    if length > MAX_BODY_BYTES:
        raise BadRequest("body too large")
    body = await reader.readexactly(length) if length else b""
    return method, path.split(b"?")[0], headers, body


async def answer_chat(writer: asyncio.StreamWriter, raw: bytes) -> None:
    try:
        body = json.loads(raw)
    except ValueError:
        writer.write(plain("400 Bad Request", b'{"error": {"message": "body is not JSON"}}'))
        return
    model = str(body.get("model") or "bench-model")
    prompt = prompt_tokens(raw)
    if DELAY_S:
        await asyncio.sleep(DELAY_S)
    if body.get("stream") is not True:
        writer.write(plain("200 OK", completion(model, prompt)))
        return
    options = body.get("stream_options")
    with_usage = isinstance(options, dict) and options.get("include_usage") is True
    events = stream_events(model, prompt, with_usage)
    headers = [
        ("content-type", "text/event-stream"),
        ("cache-control", "no-cache"),
        ("transfer-encoding", "chunked"),
    ]
    writer.write(head("200 OK", headers))
    for index, data in enumerate(events):
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await writer.drain()
        # The text comes in pieces with a gap between them, as a model's does; the first piece
        # goes out with the headers, so the first token's time is the path's own.
        if index < len(ANSWER_PIECES):
            await asyncio.sleep(PIECE_GAP_S)
    writer.write(b"0\r\n\r\n")


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                method, path, headers, body = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            except BadRequest as error:
                writer.write(plain("400 Bad Request", str(error).encode(), "text/plain"))
                await writer.drain()
                return
            if method == b"POST" and path in CHAT_PATHS:
                await answer_chat(writer, body)
            elif method == b"GET":
                writer.write(plain("200 OK", b'{"object": "list", "data": []}'))
            else:
                writer.write(plain("404 Not Found", b'{"error": {"message": "not found"}}'))
            await writer.drain()
            if headers.get(b"connection", b"").lower() == b"close":
                return
    except ConnectionError:
        return
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def watch_parent(parent: int) -> None:
    """Exit once the process that started this one is gone (a bench killed mid-run)."""
    while True:
        await asyncio.sleep(PARENT_POLL_S)
        if os.getppid() != parent:
            os._exit(0)


async def main_async(port: int, parent: int | None) -> None:
    server = await asyncio.start_server(
        serve_connection, HOST, port, limit=MAX_HEADER_BYTES, backlog=1024
    )
    watcher = asyncio.create_task(watch_parent(parent)) if parent else None
    print(f"bench upstream listening on http://{HOST}:{port}", flush=True)
    async with server:
        await server.serve_forever()
    if watcher is not None:
        watcher.cancel()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--parent", type=int, default=None, help="exit when this pid is gone")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="wait before each answer")
    args = parser.parse_args(argv)
    global DELAY_S
    DELAY_S = max(args.delay_ms, 0.0) / 1000
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main_async(args.port, args.parent))


if __name__ == "__main__":
    main(sys.argv[1:])
