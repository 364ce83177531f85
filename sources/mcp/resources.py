"""``mcp_resources`` (Relay-E): the named resources of an MCP server, one item per content.

``{"type": "mcp_resources", "name": "crm", "server": "crm",
"resources": ["crm://customers/{user}", "crm://status"]}``. A resource is read as written, or
filled in first: ``{user}``, ``{session}`` and ``{query}`` (the request's user, session and query),
each URL-encoded whole, so a value never reaches another path segment or another user's resource.
A resource that needs a value the request does not have (no user, say) is skipped and the notes
say why: it is never read with something else in its place.

Each text content (JSON included, compacted) is an item whose citation is its URI: in front of
its text (``[Resource: crm://status] ...``, as a document's title in a rag item), its title and
``metadata.uri``; blob contents are skipped with a note. Every item is cut at
``max_resource_chars`` and all of them together at ``max_total_chars``; the server's answers are
read up to ``max_response_bytes`` in all. Any error (an unknown server, the allow-list, a resource
the server cannot read, the deadline) fails the source, under its ``on_failure``.

Pre-warm (``POST /api/v1/sessions/{session}/prewarm``) reads ahead the resources that do not read
the turn's query (the user's, the session's, fixed ones); the session's next resolve serves them as
read and reads the query's at the turn.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal
from urllib.parse import quote

import mcp_types as types
from pydantic import Field, field_validator

from contextplatform.core.outbound.bounded import DEFAULT_MAX_RESPONSE_BYTES
from sources.base import (
    ContextItem,
    ContextRequest,
    ContextSource,
    PrewarmSkipped,
    SourceFailed,
    SourceResult,
    SourceSettings,
    register_source_kind,
)
from sources.mcp.client import McpError, endpoint_for, read_resources
from sources.mcp.selectors import Endpoint, HeadersUnreadable, UnknownServer
from sources.mcp_config import MCP_SERVER_NAME_PATTERN

PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
FILLED = ("user", "session", "query")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
MAX_RESOURCES = 20
MAX_RESOURCE_TEMPLATE_CHARS = 2000
MAX_QUERY_CHARS = 2000  # of the query filled into a URI
CUT = "…"


def placeholders(template: str) -> list[str]:
    return PLACEHOLDER.findall(template)


def template_problem(template: str) -> str | None:
    if not template or len(template) > MAX_RESOURCE_TEMPLATE_CHARS:
        return f"a resource is 1 to {MAX_RESOURCE_TEMPLATE_CHARS} characters"
    if not SCHEME.match(template):
        return f"{template!r} is not a URI (it needs a scheme, such as crm://)"
    if any(c.isspace() or ord(c) < 32 for c in template):
        return f"{template!r} contains spaces or control characters"
    for name in placeholders(template):
        if name not in FILLED:
            return (
                f"{template!r}: {{{name}}} is not filled in (use {{user}}, {{session}}, {{query}})"
            )
    if "{" in PLACEHOLDER.sub("", template) or "}" in PLACEHOLDER.sub("", template):
        return f"{template!r} has an unmatched brace"
    return None


class McpResourcesSettings(SourceSettings):
    type: Literal["mcp_resources"] = "mcp_resources"
    priority: int = Field(default=55, ge=0, le=1000)
    server: str = Field(pattern=MCP_SERVER_NAME_PATTERN, description="an MCP server's name")
    resources: list[str] = Field(
        min_length=1,
        max_length=MAX_RESOURCES,
        description="resource URIs; {user}, {session} and {query} are filled in, URL-encoded",
    )
    max_resource_chars: int = Field(default=8000, ge=100, le=1_000_000)
    max_total_chars: int = Field(default=20_000, ge=100, le=1_000_000)
    max_response_bytes: int = Field(
        default=DEFAULT_MAX_RESPONSE_BYTES, ge=1024, le=64 * 1024 * 1024
    )

    @field_validator("resources")
    @classmethod
    def filled_templates(cls, value: list[str]) -> list[str]:
        for template in value:
            problem = template_problem(template)
            if problem:
                raise ValueError(problem)
        if len(set(value)) != len(value):
            raise ValueError("a resource is named twice")
        return value


def fill(template: str, request: ContextRequest) -> tuple[str | None, str | None]:
    """(the URI, None), or (None, why it is skipped) when the request lacks a value it needs."""
    query = request.query.strip()[:MAX_QUERY_CHARS]
    values = {"user": request.user or "", "session": request.session or "", "query": query}
    for name in placeholders(template):
        if not values[name]:
            return None, f"needs {{{name}}}: the request has no {name}"
    return PLACEHOLDER.sub(lambda m: quote(values[m.group(1)], safe=""), template), None


def warmed(value: Any) -> types.ReadResourceResult | None:
    """A pre-warmed result read back; None for one that is missing or no longer reads."""
    if not isinstance(value, dict):
        return None
    try:
        return types.ReadResourceResult.model_validate(value)
    except ValueError:
        return None


def is_json(mime_type: str) -> bool:
    base = mime_type.split(";", 1)[0].strip().lower()
    return base == "application/json" or base.endswith("+json")


def compact_json(text: str) -> str:
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return text  # labelled JSON, but not: passed on as the text it is


def render(uri: str, text: str) -> str:
    """The content with its citation in front, as the rag kind puts a document's title."""
    return f"[Resource: {uri}] {text}"


@register_source_kind
class McpResourcesSource(ContextSource):
    type = "mcp_resources"
    Settings = McpResourcesSettings
    prewarmable = True  # the resources that need no {query}: see warmable

    @property
    def mcp(self) -> McpResourcesSettings:
        return self.settings  # type: ignore[return-value]

    def notes_on_timeout(self) -> dict[str, Any]:
        return {"server": self.mcp.server}

    async def fetch(self, request: ContextRequest) -> SourceResult:
        return await self.fetch_with(request, {})

    # --- pre-warm ----------------------------------------------------------------------------

    def warmable(self) -> list[str]:
        """The resources read ahead: those that do not read the turn's query (the user's, the
        session's, and fixed ones)."""
        return [t for t in self.mcp.resources if "query" not in placeholders(t)]

    async def prewarm(self, request: ContextRequest) -> dict[str, Any]:
        """Each warmable resource the request can fill in, read now: ``{uri: its result}`` (as
        JSON, so the cache holds no SDK object). Served at the next resolve of the same user and
        session, which fills in the same URIs."""
        planned = [uri for t in self.warmable() if (uri := fill(t, request)[0]) is not None]
        if not planned:
            raise PrewarmSkipped(
                "no resource reads ahead: each needs {query}, or a value the request lacks"
            )
        try:
            endpoint = await self.endpoint(request)
            results = await read_resources(
                endpoint,
                request.allowlist,
                planned,
                max_response_bytes=self.mcp.max_response_bytes,
            )
        except McpError as error:
            raise SourceFailed(error, {"server": self.mcp.server}) from error
        return {
            uri: result.model_dump(mode="json", by_alias=True)
            for uri, result in zip(planned, results, strict=True)
        }

    async def fetch_prewarmed(self, request: ContextRequest, warm: Any) -> SourceResult:
        return await self.fetch_with(request, warm if isinstance(warm, dict) else {})

    async def fetch_with(self, request: ContextRequest, warm: dict[str, Any]) -> SourceResult:
        """The fetch, serving the resources in ``warm`` (by URI) as they were read ahead and
        reading the others (the query's) now."""
        settings = self.mcp
        notes: dict[str, Any] = {"server": settings.server}
        planned: list[tuple[str, str]] = []
        trace: list[dict[str, Any]] = []
        skipped: list[dict[str, str]] = []
        for template in settings.resources:
            uri, reason = fill(template, request)
            if uri is None:
                assert reason is not None
                skipped.append({"resource": template, "reason": reason})
                trace.append({"resource": template, "status": "skipped", "reason": reason})
            else:
                planned.append((template, uri))
        if skipped:
            notes["skipped"] = skipped
        if not planned:
            return SourceResult(trace=trace, notes=notes)
        served = {uri: warmed(warm.get(uri)) for _, uri in planned}
        live = [uri for uri, result in served.items() if result is None]
        if len(live) < len(planned):
            notes["prewarmed"] = sorted(uri for uri, result in served.items() if result)
        if live:
            try:
                endpoint = await self.endpoint(request)
                notes["transport"] = endpoint.transport
                read = await read_resources(
                    endpoint,
                    request.allowlist,
                    live,
                    max_response_bytes=settings.max_response_bytes,
                )
            except McpError as error:
                raise SourceFailed(error, notes) from error
            served.update(zip(live, read, strict=True))
        results = [result for _, uri in planned if (result := served[uri]) is not None]
        items = self.items_of(planned, results, trace, notes)
        return SourceResult(items, trace, notes)

    async def endpoint(self, request: ContextRequest) -> Endpoint:
        name, schema = self.mcp.server, request.tenant
        try:
            return await endpoint_for(name, schema, self.timeout_seconds)
        except (UnknownServer, HeadersUnreadable) as error:
            raise McpError(str(error)) from None

    def items_of(
        self,
        planned: list[tuple[str, str]],
        results: list[types.ReadResourceResult],
        trace: list[dict[str, Any]],
        notes: dict[str, Any],
    ) -> list[ContextItem]:
        settings = self.mcp
        items: list[ContextItem] = []
        used = 0
        blobs: list[str] = []
        truncated: list[str] = []
        left_out: list[str] = []
        for (template, uri), result in zip(planned, results, strict=True):
            kept = 0
            for content in result.contents:
                cited = str(content.uri)
                if not isinstance(content, types.TextResourceContents):
                    blobs.append(cited)
                    continue
                mime_type = content.mime_type or ""
                text = compact_json(content.text) if is_json(mime_type) else content.text
                if not text.strip():
                    continue
                room = min(settings.max_resource_chars, settings.max_total_chars - used)
                if room <= 0:
                    left_out.append(cited)
                    continue
                if len(text) > room:
                    text = text[: max(0, room - len(CUT))] + CUT  # the mark counts too
                    truncated.append(cited)
                used += len(text)
                kept += 1
                items.append(
                    self.item(
                        render(cited, text),
                        title=cited,
                        metadata={
                            "uri": cited,
                            "mime_type": mime_type,
                            "resource": template,
                            "server": settings.server,
                        },
                    )
                )
            trace.append(
                {
                    "resource": template,
                    "uri": uri,
                    "status": "read",
                    "contents": len(result.contents),
                    "items": kept,
                }
            )
        notes["read"] = len(planned)
        if blobs:
            notes["blobs_skipped"] = blobs  # binary contents are no context for a model
        if truncated:
            notes["truncated"] = truncated
        if left_out:
            notes["over_total_chars"] = left_out
        return items
