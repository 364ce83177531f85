"""Serving the platform's own tools inside a stream: the provider-neutral half.

vLLM Semantic Router turns recovery off for streaming requests. Here a stream keeps it: the
model's text passes to the client as it arrives; tool calls are held back until the model's turn
ends (a tool call is not text a reader waits for, and only at the end is it known whether the turn
called a reserved tool). If it did, the gateway serves those calls and opens the follow-up stream,
whose output continues the same client stream; if it did not, the held calls of the client's own
tools are sent on, then the end of the turn with the usage of every call added up.

``StreamRound`` reads one upstream stream (through the one SSE reader) and says what to pass on
now; it keeps what the turn said so that the follow-up request can be built from it, and writes
the held end of the turn when the loop is over. Each provider's protocol subclasses it with how
its events read and how its turn ends. Pure: the caller does the I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from contextplatform.protocols.sse import SSEBlock, SSEReader
from contextplatform.protocols.tools import ToolCall, parse_arguments

MAX_EVENT_BYTES = 4 * 1024 * 1024  # a longer event is passed on as it is, unread


class RoundShapes(Protocol):
    """What a round asks its provider's protocol (``ProviderProtocol`` has it)."""

    def streamed_call(self, call_id: str, name: str, arguments: str) -> dict[str, Any]: ...

    def turn(self, text: str, calls: Sequence[dict[str, Any]]) -> dict[str, Any]: ...

    def summed_usage(self, usages: Sequence[Any]) -> dict[str, Any] | None: ...


@dataclass
class HeldCall:
    id: str = ""
    name: str = ""
    arguments: str = ""  # the JSON text as it streamed in
    client_index: int | None = None

    def tool_call(self, shapes: RoundShapes) -> ToolCall:
        raw = shapes.streamed_call(self.id, self.name, self.arguments)
        return ToolCall(
            id=self.id, name=self.name, arguments=parse_arguments(self.arguments), raw=raw
        )


@dataclass
class StreamRound(ABC):
    """The stream of one client request, over the rounds of upstream streams it takes; each
    provider's protocol reads its events (``read``) and writes the held end (``finish_turn``)."""

    shapes: RoundShapes
    reserved: Collection[str]
    client_wants_usage: bool = True  # OpenAI: the client asked for stream_options.include_usage
    rounds: int = 0
    text_passed: bool = False
    usages: list[dict[str, Any]] = field(default_factory=list)
    # This round's state.
    _reader: SSEReader = field(default_factory=lambda: SSEReader(max_block_bytes=MAX_EVENT_BYTES))
    _text: list[str] = field(default_factory=list)
    _calls: dict[int, HeldCall] = field(default_factory=dict)
    _finish: dict[str, Any] | None = None  # the held end of the turn (finish chunk, message_delta)
    _template: dict[str, Any] = field(default_factory=dict)  # OpenAI: id, model... of the chunks
    _usage: dict[str, Any] = field(default_factory=dict)
    _index_map: dict[int, int] = field(default_factory=dict)  # Anthropic: upstream → client index
    _next_index: int = 0  # Anthropic: the next content block index the client sees

    def begin_round(self) -> None:
        if self._usage:
            self.usages.append(self._usage)
        self.rounds += 1
        self._reader = SSEReader(max_block_bytes=MAX_EVENT_BYTES)
        self._text, self._calls, self._finish = [], {}, None
        self._usage, self._index_map = {}, {}

    # ---------------------------------------------------------------- reading

    def feed(self, chunk: bytes) -> bytes:
        """What of ``chunk`` goes to the client now."""
        return b"".join(self._event(block) for block in self._reader.feed(chunk))

    def _event(self, block: SSEBlock) -> bytes:
        raw = block.raw
        data = None if block.overflow else block.json()
        if data is None:
            return raw if raw.strip() else b""  # comments and keep-alives pass
        return self.read(raw, data)

    @abstractmethod
    def read(self, raw: bytes, data: Any) -> bytes:
        """What of one event (its bytes, its JSON data) goes to the client now."""

    @abstractmethod
    def finish_turn(self, client_calls: list[HeldCall]) -> bytes:
        """The held end of the turn with ``client_calls`` (the client's own calls)."""

    # ---------------------------------------------------------------- after the round

    def reserved_calls(self) -> list[ToolCall]:
        return [
            call.tool_call(self.shapes)
            for _, call in sorted(self._calls.items())
            if call.name in self.reserved
        ]

    def turn(self) -> dict[str, Any]:
        """This round's answer in the non-streaming shape (what a follow-up is built from)."""
        calls = [call.tool_call(self.shapes).raw for _, call in sorted(self._calls.items())]
        return self.shapes.turn("".join(self._text), calls)

    def total_usage(self) -> dict[str, Any] | None:
        return self.shapes.summed_usage([*self.usages, *([self._usage] if self._usage else [])])

    def finish(self) -> bytes:
        """The held end of the turn, the reserved calls left out: the client's own calls, the
        finish (a plain stop when only reserved calls were left), the usage of every round."""
        client_calls = [
            call for _, call in sorted(self._calls.items()) if call.name not in self.reserved
        ]
        return self.finish_turn(client_calls)

    def _claim_index(self) -> int:
        index = self._next_index
        self._next_index += 1
        return index


__all__ = ["MAX_EVENT_BYTES", "HeldCall", "RoundShapes", "StreamRound"]
