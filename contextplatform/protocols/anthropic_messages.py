"""Anthropic Messages: ``POST /v1/messages``.

The system prompt is the body's ``system``, beside the messages; calls are ``tool_use`` blocks of
``content`` (``{"id", "name", "input": {...}}``), results are ``tool_result`` blocks of the next
user message, and a ``tool_use`` block needs its tool declared; ``max_tokens`` is required; a
stream always reports usage (``message_start``'s message, then ``message_delta``'s running
totals) and ends with ``message_stop``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel

from contextplatform.protocols.base import Messages, ProtocolError, ProviderProtocol, error_type
from contextplatform.protocols.provider_input import anthropic_tool_prompt_tokens
from contextplatform.protocols.provider_shapes import AnthropicCallRequest, AnthropicChatRequest
from contextplatform.protocols.sse import sse
from contextplatform.protocols.stream_rounds import HeldCall, StreamRound
from contextplatform.protocols.streamed_calls import StreamedCall, ToolDelta
from contextplatform.protocols.tools import (
    UNSERVED_TEXT,
    MessageCall,
    MessageResult,
    ServedCall,
    ToolCall,
    as_object,
    compact_json,
    parse_arguments,
    tool_call,
)
from contextplatform.protocols.usage import ANTHROPIC_INPUT_FIELDS, ProviderUsage

# Anthropic's Messages API requires max_tokens; the kernel's answers (scores, decisions) are
# short JSON documents, so this is a cap, not a target.
DEFAULT_MAX_TOKENS = 4096
VERSION = "2023-06-01"  # what the anthropic SDK sends when its caller sets none
# Anthropic has no JSON mode: the prompt asks for it, and the answer is validated as ever.
JSON_INSTRUCTION = (
    "Answer with one JSON object and nothing else: no prose before or after it, no code fence."
)
INPUT_SCHEMA = {"type": "object", "properties": {"source": {"type": "string"}}}


def is_tool_use(block: Any, reserved: Collection[str] | None = None) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "tool_use"
        and (reserved is None or block.get("name") in reserved)
    )


class AnthropicMessages(ProviderProtocol):
    name = "anthropic"
    user_field = "metadata.user_id"
    injected_id_prefix = "toolu_vsr_"
    path = "/v1/messages"
    usage_fields: ClassVar[tuple[str, ...]] = (
        "input_tokens",
        "output_tokens",
        *ANTHROPIC_INPUT_FIELDS[1:],
    )

    # ------------------------------------------------------------------ requests

    def request_shape(self, *, for_call: bool = False) -> type[BaseModel]:
        # A body sent on as it is needs what a Messages call needs (max_tokens).
        return AnthropicCallRequest if for_call else AnthropicChatRequest

    def max_tokens_of(self, request: BaseModel) -> int | None:
        assert isinstance(request, AnthropicChatRequest)
        return request.max_tokens

    def output_limit_field(self, model: str) -> str:
        return "max_tokens"  # required

    def published_overhead(self, model: str, body: Mapping[str, Any]) -> int:
        return anthropic_tool_prompt_tokens(model, dict(body))

    def required_headers(self) -> dict[str, str]:
        return {"anthropic-version": VERSION}

    def credentials(self, api_key: str | None) -> dict[str, str]:
        return {"x-api-key": api_key} if api_key else {}

    def body_user(self, body: Mapping[str, Any]) -> Any:
        metadata = body.get("metadata")
        return metadata.get("user_id") if isinstance(metadata, dict) else None

    # ------------------------------------------------------------------ injection

    def inject_system(self, body: dict[str, Any], section: str) -> dict[str, Any]:
        system = body.get("system")
        if system is None or system == "":
            body["system"] = section
        elif isinstance(system, str):
            body["system"] = f"{system}\n\n{section}"
        else:
            body["system"] = [*system, {"type": "text", "text": section}]
        return body

    def tool_exchange(
        self, call_id: str, name: str, arguments: dict[str, Any], result: str
    ) -> list[dict[str, Any]]:
        use = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
        outcome = {"type": "tool_result", "tool_use_id": call_id, "content": result}
        return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [outcome]}]

    def tool_definition(
        self, name: str, description: str, schema: dict[str, Any]
    ) -> dict[str, Any]:
        return {"name": name, "description": description, "input_schema": schema}

    def declare_tools(self, body: dict[str, Any], names: Sequence[str], description: str) -> None:
        """Anthropic refuses ``tool_use`` blocks of undeclared tools."""
        tools = body.get("tools") or []
        declared = {tool.get("name") for tool in tools if isinstance(tool, dict)}
        for name in dict.fromkeys(names):
            if name in declared:
                continue
            tools.append(self.tool_definition(name, description, INPUT_SCHEMA))
        body["tools"] = tools

    # ------------------------------------------------------------------ a request's history

    text_part_types: ClassVar[frozenset[str]] = frozenset({"text"})

    def message_calls(self, message: Mapping[str, Any]) -> list[MessageCall]:
        content = message.get("content")
        return [
            MessageCall(
                block["id"], str(block.get("name", "")), compact_json(block.get("input", {}))
            )
            for block in (content if isinstance(content, list) else [])
            if is_tool_use(block) and isinstance(block.get("id"), str)
        ]

    def result_ids(self, message: Mapping[str, Any]) -> list[str]:
        return [
            result.call_id for result in self.message_results(message) if result.call_id is not None
        ]

    def message_results(self, message: Mapping[str, Any]) -> list[MessageResult]:
        """The ``tool_result`` blocks of the message's content."""
        content = message.get("content")
        results: list[MessageResult] = []
        for position, block in enumerate(content if isinstance(content, list) else []):
            if isinstance(block, dict) and block.get("type") == "tool_result":
                call_id = block.get("tool_use_id")
                results.append(
                    MessageResult(
                        call_id if isinstance(call_id, str) else None,
                        block.get("content"),
                        ("content", position, "content"),
                        position,
                    )
                )
        return results

    # ------------------------------------------------------------------ tool calls

    def tool_calls(self, payload: Mapping[str, Any]) -> list[ToolCall]:
        content = payload.get("content")
        return [
            tool_call(block.get("id"), block.get("name"), block.get("input"), block)
            for block in (content if isinstance(content, list) else [])
            if is_tool_use(block)
        ]

    def follow_up_messages(
        self, payload: Mapping[str, Any], served: Sequence[ServedCall]
    ) -> list[dict[str, Any]]:
        content = payload.get("content")
        texts = [
            block
            for block in (content if isinstance(content, list) else [])
            if isinstance(block, dict) and block.get("type") == "text" and block.get("text")
        ]
        results = [
            {"type": "tool_result", "tool_use_id": s.call.id, "content": s.content} for s in served
        ]
        return [
            {"role": "assistant", "content": [*texts, *(s.call.raw for s in served)]},
            {"role": "user", "content": results},
        ]

    def without_reserved(
        self, payload: dict[str, Any], reserved: Collection[str]
    ) -> dict[str, Any]:
        content = payload.get("content")
        blocks = [
            block
            for block in (content if isinstance(content, list) else [])
            if not is_tool_use(block, reserved)
        ]
        answer = {**payload, "content": blocks}
        if not any(is_tool_use(b) for b in blocks):
            if payload.get("stop_reason") == "tool_use":
                answer["stop_reason"] = "end_turn"
            if not blocks:
                answer["content"] = [{"type": "text", "text": UNSERVED_TEXT}]
        return answer

    def streamed_call(self, call_id: str, name: str, arguments: str) -> dict[str, Any]:
        return {
            "type": "tool_use",
            "id": call_id,
            "name": name,
            "input": parse_arguments(arguments) or {},
        }

    def stream_round(
        self, reserved: Collection[str], *, client_wants_usage: bool = True
    ) -> StreamRound:
        return MessagesRound(self, reserved, client_wants_usage)

    def turn(self, text: str, calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        return {"content": [*blocks, *calls]}

    # ------------------------------------------------------------------ usage and errors

    def usage_in_shape(self, usage: ProviderUsage) -> dict[str, int]:
        return {"input_tokens": usage.input, "output_tokens": usage.output}

    def error_body(
        self, status: int, code: str, message: str, param: str | None = None
    ) -> dict[str, Any]:
        # No code of its own: the platform's rides along as an added ``error.code``.
        return {
            "type": "error",
            "error": {"type": error_type(status), "message": message, "code": code},
        }

    def error_event(self, body: dict[str, Any]) -> bytes:
        return sse(body, "error")

    # ------------------------------------------------------------------ streams

    def stream_text(self, event: Mapping[str, Any]) -> str | None:
        if event.get("type") != "content_block_delta":
            return None
        delta = as_object(event.get("delta"))
        text = delta.get("text") if delta.get("type") == "text_delta" else None
        return text if isinstance(text, str) else None

    def stream_ends(self, event: Mapping[str, Any]) -> bool:
        return event.get("type") == "message_stop"

    def answer_output(self, payload: Mapping[str, Any]) -> Any:
        return payload.get("content")

    def stream_tool_deltas(self, event: Mapping[str, Any]) -> list[ToolDelta]:
        index = event.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            return []
        if event.get("type") == "content_block_start":
            block = as_object(event.get("content_block"))
            if block.get("type") != "tool_use":
                return []
            call_id, name = block.get("id"), block.get("name")
            return [
                ToolDelta(
                    index=index,
                    id=call_id if isinstance(call_id, str) else None,
                    name=name if isinstance(name, str) else None,
                )
            ]
        if event.get("type") == "content_block_delta":
            delta = as_object(event.get("delta"))
            piece = delta.get("partial_json")
            if delta.get("type") == "input_json_delta" and isinstance(piece, str):
                return [ToolDelta(index=index, arguments=piece)]
        return []

    def streamed_response(
        self, text: str, tool_calls: Sequence[StreamedCall] = ()
    ) -> dict[str, Any]:
        content: list[dict[str, Any]] = (
            [{"type": "text", "text": text}] if text or not tool_calls else []
        )
        for call in tool_calls:
            try:
                arguments = json.loads(call.arguments) if call.arguments else {}
            except ValueError:
                arguments = {}
            content.append(
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": arguments if isinstance(arguments, dict) else {},
                }
            )
        return {"role": "assistant", "content": content}

    # ------------------------------------------------------------------ the kernel's client

    def endpoint(self, base_url: str, *, sdk_base_url: bool = False) -> str:
        return f"{base_url.rstrip('/')}/v1/messages"

    def headers(self, api_key: str | None, extra: Mapping[str, str]) -> dict[str, str]:
        headers = {**extra, "Content-Type": "application/json"}
        headers.setdefault("anthropic-version", VERSION)
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def chat_fields(
        self, messages: Messages, *, json_mode: bool, max_tokens: int | None
    ) -> dict[str, Any]:
        """The system prompt beside the messages, max_tokens always."""
        system = [m["content"] for m in messages if m.get("role") == "system"]
        if json_mode:
            system.append(JSON_INSTRUCTION)
        request: dict[str, Any] = {
            "max_tokens": max_tokens or DEFAULT_MAX_TOKENS,
            "messages": [
                {"role": m["role"], "content": m["content"]}
                for m in messages
                if m.get("role") != "system"
            ],
        }
        if system:
            request["system"] = "\n\n".join(system)
        return request

    def answer_text(self, payload: Any) -> str:
        """The message's ``content`` text blocks, joined."""
        content = payload.get("content") if isinstance(payload, dict) else None
        if not isinstance(content, list):
            raise ProtocolError("response has no content")
        text = "".join(
            block["text"]
            for block in content
            if isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        )
        if not text.strip():
            raise ProtocolError("response has no text content")
        return text


class MessagesRound(StreamRound):
    """A Messages stream's round: typed events; ``tool_use`` blocks held, the client's blocks
    renumbered past them; ``message_delta`` (with the usage) and ``message_stop`` at the end."""

    def read(self, raw: bytes, data: Any) -> bytes:
        if not isinstance(data, dict):
            return raw
        kind = data.get("type")
        if kind == "message_start":
            message = as_object(data.get("message"))
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
            block = as_object(data.get("content_block"))
            if block.get("type") == "tool_use":
                self._calls[index] = HeldCall(
                    id=str(block.get("id") or ""), name=str(block.get("name") or "")
                )
                return b""
            self._index_map[index] = self._next_index
            self._next_index += 1
        if index in self._calls:
            delta = as_object(data.get("delta"))
            if isinstance(delta.get("partial_json"), str):
                self._calls[index].arguments += delta["partial_json"]
            return b""
        if index not in self._index_map:
            return raw
        text = as_object(data.get("delta")).get("text")
        if isinstance(text, str):
            self._text.append(text)
            self.text_passed = self.text_passed or bool(text)
        client_index = self._index_map[index]
        if client_index == index:
            return raw
        return sse({**data, "index": client_index}, data["type"])

    def finish_turn(self, client_calls: list[HeldCall]) -> bytes:
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


__all__ = [
    "DEFAULT_MAX_TOKENS",
    "JSON_INSTRUCTION",
    "VERSION",
    "AnthropicMessages",
    "MessagesRound",
]
