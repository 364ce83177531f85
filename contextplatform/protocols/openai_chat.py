"""OpenAI Chat Completions: ``POST /v1/chat/completions``.

Calls are ``choices[0].message.tool_calls`` entries (``{"id", "type": "function", "function":
{"name", "arguments": "<JSON string>"}}``), results are ``role: tool`` messages; a stream reports
usage only when the request says ``stream_options.include_usage``, in a final chunk without
choices, and ends with ``data: [DONE]``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel

from contextplatform.protocols.base import Messages, ProtocolError, ProviderProtocol, error_type
from contextplatform.protocols.provider_input import openai_framing_tokens
from contextplatform.protocols.provider_shapes import OpenAIChatRequest
from contextplatform.protocols.sse import sse
from contextplatform.protocols.stream_rounds import HeldCall, StreamRound
from contextplatform.protocols.streamed_calls import StreamedCall, ToolDelta
from contextplatform.protocols.tools import (
    UNSERVED_TEXT,
    MessageCall,
    MessageResult,
    ServedCall,
    ToolCall,
    arguments_text,
    as_object,
    tool_call,
)
from contextplatform.protocols.usage import ProviderUsage

SYSTEM_ROLES = frozenset({"system", "developer"})
# OpenAI answers an unknown path or model with 404 and this type (its client raises NotFoundError
# on the status); the platform's code says what was not found.
OPENAI_NOT_FOUND_TYPE = "invalid_request_error"
# OpenAI models that answer 400 to ``max_tokens`` ("use max_completion_tokens instead").
COMPLETION_TOKENS_ONLY = re.compile(r"^(o\d|gpt-5)([-.:].*)?$")


def first_message(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, dict) else None


def client_asked_for_usage(body: Mapping[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


class OpenAIChat(ProviderProtocol):
    name = "openai"
    user_field = "user"
    usage_fields: ClassVar[tuple[str, ...]] = ("prompt_tokens", "completion_tokens", "total_tokens")
    stream_usage_on_request = True
    injected_id_prefix = "call_vsr_"
    path = "/v1/chat/completions"

    # ------------------------------------------------------------------ requests

    def request_shape(self, *, for_call: bool = False) -> type[BaseModel]:
        return OpenAIChatRequest

    def max_tokens_of(self, request: BaseModel) -> int | None:
        assert isinstance(request, OpenAIChatRequest)
        return request.max_completion_tokens or request.max_tokens

    def body_user(self, body: Mapping[str, Any]) -> Any:
        return body.get("user")

    def output_limit_field(self, model: str) -> str:
        """``max_completion_tokens`` for the reasoning families, which refuse ``max_tokens``;
        ``max_tokens`` everywhere else (what OpenAI-compatible servers read)."""
        name = model.rsplit("/", 1)[-1].strip().lower()
        return "max_completion_tokens" if COMPLETION_TOKENS_ONLY.match(name) else "max_tokens"

    def published_overhead(self, model: str, body: Mapping[str, Any]) -> int:
        return openai_framing_tokens(dict(body))

    def credentials(self, api_key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def with_stream_usage(self, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        if client_asked_for_usage(body):
            return body, False
        options = body.get("stream_options")
        merged = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        return {**body, "stream_options": merged}, True

    # ------------------------------------------------------------------ injection

    def inject_system(self, body: dict[str, Any], section: str) -> dict[str, Any]:
        messages = body["messages"]
        first = messages[0] if messages else None
        if first is not None and first.get("role") in SYSTEM_ROLES:
            content = first.get("content")
            if isinstance(content, list):
                first["content"] = [*content, {"type": "text", "text": section}]
            elif content:
                first["content"] = f"{content}\n\n{section}"
            else:
                first["content"] = section
        else:
            messages.insert(0, {"role": "system", "content": section})
        return body

    def tool_exchange(
        self, call_id: str, name: str, arguments: dict[str, Any], result: str
    ) -> list[dict[str, Any]]:
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        return [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": result},
        ]

    def tool_definition(
        self, name: str, description: str, schema: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": name, "description": description, "parameters": schema},
        }

    # ------------------------------------------------------------------ a request's history

    # ``input_text`` too: clients written for the Responses API send it in Chat messages.
    text_part_types: ClassVar[frozenset[str]] = frozenset({"text", "input_text"})

    def message_calls(self, message: Mapping[str, Any]) -> list[MessageCall]:
        """``tool_calls`` entries, then a legacy ``function_call`` (its id ``function:<name>``,
        which its ``role: function`` result names)."""
        calls: list[MessageCall] = []
        for call in message.get("tool_calls") or []:
            if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                continue
            function = as_object(call.get("function"))
            arguments = arguments_text(function.get("arguments"))
            calls.append(MessageCall(call["id"], str(function.get("name", "")), arguments))
        legacy = message.get("function_call")
        if isinstance(legacy, dict) and legacy.get("name"):
            name = str(legacy["name"])
            calls.append(
                MessageCall(f"function:{name}", name, arguments_text(legacy.get("arguments")))
            )
        return calls

    def result_ids(self, message: Mapping[str, Any]) -> list[str]:
        role = message.get("role")
        if role == "tool" and isinstance(message.get("tool_call_id"), str):
            return [message["tool_call_id"]]
        if role == "function" and message.get("name"):
            return [f"function:{message['name']}"]
        return []

    def message_results(self, message: Mapping[str, Any]) -> list[MessageResult]:
        """A ``role: tool`` (or legacy ``function``) message is one result as a whole."""
        if message.get("role") not in ("tool", "function"):
            return []
        ids = self.result_ids(message)
        call_id = ids[0] if ids else None
        return [MessageResult(call_id, message.get("content"), ("content",), None)]

    # ------------------------------------------------------------------ tool calls

    def tool_calls(self, payload: Mapping[str, Any]) -> list[ToolCall]:
        message = first_message(payload)
        raw_calls = message.get("tool_calls") if message else None
        calls: list[ToolCall] = []
        for raw in raw_calls if isinstance(raw_calls, list) else []:
            function = raw.get("function") if isinstance(raw, dict) else None
            if isinstance(function, dict):
                calls.append(
                    tool_call(raw.get("id"), function.get("name"), function.get("arguments"), raw)
                )
        return calls

    def follow_up_messages(
        self, payload: Mapping[str, Any], served: Sequence[ServedCall]
    ) -> list[dict[str, Any]]:
        message = first_message(payload) or {}
        return [
            {
                "role": "assistant",
                "content": message.get("content"),
                "tool_calls": [s.call.raw for s in served],
            },
            *({"role": "tool", "tool_call_id": s.call.id, "content": s.content} for s in served),
        ]

    def without_reserved(
        self, payload: dict[str, Any], reserved: Collection[str]
    ) -> dict[str, Any]:
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return payload
        choice = dict(choices[0])
        message = dict(choice.get("message") or {})
        kept = [
            raw
            for raw in message.get("tool_calls") or []
            if not (isinstance(raw, dict) and (raw.get("function") or {}).get("name") in reserved)
        ]
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
            if choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
            if not message.get("content"):
                message["content"] = UNSERVED_TEXT
        choice["message"] = message
        return {**payload, "choices": [choice, *choices[1:]]}

    def streamed_call(self, call_id: str, name: str, arguments: str) -> dict[str, Any]:
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments or "{}"},
        }

    def stream_round(
        self, reserved: Collection[str], *, client_wants_usage: bool = True
    ) -> StreamRound:
        return ChatCompletionsRound(self, reserved, client_wants_usage)

    def turn(self, text: str, calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {"choices": [{"message": {"content": text or None, "tool_calls": list(calls)}}]}

    # ------------------------------------------------------------------ usage and errors

    def summed_usage(self, usages: Sequence[Any]) -> dict[str, Any] | None:
        """The base's sum, with the cached prompt tokens of every call summed too (they sit in
        ``prompt_tokens_details``, which the base would take from the last call alone)."""
        total = super().summed_usage(usages)
        if total is None:
            return None
        cached = [
            details.get("cached_tokens")
            for usage in usages
            if isinstance(usage, dict)
            and isinstance(details := usage.get("prompt_tokens_details"), dict)
        ]
        counts = [c for c in cached if isinstance(c, int) and not isinstance(c, bool)]
        if counts:
            details = total.get("prompt_tokens_details")
            total["prompt_tokens_details"] = {
                **(details if isinstance(details, dict) else {}),
                "cached_tokens": sum(counts),
            }
        return total

    def usage_in_shape(self, usage: ProviderUsage) -> dict[str, int]:
        return {
            "prompt_tokens": usage.input,
            "completion_tokens": usage.output,
            "total_tokens": usage.input + usage.output,
        }

    def error_body(
        self, status: int, code: str, message: str, param: str | None = None
    ) -> dict[str, Any]:
        return {
            "error": {
                "message": message,
                "type": OPENAI_NOT_FOUND_TYPE if status == 404 else error_type(status),
                "param": param,
                "code": code,
            }
        }

    # ------------------------------------------------------------------ streams

    def stream_text(self, event: Mapping[str, Any]) -> str | None:
        choices = event.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            text = as_object(choices[0].get("delta")).get("content")
            return text if isinstance(text, str) else None
        return None

    def answer_output(self, payload: Mapping[str, Any]) -> Any:
        return payload.get("choices")

    def stream_tool_deltas(self, event: Mapping[str, Any]) -> list[ToolDelta]:
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return []
        parts = as_object(choices[0].get("delta")).get("tool_calls")
        deltas: list[ToolDelta] = []
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, dict) or not isinstance(part.get("index"), int):
                continue
            function = as_object(part.get("function"))
            call_id, name, arguments = (
                part.get("id"),
                function.get("name"),
                function.get("arguments"),
            )
            deltas.append(
                ToolDelta(
                    index=part["index"],
                    id=call_id if isinstance(call_id, str) else None,
                    name=name if isinstance(name, str) else None,
                    arguments=arguments if isinstance(arguments, str) else "",
                )
            )
        return deltas

    def streamed_response(
        self, text: str, tool_calls: Sequence[StreamedCall] = ()
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tool_calls:
            message["content"] = text or None
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in tool_calls
            ]
        return {"choices": [{"message": message}]}

    # ------------------------------------------------------------------ the kernel's client

    def endpoint(self, base_url: str, *, sdk_base_url: bool = False) -> str:
        base = base_url.rstrip("/")
        return f"{base}/chat/completions" if sdk_base_url else f"{base}/v1/chat/completions"

    def headers(self, api_key: str | None, extra: Mapping[str, str]) -> dict[str, str]:
        headers = {**extra, "Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        return headers

    def chat_fields(
        self, messages: Messages, *, json_mode: bool, max_tokens: int | None
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"messages": [dict(message) for message in messages]}
        if json_mode:
            request["response_format"] = {"type": "json_object"}
        if max_tokens is not None:
            request["max_tokens"] = max_tokens
        return request

    def answer_text(self, payload: Any) -> str:
        """The first choice's assistant message content."""
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices:
            raise ProtocolError("response has no choices")
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str) or not content.strip():
            raise ProtocolError("response has no message content")
        return content


class ChatCompletionsRound(StreamRound):
    """A Chat Completions stream's round: ``data:`` chunks with ``choices[0].delta``; tool call
    parts held by index; the finish chunk, the usage chunk and ``[DONE]`` written at the end."""

    def read(self, raw: bytes, data: Any) -> bytes:
        if data == "[DONE]" or not isinstance(data, dict):
            return b""  # the end is written by ``finish``
        choices = data.get("choices")
        if isinstance(data.get("usage"), dict):
            self._usage = data["usage"]
        if not choices:
            return b""  # the usage chunk: added up and written at the end
        self._template = {k: v for k, v in data.items() if k not in ("choices", "usage")}
        choice = as_object(choices[0])
        delta = as_object(choice.get("delta"))
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

    def finish_turn(self, client_calls: list[HeldCall]) -> bytes:
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


__all__ = ["ChatCompletionsRound", "OpenAIChat", "client_asked_for_usage", "first_message"]
