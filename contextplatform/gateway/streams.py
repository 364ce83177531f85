"""The answer's text followed as a stream passes: the bytes go to the client untouched, and the
events are read beside them so that the turn can be completed, and the provider's reported usage
recorded, when the stream ends."""

from __future__ import annotations

import json
from typing import Any

from contextplatform.gateway.protocol import Protocol
from contextplatform.protocols.usage import ProviderUsage, StreamUsage

MAX_LINE_BYTES = 1024 * 1024  # a longer line is not an event this follows (it still passes)


class StreamTranscript:
    """Reads Server-Sent Events in the provider's format: OpenAI ``data: {chunk}`` lines with
    ``choices[0].delta.content``, Anthropic ``content_block_delta`` events with ``text_delta``."""

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol
        self._pending = b""
        self._parts: list[str] = []
        self.finished = False
        self._usage = StreamUsage()

    def feed(self, chunk: bytes) -> None:
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        if len(self._pending) > MAX_LINE_BYTES:
            self._pending = b""
        for line in lines:
            self._line(line.strip())

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self.finished = True
            return
        try:
            event = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return
        if isinstance(event, dict):
            self._event(event)

    def _event(self, event: dict[str, Any]) -> None:
        self._usage.feed(event)
        if self.protocol == "anthropic":
            if event.get("type") == "message_stop":
                self.finished = True
            delta = event.get("delta") if event.get("type") == "content_block_delta" else None
            if isinstance(delta, dict) and delta.get("type") == "text_delta":
                self._text(delta.get("text"))
            return
        choices = event.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            delta = choices[0].get("delta")
            if isinstance(delta, dict):
                self._text(delta.get("content"))

    def _text(self, text: Any) -> None:
        if isinstance(text, str):
            self._parts.append(text)

    @property
    def provider_usage(self) -> ProviderUsage | None:
        """The provider's reported usage, once the stream carried it."""
        return self._usage.usage

    @property
    def usage(self) -> dict[str, int] | None:
        """The same in the provider's own ``usage`` shape (what a non-streaming answer holds)."""
        usage = self._usage.usage
        return usage.in_shape_of(self.protocol) if usage else None

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def response(self) -> dict[str, Any]:
        """The assembled answer in the provider's non-streaming shape, as a hand-back takes it."""
        if self.protocol == "anthropic":
            return {"role": "assistant", "content": [{"type": "text", "text": self.text}]}
        return {"choices": [{"message": {"role": "assistant", "content": self.text}}]}
