"""Usage in OpenAI streams: the gateway asks for it, and hides what the client did not ask for.

An OpenAI stream reports usage only when the request says ``stream_options.include_usage``, in a
final chunk with no choices. The gateway sets it on every streamed request it forwards, so that
the replay record gets the provider's counts; when the client had not asked, that extra chunk is
left out of what it receives (``UsageChunkFilter``), so it sees the stream it asked for. Anthropic
streams always carry usage, and pass untouched.
"""

from __future__ import annotations

import json
import re
from typing import Any

from contextplatform.gateway.protocol import Protocol
from contextplatform.protocols.usage import is_usage_chunk

# An event ends at a blank line (SSE allows LF, CRLF and CR line ends).
EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
MAX_PENDING_BYTES = 1024 * 1024  # a longer event is passed on as it is, not held further


def client_asked_for_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def with_stream_usage(protocol: Protocol, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The body to forward for a stream, and whether the usage chunk must be hidden from the
    client (the gateway asked for it, the client did not)."""
    if protocol != "openai" or client_asked_for_usage(body):
        return body, False
    options = body.get("stream_options")
    merged = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return {**body, "stream_options": merged}, True


def _is_usage_event(event: bytes) -> bool:
    if b'"usage"' not in event:  # the common case: no parsing
        return False
    for line in event.splitlines():
        if line.startswith(b"data:"):
            try:
                data = json.loads(line[5:].strip())
            except (ValueError, UnicodeDecodeError):
                return False
            return isinstance(data, dict) and is_usage_chunk(data)
    return False


class UsageChunkFilter:
    """Passes an OpenAI stream on event by event, without the usage chunk. An event is held only
    until its end arrives (a client cannot read half an event anyway)."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk
        passed = bytearray()
        start = 0
        for end in EVENT_END.finditer(data):
            event = data[start : end.end()]
            if not _is_usage_event(event):
                passed += event
            start = end.end()
        self._pending = data[start:]
        if len(self._pending) > MAX_PENDING_BYTES:
            passed += self._pending
            self._pending = b""
        return bytes(passed)

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return b"" if _is_usage_event(rest) else rest
