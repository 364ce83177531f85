"""Serving the platform's own tools inside a stream.

vLLM Semantic Router turns recovery off for streaming requests. Here a stream keeps it: the
model's text passes to the client as it arrives; tool calls are held back until the model's turn
ends (a tool call is not text a reader waits for, and only at the end is it known whether the turn
called a reserved tool). If it did, the gateway serves those calls and opens the follow-up stream,
whose output continues the same client stream; if it did not, the held calls of the client's own
tools are sent on, then the end of the turn with the usage of every call added up.

``StreamRound`` reads one upstream stream (per protocol) and says what to pass on now; it keeps
what the turn said so that the follow-up request can be built from it, and writes the held end
of the turn when the loop is over. Pure: the caller does the I/O.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from contextplatform.gateway.tool_calls import (
    UNSERVED_TEXT,
    Protocol,
    ToolCall,
    parse_arguments,
    summed_usage,
)
from contextplatform.protocols.base import as_object as _object
from contextplatform.protocols.registry import protocol_for
from contextplatform.protocols.sse import SSEBlock, SSEReader, sse

MAX_EVENT_BYTES = 4 * 1024 * 1024  # a longer event is passed on as it is, unread


def event_data(event: bytes) -> Any:
    """The JSON of an event's data, ``"[DONE]"``, or None."""
    reader = SSEReader()
    blocks = reader.feed(event if event.endswith((b"\n\n", b"\r\r")) else event + b"\n\n")
    for block in blocks:
        if block.dispatched:
            return block.json()
    return None


@dataclass
class HeldCall:
    id: str = ""
    name: str = ""
    arguments: str = ""  # the JSON text as it streamed in
    client_index: int | None = None

    def tool_call(self, protocol: Protocol) -> ToolCall:
        raw = protocol_for(protocol).streamed_call(self.id, self.name, self.arguments)
        return ToolCall(
            id=self.id, name=self.name, arguments=parse_arguments(self.arguments), raw=raw
        )


@dataclass
class StreamRound:
    """The stream of one client request, over the rounds of upstream streams it takes."""

    protocol: Protocol
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
        if self.protocol == "anthropic":
            return self._anthropic(raw, data)
        return self._openai(raw, data)

    def _openai(self, raw: bytes, data: Any) -> bytes:
        if data == "[DONE]" or not isinstance(data, dict):
            return b""  # the end is written by ``finish``
        choices = data.get("choices")
        if isinstance(data.get("usage"), dict):
            self._usage = data["usage"]
        if not choices:
            return b""  # the usage chunk: added up and written at the end
        self._template = {k: v for k, v in data.items() if k not in ("choices", "usage")}
        choice = _object(choices[0])
        delta = _object(choice.get("delta"))
        held = False
        for part in delta.get("tool_calls") or []:
            if isinstance(part, dict):
                self._openai_call_part(part)
                held = True
        if choice.get("finish_reason"):
            self._finish = choice
            return b""
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._text.append(content)
            self.text_passed = True
        if not held:
            if self.rounds > 1 and delta.get("role") and not content:
                return b""  # the follow-up's opening chunk: the client had one
            return raw
        if content or delta.get("refusal"):
            rest = {**delta}
            rest.pop("tool_calls", None)
            return sse({**data, "choices": [{**choice, "delta": rest}]})
        return b""

    def _openai_call_part(self, part: dict[str, Any]) -> None:
        given = part.get("index")
        index = given if isinstance(given, int) else len(self._calls)
        call = self._calls.setdefault(index, HeldCall())
        if isinstance(part.get("id"), str):
            call.id = part["id"]
        function = part.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str):
                call.name += function["name"]
            if isinstance(function.get("arguments"), str):
                call.arguments += function["arguments"]

    def _anthropic(self, raw: bytes, data: Any) -> bytes:
        if not isinstance(data, dict):
            return raw
        kind = data.get("type")
        if kind == "message_start":
            message = _object(data.get("message"))
            if isinstance(message.get("usage"), dict):
                self._usage = dict(message["usage"])
            return raw if self.rounds <= 1 else b""
        if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            return self._anthropic_block(raw, data)
        if kind == "message_delta":
            if isinstance(data.get("usage"), dict):
                self._usage = {**self._usage, **data["usage"]}
            self._finish = data
            return b""
        if kind == "message_stop":
            return b""
        return raw  # ping, and events this does not know

    def _anthropic_block(self, raw: bytes, data: dict[str, Any]) -> bytes:
        index = data.get("index")
        if not isinstance(index, int):
            return raw
        if data["type"] == "content_block_start":
            block = _object(data.get("content_block"))
            if block.get("type") == "tool_use":
                self._calls[index] = HeldCall(
                    id=str(block.get("id") or ""), name=str(block.get("name") or "")
                )
                return b""
            self._index_map[index] = self._next_index
            self._next_index += 1
        if index in self._calls:
            delta = _object(data.get("delta"))
            if isinstance(delta.get("partial_json"), str):
                self._calls[index].arguments += delta["partial_json"]
            return b""
        if index not in self._index_map:
            return raw
        text = _object(data.get("delta")).get("text")
        if isinstance(text, str):
            self._text.append(text)
            self.text_passed = self.text_passed or bool(text)
        client_index = self._index_map[index]
        if client_index == index:
            return raw
        return sse({**data, "index": client_index}, data["type"])

    # ---------------------------------------------------------------- after the round

    def reserved_calls(self) -> list[ToolCall]:
        return [
            call.tool_call(self.protocol)
            for _, call in sorted(self._calls.items())
            if call.name in self.reserved
        ]

    def turn(self) -> dict[str, Any]:
        """This round's answer in the non-streaming shape (what a follow-up is built from)."""
        calls = [call.tool_call(self.protocol).raw for _, call in sorted(self._calls.items())]
        return protocol_for(self.protocol).turn("".join(self._text), calls)

    def total_usage(self) -> dict[str, Any] | None:
        return summed_usage(self.protocol, [*self.usages, *([self._usage] if self._usage else [])])

    def finish(self) -> bytes:
        """The held end of the turn, the reserved calls left out: the client's own calls, the
        finish (a plain stop when only reserved calls were left), the usage of every round."""
        client_calls = [
            call for _, call in sorted(self._calls.items()) if call.name not in self.reserved
        ]
        if self.protocol == "anthropic":
            return self._anthropic_finish(client_calls)
        return self._openai_finish(client_calls)

    def _openai_finish(self, client_calls: list[HeldCall]) -> bytes:
        out = bytearray()
        template = self._template or {"object": "chat.completion.chunk"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return sse(
                {**template, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            )

        if not client_calls and not self.text_passed and self._calls:
            out += chunk({"content": UNSERVED_TEXT})
        for position, call in enumerate(client_calls):
            part = {
                "index": position,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            out += chunk({"tool_calls": [part]})
        finish = dict(self._finish or {"index": 0, "delta": {}, "finish_reason": "stop"})
        if finish.get("finish_reason") == "tool_calls" and not client_calls:
            finish["finish_reason"] = "stop"
        out += sse({**template, "choices": [finish]})
        usage = self.total_usage()
        if usage is not None and self.client_wants_usage:
            out += sse({**template, "choices": [], "usage": usage})
        out += b"data: [DONE]\n\n"
        return bytes(out)

    def _anthropic_finish(self, client_calls: list[HeldCall]) -> bytes:
        out = bytearray()
        if not client_calls and not self.text_passed and self._calls:
            index = self._claim_index()
            out += sse(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
                "content_block_start",
            )
            delta = {"type": "text_delta", "text": UNSERVED_TEXT}
            out += sse(
                {"type": "content_block_delta", "index": index, "delta": delta},
                "content_block_delta",
            )
            out += sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        for call in client_calls:
            index = self._claim_index()
            block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            out += sse(
                {"type": "content_block_start", "index": index, "content_block": block},
                "content_block_start",
            )
            delta = {"type": "input_json_delta", "partial_json": call.arguments}
            out += sse(
                {"type": "content_block_delta", "index": index, "delta": delta},
                "content_block_delta",
            )
            out += sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        finish = dict(self._finish or {"type": "message_delta", "delta": {}})
        delta = dict(finish.get("delta") or {})
        if delta.get("stop_reason") == "tool_use" and not client_calls:
            delta["stop_reason"] = "end_turn"
        finish["delta"] = delta
        usage = self.total_usage()
        if usage is not None:
            finish["usage"] = usage
        out += sse(finish, "message_delta")
        out += sse({"type": "message_stop"}, "message_stop")
        return bytes(out)

    def _claim_index(self) -> int:
        index = self._next_index
        self._next_index += 1
        return index


__all__ = ["StreamRound", "event_data", "sse"]
