"""Lazy retrieval: a RAG source marked ``lazy`` is not fetched before the call; the model is
offered a ``search_<source>`` tool instead, and the gateway serves its calls in process through
the source's own match block (recall, judge, keep). A question the model can answer without the
documents costs no retrieval and no context tokens; one that needs them pays one round trip.

Only where the gateway carries the call can it serve those calls: a resolve for an application
that calls its model itself fetches a lazy source as any other.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contextplatform.protocols.registry import protocol_for
from contextplatform.resolve.chat import ChatFormat
from sources.base import ContextSource
from sources.fetch import SourceOutcome

TOOL_PREFIX = "search_"
MAX_TOOL_NAME = 64  # both providers' limit on a tool's name
MAX_QUERY_CHARS = 2000
NO_RESULTS = "No documents matched."


def is_lazy(source: ContextSource) -> bool:
    return bool(getattr(source.settings, "lazy", False)) and source.settings.enabled


def search_tool_name(source: ContextSource) -> str:
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", source.name)
    return f"{TOOL_PREFIX}{safe}"[:MAX_TOOL_NAME]


def tool_description(source: ContextSource) -> str:
    # Short: the definition rides along with every request of the route, searched or not.
    return f"Search {source.name} for passages that answer the query."


QUERY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}},
    "required": ["query"],
}


def search_tool(chat_format: ChatFormat, source: ContextSource) -> dict[str, Any]:
    return protocol_for(chat_format).tool_definition(
        search_tool_name(source), tool_description(source), QUERY_SCHEMA
    )


def declared_tool_names(body: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if isinstance(name, str):
            names.add(name)
    return names


def lazy_sources(
    sources: Sequence[ContextSource], body: dict[str, Any]
) -> dict[str, ContextSource]:
    """The lazy sources whose tools this call offers, by tool name. A source whose tool name the
    client's own tools already use is fetched as usual instead (nothing is lost, nothing clashes)."""
    taken = declared_tool_names(body)
    offered: dict[str, ContextSource] = {}
    for source in sources:
        if not is_lazy(source):
            continue
        name = search_tool_name(source)
        if name not in taken and name not in offered:
            offered[name] = source
    return offered


def offer_search_tools(
    body: dict[str, Any], chat_format: ChatFormat, offered: dict[str, ContextSource]
) -> dict[str, Any]:
    """The request with one search tool per lazy source added to its tools."""
    if not offered:
        return body
    tools = [tool for tool in body.get("tools") or []]
    tools.extend(search_tool(chat_format, source) for source in offered.values())
    return {**body, "tools": tools}


def lazy_report(name: str, tool: str) -> dict[str, Any]:
    """The source's line in the replay record: not fetched, offered as a tool."""
    return {"name": name, "tool": tool}


@dataclass(frozen=True)
class SearchResult:
    content: str  # the tool's answer: the kept passages, or why there are none
    outcome: SourceOutcome

    def record(self, tool: str, query: str, capture_content: bool) -> dict[str, Any]:
        outcome = self.outcome
        return {
            "tool": tool,
            "source": outcome.name,
            "status": outcome.status,
            "query": query if capture_content else None,
            "items": len(outcome.items),
            "tokens": sum(item.tokens for item in outcome.items),
            "ms": outcome.ms,
            **({"error": outcome.error} if outcome.error else {}),
        }


def render_passages(outcome: SourceOutcome) -> str:
    if outcome.failed:
        return f"The search failed: {outcome.error or outcome.status}."
    if not outcome.items:
        return NO_RESULTS
    ranked = sorted(outcome.items, key=lambda item: -(item.score or 0.0))
    return "\n\n".join(
        f'<context source="{outcome.name}">\n{item.content}\n</context>' for item in ranked
    )
