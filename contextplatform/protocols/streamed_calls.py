"""The tool calls of a streamed answer, put together as the stream passes: each event's pieces
(``ToolDelta``: a call's index in the answer, its id and name when the event opens it, a piece of
its JSON arguments) collected into whole calls (``StreamedCall``), so that the assembled answer
handed to the session keeps them as a non-streaming answer would. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_CALLS = 128
MAX_ARGUMENT_CHARS = 1024 * 1024


@dataclass(frozen=True)
class ToolDelta:
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class StreamedCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class StreamedCalls:
    """The calls so far, by index; pieces past the bounds are dropped (the call still passes)."""

    calls: dict[int, StreamedCall] = field(default_factory=dict)

    def add(self, delta: ToolDelta) -> None:
        call = self.calls.get(delta.index)
        if call is None:
            if len(self.calls) >= MAX_CALLS:
                return
            call = self.calls[delta.index] = StreamedCall()
        if delta.id:
            call.id = delta.id
        if delta.name:
            call.name = delta.name
        if len(call.arguments) + len(delta.arguments) <= MAX_ARGUMENT_CHARS:
            call.arguments += delta.arguments

    def ordered(self) -> list[StreamedCall]:
        return [self.calls[index] for index in sorted(self.calls)]
