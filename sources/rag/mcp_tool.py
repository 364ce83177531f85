"""The ``mcp`` RAG backend (vLLM Semantic Router's ``server_name``, ``tool_name``): a tool of an
MCP server answers the query with documents, and the source's match block keeps them as it keeps
any backend's.

``tool_arguments`` (default ``{"query": "${user_content}"}``) is filled in: ``"${user_content}"``
is the query (the latest user message, as the sources read it), ``"${top_k}"`` the number of
documents asked for (a string that is exactly a placeholder becomes its value, so ``${top_k}`` stays
a number). The documents are read from the tool's result:

1. ``structuredContent``: a list of objects with ``text`` (or ``content``), ``title``, ``id``,
   ``score``, ``metadata``; or an object holding such a list (the first member that is one);
2. else every text content block is a document.

A document without a score counts as similarity 1; the recall block's ``min_similarity`` and
``top_k`` apply to the tool's scores (there is no embedding here to recall by). A result with
``isError`` is a failed retrieval (``BackendError``, so the source's ``on_failure`` decides), and
so is any error reaching the server; the deadline is a ``BackendTimeout``.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from sources.mcp.client import McpError, McpTimeout, call_tool, endpoint_for
from sources.mcp.selectors import Endpoint, HeadersUnreadable, UnknownServer
from sources.mcp_config import TOP_K, USER_CONTENT, McpBackendConfig
from sources.rag.backends import BackendError, BackendTimeout, RagBackend, RetrievalRequest
from sources.recall import RecallHit

TEXT_FIELDS = ("text", "content")


def fill_arguments(template: Any, values: dict[str, Any]) -> Any:
    if isinstance(template, dict):
        return {key: fill_arguments(value, values) for key, value in template.items()}
    if isinstance(template, list):
        return [fill_arguments(value, values) for value in template]
    if isinstance(template, str):
        if template in values:
            return values[template]
        for marker, value in values.items():
            template = template.replace(marker, value if isinstance(value, str) else str(value))
        return template
    return template


def document_list(structured: Any) -> list[dict[str, Any]] | None:
    """The documents of a structured result: the list itself, or an object's first member that is
    a list of objects."""

    def documents(value: Any) -> bool:
        return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)

    if documents(structured):
        return structured
    if isinstance(structured, dict):
        for value in structured.values():
            if documents(value):
                return value
    return None


def as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def score_of(document: dict[str, Any]) -> float:
    raw = document.get("score")
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return 1.0
    return float(raw)


def hits_of(result: types.CallToolResult, source: str) -> list[RecallHit]:
    """The result's documents: its structured content's, else its text blocks."""
    structured = document_list(result.structured_content)
    hits: list[RecallHit] = []
    if structured is not None:
        for index, document in enumerate(structured):
            text = next((as_text(document[f]) for f in TEXT_FIELDS if document.get(f)), "")
            if not text.strip():
                continue
            metadata = document.get("metadata")
            score = score_of(document)
            hits.append(
                RecallHit(
                    chunk_id=None,
                    document_id=as_text(document.get("id")) or str(index),
                    title=as_text(document.get("title")),
                    text=text,
                    collection=source,
                    metadata=metadata if isinstance(metadata, dict) else {},
                    cosine=score,
                    score=score,
                )
            )
        return hits
    for index, block in enumerate(result.content):
        if isinstance(block, types.TextContent) and block.text.strip():
            hits.append(
                RecallHit(
                    chunk_id=None,
                    document_id=str(index),
                    title="",
                    text=block.text,
                    collection=source,
                    cosine=1.0,
                    score=1.0,
                )
            )
    return hits


def error_text(result: types.CallToolResult) -> str:
    said = " ".join(
        block.text for block in result.content if isinstance(block, types.TextContent)
    ).strip()
    return said[:300] or "no message"


class McpBackend(RagBackend):
    name = "mcp"

    def __init__(self, config: McpBackendConfig):
        self.config = config

    async def endpoint(self, request: RetrievalRequest) -> Endpoint:
        name, schema = self.config.server_name, request.schema
        try:
            return await endpoint_for(name, schema, request.timeout_seconds)
        except (UnknownServer, HeadersUnreadable) as error:
            raise BackendError(str(error)) from None

    async def retrieve(self, request: RetrievalRequest) -> list[RecallHit]:
        config = self.config
        recall = request.recall
        top_k = recall.top_k if recall else request.candidates
        arguments = fill_arguments(
            config.tool_arguments, {USER_CONTENT: request.query, TOP_K: top_k}
        )
        endpoint = await self.endpoint(request)
        try:
            result = await call_tool(
                endpoint,
                request.allowlist,
                config.tool_name,
                arguments,
                max_response_bytes=config.response_limit,
            )
        except McpTimeout as error:
            raise BackendTimeout(str(error)) from error
        except McpError as error:
            raise BackendError(str(error)) from error
        if result.is_error:
            raise BackendError(
                f"MCP tool {config.tool_name!r} of {config.server_name!r} failed: "
                f"{error_text(result)}"
            )
        hits = hits_of(result, f"mcp:{config.server_name}")
        if recall is not None:
            hits = [hit for hit in hits if hit.score >= recall.min_similarity]
        return hits[:top_k]
