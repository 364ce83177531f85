"""The model's calls of the tools the gateway serves itself, in either provider's answer shape.

The gateway adds tools of its own to a forwarded request (``vsr_context_retrieve`` where
compression kept originals back, ``search_<source>`` for a lazy source). When the answer calls
them, the gateway answers the calls and asks the model again; the client never sees those tools.
This module is the shape work, per protocol: finding the reserved calls in an answer, building the
follow-up request that carries their results, taking reserved calls out of an answer that goes to
the client, and adding up the usage of every call the client's request made. Pure: no I/O.

OpenAI: calls are ``choices[0].message.tool_calls`` entries (``{"id", "type": "function",
"function": {"name", "arguments": "<JSON string>"}}``), results are ``role: tool`` messages.
Anthropic: calls are ``tool_use`` blocks of ``content`` (``{"id", "name", "input": {...}}``),
results are ``tool_result`` blocks of the next user message.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Protocol = Literal["openai", "anthropic"]

# What the client reads when the answer consisted only of reserved calls that could not be served.
UNSERVED_TEXT = "Additional context could not be retrieved."


@dataclass(frozen=True)
class ToolCall:
    """One call of a tool: its id in the answer, its name, its arguments (None when they were not
    a JSON object) and the call as the answer held it (put back into the follow-up as it was)."""

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw: dict[str, Any]


@dataclass(frozen=True)
class ServedCall:
    call: ToolCall
    content: str  # what the tool answered, or why it could not


def parse_arguments(value: Any) -> dict[str, Any] | None:
    """A call's arguments: OpenAI sends a JSON string, Anthropic an object."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _openai_message(payload: dict[str, Any]) -> dict[str, Any] | None:
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, dict) else None


def tool_calls(protocol: Protocol, payload: dict[str, Any]) -> list[ToolCall]:
    """Every tool call of an answer, in order."""
    calls: list[ToolCall] = []
    if protocol == "anthropic":
        content = payload.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                calls.append(_call(block.get("id"), block.get("name"), block.get("input"), block))
        return calls
    message = _openai_message(payload)
    raw_calls = message.get("tool_calls") if message else None
    for raw in raw_calls if isinstance(raw_calls, list) else []:
        function = raw.get("function") if isinstance(raw, dict) else None
        if isinstance(function, dict):
            calls.append(_call(raw.get("id"), function.get("name"), function.get("arguments"), raw))
    return calls


def _call(call_id: Any, name: Any, arguments: Any, raw: dict[str, Any]) -> ToolCall:
    return ToolCall(
        id=call_id if isinstance(call_id, str) else "",
        name=name if isinstance(name, str) else "",
        arguments=parse_arguments(arguments),
        raw=raw,
    )


def reserved_calls(
    protocol: Protocol, payload: dict[str, Any], reserved: Collection[str]
) -> list[ToolCall]:
    return [call for call in tool_calls(protocol, payload) if call.name in reserved]


def follow_up_body(
    protocol: Protocol,
    body: dict[str, Any],
    payload: dict[str, Any],
    served: Sequence[ServedCall],
) -> dict[str, Any]:
    """The request that carries the served calls' results: the forwarded body's messages, the
    model's turn with its text and only the served calls (the client's own tools it called in the
    same turn it may call again, now knowing more), and one result per call."""
    messages = list(body.get("messages") or [])
    if protocol == "anthropic":
        content = payload.get("content")
        texts = [
            block
            for block in (content if isinstance(content, list) else [])
            if isinstance(block, dict) and block.get("type") == "text" and block.get("text")
        ]
        messages.append({"role": "assistant", "content": [*texts, *(s.call.raw for s in served)]})
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": s.call.id, "content": s.content}
                    for s in served
                ],
            }
        )
    else:
        message = _openai_message(payload) or {}
        messages.append(
            {
                "role": "assistant",
                "content": message.get("content"),
                "tool_calls": [s.call.raw for s in served],
            }
        )
        messages.extend(
            {"role": "tool", "tool_call_id": s.call.id, "content": s.content} for s in served
        )
    return {**body, "messages": messages}


def without_reserved(
    protocol: Protocol, payload: dict[str, Any], reserved: Collection[str]
) -> dict[str, Any]:
    """The answer with the reserved calls taken out, as the client may see it: when nothing is
    left of it, a short text that says context could not be retrieved, and a plain stop."""
    if protocol == "anthropic":
        content = payload.get("content")
        blocks = [
            block
            for block in (content if isinstance(content, list) else [])
            if not (
                isinstance(block, dict)
                and block.get("type") == "tool_use"
                and block.get("name") in reserved
            )
        ]
        answer = {**payload, "content": blocks}
        if not any(isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks):
            if payload.get("stop_reason") == "tool_use":
                answer["stop_reason"] = "end_turn"
            if not blocks:
                answer["content"] = [{"type": "text", "text": UNSERVED_TEXT}]
        return answer
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


# Token fields each provider reports; every call of a turn adds to them.
USAGE_FIELDS: dict[Protocol, tuple[str, ...]] = {
    "openai": ("prompt_tokens", "completion_tokens", "total_tokens"),
    "anthropic": (
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ),
}


def summed_usage(protocol: Protocol, usages: Sequence[Any]) -> dict[str, Any] | None:
    """The usage of several calls as one ``usage`` object of the provider's shape (the last
    call's other fields kept), or None when no call reported any."""
    reported = [usage for usage in usages if isinstance(usage, dict)]
    if not reported:
        return None
    total: dict[str, Any] = dict(reported[-1])
    for name in USAGE_FIELDS[protocol]:
        counts = [u.get(name) for u in reported]
        numbers = [c for c in counts if isinstance(c, int) and not isinstance(c, bool)]
        if numbers:
            total[name] = sum(numbers)
    return total


def with_usage(
    protocol: Protocol, payload: dict[str, Any], usages: Sequence[Any]
) -> dict[str, Any]:
    """The final answer carrying the usage of every call made for it."""
    if len(usages) < 2:
        return payload
    total = summed_usage(protocol, usages)
    return payload if total is None else {**payload, "usage": total}


__all__ = [
    "UNSERVED_TEXT",
    "ServedCall",
    "ToolCall",
    "follow_up_body",
    "parse_arguments",
    "reserved_calls",
    "summed_usage",
    "tool_calls",
    "with_usage",
    "without_reserved",
]
