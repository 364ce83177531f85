"""A tool call as the platform reads it from either provider's answer, and what the gateway
answered to it. Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

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
    """A call's arguments: a JSON string (OpenAI) or an object (Anthropic)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def tool_call(call_id: Any, name: Any, arguments: Any, raw: dict[str, Any]) -> ToolCall:
    return ToolCall(
        id=call_id if isinstance(call_id, str) else "",
        name=name if isinstance(name, str) else "",
        arguments=parse_arguments(arguments),
        raw=raw,
    )


def as_object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class MessageCall:
    """A tool call that an assistant message of a request's history holds: its id, its name and
    its arguments as text (what the model wrote, compact JSON for an object)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class MessageResult:
    """A tool result that a message of a request's history carries: the id of its call (None when
    the message names none), its content as the body holds it, where that content is from the
    message (``("content",)``, ``("content", 2, "content")``) and the position of the result among
    the message's content items (None when the result is the whole message)."""

    call_id: str | None
    content: Any
    path: tuple[str | int, ...]
    position: int | None


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def arguments_text(arguments: Any) -> str:
    """A call's arguments as text: a JSON string as it is, an object compacted, none empty."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    return compact_json(arguments)


__all__ = [
    "UNSERVED_TEXT",
    "MessageCall",
    "MessageResult",
    "ServedCall",
    "ToolCall",
    "arguments_text",
    "as_object",
    "compact_json",
    "parse_arguments",
    "tool_call",
]
