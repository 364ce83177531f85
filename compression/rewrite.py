"""Write shortened block text back into a request body, and add the recovery tool.

Only the text a block points at changes: OpenAI string content or a ``text`` / ``input_text``
part's ``text``; an Anthropic ``tool_result``'s string content or a nested ``text`` item's
``text``. Array order, ids (``tool_call_id``, ``tool_use_id``), ``is_error``, images,
``cache_control`` and every other key stay as they were.
"""

from __future__ import annotations

from typing import Any

from compression.segments import Path
from contextplatform.protocols.registry import protocol_for

RETRIEVE_TOOL_NAME = "vsr_context_retrieve"
RETRIEVE_TOOL_DESCRIPTION = "Retrieve original context omitted by route compression."
RECOVERY_PLACEHOLDER = "[Context compressed; retrieve the original if needed.]"


class ToolClash(ValueError):
    """The request cannot take the recovery tool."""


def read_at(body: Any, path: Path) -> Any:
    node = body
    for key in path:
        node = node[key]
    return node


def write_at(body: Any, path: Path, text: str) -> None:
    """Replace the string at ``path``; the container it sits in keeps every other key."""
    parent = read_at(body, path[:-1])
    if not isinstance(read_at(body, path), str):
        raise TypeError(f"no text at {path!r}")
    parent[path[-1]] = text


def recovery_trailer(key: str) -> str:
    return (
        f"\n[Recovery key={key}. Call {RETRIEVE_TOOL_NAME} with this key when full context is "
        "required.]"
    )


def retrieve_schema(keys: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"key": {"type": "string", "enum": list(keys)}},
        "required": ["key"],
    }


def retrieve_tool(chat_format: str, keys: list[str]) -> dict[str, Any]:
    """The retrieve tool as ``chat_format``'s protocol offers a tool."""
    return protocol_for(chat_format).tool_definition(
        RETRIEVE_TOOL_NAME, RETRIEVE_TOOL_DESCRIPTION, retrieve_schema(keys)
    )


def tool_name(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        name = tool.get("name")
    return name if isinstance(name, str) else None


def check_tools_accept_retrieve(body: dict[str, Any]) -> None:
    tools = body.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list):
        raise ToolClash("tools must be a list to add the recovery tool")
    if any(tool_name(tool) == RETRIEVE_TOOL_NAME for tool in tools):
        raise ToolClash(f"the request already has a tool named {RETRIEVE_TOOL_NAME}")


def add_retrieve_tool(body: dict[str, Any], chat_format: str, keys: list[str]) -> None:
    """Append the reserved tool with the issued keys as its ``enum``."""
    check_tools_accept_retrieve(body)
    tools = body.get("tools")
    body["tools"] = [*(tools or []), retrieve_tool(chat_format, keys)]
