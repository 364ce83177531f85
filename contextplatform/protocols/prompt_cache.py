"""Anthropic prompt-cache markers on the stable prefix of a request, before context is injected.

A route with ``model.prompt_cache`` on marks, in the caller's own body, the ends of what stays
byte-stable from one turn of a session to the next: the last of the caller's tools, the last block
of the caller's system prompt and the last block of the caller's last user message (the
conversation so far). The platform's context is injected after those marks (a system block after
the caller's, a tool exchange after the last user message, tools after the caller's), so each
turn reads the previous turn's prefix from the provider's cache and pays full price for the
injected context and the new turn only.

The provider's rules: at most ``MAX_BREAKPOINTS`` blocks carry ``cache_control`` in one request,
the caller's own marks included; where the caller marked a part itself (its tools, its system, its
messages) the platform adds none there; an empty text block takes no mark. OpenAI caches a
request's prefix without marks: there, injecting after the stable prefix is all that matters.
Pure: no database, no I/O; the body given is never modified.
"""

from __future__ import annotations

import copy
from typing import Any

MAX_BREAKPOINTS = 4
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
CACHE_CONTROL = "cache_control"


def marks_in(value: Any) -> int:
    """How many blocks of ``value`` (a list of tools, system blocks or messages) carry a mark."""
    if isinstance(value, dict):
        own = 1 if CACHE_CONTROL in value else 0
        return own + sum(marks_in(child) for child in value.values() if isinstance(child, list))
    if isinstance(value, list):
        return sum(marks_in(child) for child in value)
    return 0


def _markable_text(block: Any) -> bool:
    if not isinstance(block, dict):
        return False
    if block.get("type") == "text":
        return bool(block.get("text"))
    # Thinking blocks take no mark; tool results, images and documents do.
    return block.get("type") in {"tool_result", "tool_use", "image", "document"}


def _marked_tools(tools: list[Any]) -> bool:
    if not tools or not isinstance(tools[-1], dict):
        return False
    tools[-1] = {**tools[-1], CACHE_CONTROL: dict(EPHEMERAL)}
    return True


def _marked_system(body: dict[str, Any]) -> bool:
    system = body.get("system")
    if isinstance(system, str):
        if not system:
            return False
        body["system"] = [{"type": "text", "text": system, CACHE_CONTROL: dict(EPHEMERAL)}]
        return True
    if isinstance(system, list) and system and _markable_text(system[-1]):
        body["system"] = [*system[:-1], {**system[-1], CACHE_CONTROL: dict(EPHEMERAL)}]
        return True
    return False


def _last_user(messages: list[Any]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            return index
    return None


def _marked_conversation(messages: list[Any]) -> bool:
    index = _last_user(messages)
    if index is None:
        return False
    message = messages[index]
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return False
        block = {"type": "text", "text": content, CACHE_CONTROL: dict(EPHEMERAL)}
        messages[index] = {**message, "content": [block]}
        return True
    if isinstance(content, list) and content and _markable_text(content[-1]):
        marked = {**content[-1], CACHE_CONTROL: dict(EPHEMERAL)}
        messages[index] = {**message, "content": [*content[:-1], marked]}
        return True
    return False


def with_cache_markers(body: dict[str, Any]) -> dict[str, Any]:
    """A copy of an Anthropic Messages ``body`` with marks on the ends of its stable parts, in
    prefix order (tools, system, the conversation), as many as the provider's limit leaves."""
    marked = copy.deepcopy(body)
    tools = marked.get("tools")
    system = marked.get("system")
    messages = marked.get("messages")
    left = MAX_BREAKPOINTS - marks_in(tools) - marks_in(system) - marks_in(messages)
    if left > 0 and isinstance(tools, list) and not marks_in(tools) and _marked_tools(tools):
        left -= 1
    if left > 0 and not marks_in(system) and _marked_system(marked):
        left -= 1
    if left > 0 and isinstance(messages, list) and not marks_in(messages):
        _marked_conversation(messages)
    return marked


def common_prefix_length(previous: str, current: str) -> int:
    """How many characters ``current`` shares with ``previous`` from its start."""
    limit = min(len(previous), len(current))
    index = 0
    while index < limit and previous[index] == current[index]:
        index += 1
    return index


def common_prefix_share(previous: str, current: str) -> float:
    """The share of ``current`` that ``previous`` begins with (both serialised the same way):
    how much of a request is unchanged from the previous turn's, from its start."""
    if not current:
        return 1.0
    return common_prefix_length(previous, current) / len(current)
