"""The answer's text followed as a stream passes: the bytes go to the client untouched, and the
events are read beside them (the one SSE reader, ``protocols/sse.py``; what an event says is the
provider's protocol's) so that the turn can be completed, and the provider's reported usage
recorded, when the stream ends."""

from __future__ import annotations

from typing import Any

from contextplatform.gateway.protocol import Protocol
from contextplatform.protocols.registry import protocol_for
from contextplatform.protocols.sse import DONE, SSEReader
from contextplatform.protocols.streamed_calls import StreamedCalls
from contextplatform.protocols.usage import ProviderUsage, StreamUsage

MAX_LINE_BYTES = 1024 * 1024  # a longer event is not one this follows (it still passes)


class StreamTranscript:
    """Reads the provider's Server-Sent Events: the answer's text, its end, its usage."""

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol
        self._provider = protocol_for(protocol)
        self._reader = SSEReader(max_block_bytes=MAX_LINE_BYTES)
        self._parts: list[str] = []
        self.finished = False
        self._usage = StreamUsage()
        self._calls = StreamedCalls()

    def feed(self, chunk: bytes) -> None:
        for block in self._reader.feed(chunk):
            event = block.json()
            if event == DONE:
                self.finished = True
            elif isinstance(event, dict):
                self._event(event)

    def _event(self, event: dict[str, Any]) -> None:
        self._usage.feed(event)
        if self._provider.stream_ends(event):
            self.finished = True
        text = self._provider.stream_text(event)
        if text is not None:
            self._parts.append(text)
        for delta in self._provider.stream_tool_deltas(event):
            self._calls.add(delta)

    @property
    def provider_usage(self) -> ProviderUsage | None:
        """The provider's reported usage, once the stream carried it."""
        return self._usage.usage

    @property
    def usage(self) -> dict[str, int] | None:
        """The same in the provider's own ``usage`` shape (what a non-streaming answer holds)."""
        usage = self._usage.usage
        return self._provider.usage_in_shape(usage) if usage else None

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def response(self) -> dict[str, Any]:
        """The assembled answer in the provider's non-streaming shape, as a hand-back takes it."""
        return self._provider.streamed_response(self.text, self._calls.ordered())
