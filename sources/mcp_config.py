"""The written forms of MCP configuration, validated with pydantic (no database, no network):
an MCP server as the API and the admin take it, and the ``mcp`` RAG backend's ``backend_config``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contextplatform.core.http_headers import checked_headers
from contextplatform.core.http_urls import checked_http_url
from contextplatform.core.outbound.bounded import DEFAULT_MAX_RESPONSE_BYTES

# The same names as deployments, routes and recipes.
MCP_SERVER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"

MAX_URL_CHARS = 2000
MAX_HEADERS = 32
MAX_HEADER_VALUE_CHARS = 8192  # bearer tokens and JWTs run long
MIN_TIMEOUT_MS = 100
MAX_TIMEOUT_MS = 120_000  # a source's own timeout cannot be longer
DEFAULT_TIMEOUT_MS = 5000
MAX_TOOL_ARGUMENT_CHARS = 20_000

# Set by the HTTP client or the MCP transport for each request; a stored value would be
# overwritten or would break the protocol.
TRANSPORT_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "accept",
        "accept-encoding",
        "proxy-authorization",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    }
)

# Fields a representation carries that a write ignores (a GET body posted back is accepted).
READ_ONLY_FIELDS = ("headers_set", "created_at", "updated_at")

# The placeholder of the latest user message in ``tool_arguments``, as vLLM Semantic Router
# writes it; ``${top_k}`` is the number of documents the match block asks for.
USER_CONTENT = "${user_content}"
TOP_K = "${top_k}"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def checked_url(value: str) -> str:
    """An http(s) URL with a host and nothing that belongs elsewhere (credentials, fragment)."""
    return checked_http_url(
        value,
        scheme_hint=" (Streamable HTTP; stdio servers are the platform's, in MCP_STDIO_SERVERS)",
        credentials_hint="send them in headers, stored encrypted",
    )


REFUSED_HEADERS = dict.fromkeys(TRANSPORT_HEADERS, "is set by the MCP transport for each request")


class McpServerSpec(Strict):
    """An MCP server as written. ``headers`` is write-only: absent on a PUT keeps the stored
    headers, an object replaces them all, ``null`` or ``{}`` removes them."""

    name: str = Field(pattern=MCP_SERVER_NAME_PATTERN)
    url: str = Field(min_length=1, max_length=MAX_URL_CHARS, description="Streamable HTTP endpoint")
    headers: dict[str, str] | None = Field(
        default=None, max_length=MAX_HEADERS, description="write-only: stored encrypted"
    )
    timeout_ms: int = Field(default=DEFAULT_TIMEOUT_MS, ge=MIN_TIMEOUT_MS, le=MAX_TIMEOUT_MS)

    @field_validator("url")
    @classmethod
    def http_url(cls, value: str) -> str:
        return checked_url(value)

    @field_validator("headers")
    @classmethod
    def plain_headers(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return checked_headers(
            value,
            refused=REFUSED_HEADERS,
            max_value_chars=MAX_HEADER_VALUE_CHARS,
            empty_allowed=False,
        )


class McpBackendConfig(Strict):
    """``backend: mcp``: one tool of an MCP server answers the query with documents."""

    server_name: str = Field(pattern=MCP_SERVER_NAME_PATTERN)
    tool_name: str = Field(min_length=1, max_length=128, pattern=r"^[^\s]+$")
    tool_arguments: dict[str, Any] = Field(
        default_factory=lambda: {"query": USER_CONTENT},
        description='"${user_content}" is the latest user message, "${top_k}" the documents asked',
    )
    max_response_bytes: int = Field(default=DEFAULT_MAX_RESPONSE_BYTES, ge=0, le=64 * 1024 * 1024)

    @field_validator("tool_arguments")
    @classmethod
    def bounded_arguments(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(value)) > MAX_TOOL_ARGUMENT_CHARS:
            raise ValueError(f"longer than {MAX_TOOL_ARGUMENT_CHARS} characters as JSON")
        return value

    @property
    def response_limit(self) -> int:
        return self.max_response_bytes or DEFAULT_MAX_RESPONSE_BYTES
