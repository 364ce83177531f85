"""Place the kept context into the request: ``# Context`` system blocks, or tool-role pairs.

Tool-role injection adds, per source and after the last user message, an assistant tool call and
its result with matching ids, so the conversation stays valid for the provider (vLLM Semantic
Router adds a bare ``tool`` message, which strict providers reject).
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from contextplatform.protocols.registry import protocol_for
from contextplatform.resolve.chat import ChatFormat

TOOL_NAME_FOR_KIND = {"rag": "vsr_rag_context", "memory": "vsr_memory_context"}
INJECTED_TOOL_DESCRIPTION = (
    "Context the platform retrieved for this turn. Its result is already in the conversation; "
    "do not call it."
)


@dataclass(frozen=True)
class SourceBlock:
    """The kept items of one source, in the order they are injected."""

    name: str
    type: str
    contents: tuple[str, ...]


def context_tool_name(block: SourceBlock) -> str:
    if block.type in TOOL_NAME_FOR_KIND:
        return TOOL_NAME_FOR_KIND[block.type]
    safe = re.sub(r"[^A-Za-z0-9_]", "_", block.name)
    return f"vsr_{safe}_context"[:64]


def render_context_section(blocks: list[SourceBlock]) -> str:
    parts = ["# Context"]
    for block in blocks:
        for content in block.contents:
            parts.append(f'<context source="{block.name}">\n{content}\n</context>')
    return "\n\n".join(parts)


def last_user_index(messages: list[dict[str, Any]]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return len(messages) - 1


def inject(
    body: dict[str, Any],
    chat_format: ChatFormat,
    blocks: list[SourceBlock],
    mode: str,
    request_id: str,
    *,
    stable_tools: bool = False,
) -> dict[str, Any]:
    """A rewritten copy of ``body``; the original is never modified. ``stable_tools`` (a route
    that keeps its prefix for the provider's prompt cache): in ``tool_role`` mode the context
    tools of every source given are declared, whether it brought anything this turn or not, so
    the tools part of the prefix stays the same from turn to turn."""
    every = blocks
    blocks = [block for block in blocks if block.contents]
    rewritten = copy.deepcopy(body)
    if mode == "system_prompt":
        if not blocks:
            return rewritten
        return inject_system_prompt(rewritten, chat_format, render_context_section(blocks))
    if stable_tools and every:
        declare_context_tools(rewritten, chat_format, every)
    if not blocks:
        return rewritten
    return inject_tool_role(rewritten, chat_format, blocks, request_id)


def declare_context_tools(
    body: dict[str, Any], chat_format: ChatFormat, blocks: list[SourceBlock]
) -> None:
    # In the route's order of sources, which is the same every turn.
    names = [context_tool_name(block) for block in blocks]
    protocol_for(chat_format).declare_tools(body, names, INJECTED_TOOL_DESCRIPTION)


def inject_system_prompt(
    body: dict[str, Any], chat_format: ChatFormat, section: str
) -> dict[str, Any]:
    return protocol_for(chat_format).inject_system(body, section)


def tool_call_id(chat_format: ChatFormat, request_id: str, index: int) -> str:
    digest = hashlib.sha256(f"{request_id}:{index}".encode()).hexdigest()[:20]
    return protocol_for(chat_format).injected_call_id(digest)


def inject_tool_role(
    body: dict[str, Any], chat_format: ChatFormat, blocks: list[SourceBlock], request_id: str
) -> dict[str, Any]:
    """Each block as one call of its context tool and the call's result, in the format's shape;
    the tools declared where the format refuses undeclared ones."""
    protocol = protocol_for(chat_format)
    messages = body["messages"]
    position = last_user_index(messages) + 1
    exchange: list[dict[str, Any]] = []
    for index, block in enumerate(blocks):
        call_id = tool_call_id(chat_format, request_id, index)
        exchange += protocol.tool_exchange(
            call_id, context_tool_name(block), {"source": block.name}, "\n\n".join(block.contents)
        )
    messages[position:position] = exchange
    declare_context_tools(body, chat_format, blocks)
    return body


def injected_call_ids(
    chat_format: ChatFormat, request_id: str, blocks: list[SourceBlock]
) -> dict[str, str]:
    """Tool-call id → source type of the exchanges ``inject_tool_role`` added (the same ids)."""
    present = [block for block in blocks if block.contents]
    return {
        tool_call_id(chat_format, request_id, index): block.type
        for index, block in enumerate(present)
    }
