"""Plain text of chat messages in either provider's shape."""

from __future__ import annotations

import json
from typing import Any


def content_text(content: Any) -> str:
    """Text of a message's content: a string, OpenAI parts, or Anthropic blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                kind = part.get("type")
                if kind in {"text", "input_text", "output_text"}:
                    parts.append(str(part.get("text", "")))
                elif kind == "tool_result":
                    parts.append(content_text(part.get("content")))
                elif kind == "tool_use":
                    parts.append(f"{part.get('name', '')} {json.dumps(part.get('input', {}))}")
        return "\n".join(p for p in parts if p)
    if isinstance(content, dict):
        return content_text([content])
    return str(content)


TOOL_CALL_MARK = "[tool call]"
TOOL_RESULT_MARK = "[tool result]"
# The members of a stored message beside role and content: what a tool exchange needs (OpenAI's
# assistant tool_calls, a tool message's tool_call_id and name).
MESSAGE_EXTRAS = ("tool_calls", "tool_call_id", "name")


def _call_line(name: Any, arguments: Any) -> str:
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return f"{TOOL_CALL_MARK} {name} {arguments}"


def message_text(message: dict[str, Any]) -> str:
    """Plain text of a whole message, tool exchanges included, as the session stores it and the
    history source shows it: a tool call as ``[tool call] name {arguments}`` (OpenAI's
    ``tool_calls``, Anthropic's ``tool_use`` blocks), a tool's answer as ``[tool result] ...``
    (OpenAI's ``tool`` message, Anthropic's ``tool_result`` blocks). The request's own turns are
    read the same way, so the history source recognises those the request already carries."""
    content = message.get("content")
    if message.get("role") == "tool":
        return f"{TOOL_RESULT_MARK} {content_text(content)}"
    parts: list[str] = []
    blocks = content if isinstance(content, list) else [content]
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            parts.append(_call_line(block.get("name", ""), block.get("input", {})))
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            parts.append(f"{TOOL_RESULT_MARK} {content_text(block.get('content'))}")
        else:
            parts.append(content_text(block))
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(_call_line(function.get("name", ""), function.get("arguments", "")))
    return "\n".join(part for part in parts if part)


def is_tool_result(text: str) -> bool:
    """Whether a stored message's text (``message_text``) is a tool's answer."""
    return text.startswith(TOOL_RESULT_MARK)
