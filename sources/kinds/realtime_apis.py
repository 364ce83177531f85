"""``realtime_apis``: live values through HTTP connectors (Relay-E), priority 70 by default.

Each connector is one HTTP call, templated from the request's user, session and query
(``sources.realtime_templates``), through the tenant's outbound guard (every redirect hop
checked, the answer read up to ``max_response_bytes``; connections kept per event loop and
allow-list, no cookies kept: ``sources.kinds.realtime_clients``), its JSON answer mapped into items by a
small JSON path (``sources.json_select``). Every item names its connector: ``[balance] ...``
in the content, the connector as the item's title.

The connectors run at once, inside the source's deadline: each under its own ``timeout_ms`` or
what is left of the deadline (a hair less, so the source still answers with the connectors that
made it), whichever is shorter. A failing connector is a note and the others still count; when
every connector that ran failed, the source failed (``timeout`` when each of them timed out).
A connector needing a value the request lacks (no user, no session, an empty query) is skipped.

Answers may be cached per user for ``cache_ttl_seconds`` (0: never) in Django's cache, keyed by
the tenant's schema, user, session, source, connector and the request as sent (URL, headers and
body rendered), so no user is ever served another's value; previews read live.

Pre-warm (``POST /api/v1/sessions/{session}/prewarm``) reads ahead the connectors that need no
``{query}`` and may be cached (``cache_ttl_seconds`` > 0); the next resolve of that session serves
each of their answers while it is younger than that connector's ``cache_ttl_seconds`` (the
operator's word on how stale a live value may be), and calls the others live.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import httpx
from django.core.cache import cache
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from contextplatform.core.outbound.bounded import (
    DEFAULT_MAX_RESPONSE_BYTES,
    ResponseTooLarge,
    read_bounded,
)
from contextplatform.core.outbound.httpx_client import refuse_constant
from contextplatform.core.outbound.policy import OutboundError
from sources import fetch_deadline, json_select
from sources import realtime_templates as templates
from sources.base import (
    ContextRequest,
    ContextSource,
    PrewarmSkipped,
    SourceFailed,
    SourceResult,
    SourceSettings,
    register_source_kind,
)
from sources.fetch import failure_text
from sources.kinds import realtime_clients
from sources.secret_settings import (
    SecretHeaders,
    SecretUnavailable,
    SecretValue,
    header_paths,
    register_secret_locator,
    revealed_headers,
)

logger = logging.getLogger("contextplatform.sources")

DEFAULT_CONNECTOR_RESPONSE_BYTES = 1024 * 1024
MAX_CONNECTORS = 16
CACHE_PREFIX = "realtime:"
# A connector bound by the source's deadline gives up this much before it (at most), so the
# source can still answer with the connectors that finished instead of being cut whole.
DEADLINE_MARGIN_S = 0.025


class Connector(BaseModel):
    """One HTTP call of the source (docs/configuration.md, "Live values"); its templates are
    checked here, when the route is written."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,47}$")
    method: Literal["GET", "POST"] = "GET"
    url: str = Field(min_length=1, max_length=2000)
    # Values write-only, stored encrypted (sources.secret_settings): every value, templated or not.
    headers: SecretHeaders = Field(default_factory=dict, max_length=32)
    body: Any = None
    select: str = Field(default="$", max_length=500)
    timeout_ms: int | None = Field(
        default=None, ge=1, le=120_000, description="blank: the source's deadline"
    )
    cache_ttl_seconds: int = Field(default=0, ge=0, le=3600, description="0: no cache")
    max_items: int = Field(default=20, ge=1, le=200)
    max_response_bytes: int = Field(
        default=DEFAULT_CONNECTOR_RESPONSE_BYTES, ge=1, le=DEFAULT_MAX_RESPONSE_BYTES
    )

    @field_validator("method", mode="before")
    @classmethod
    def upper_method(cls, method: Any) -> Any:
        return method.upper() if isinstance(method, str) else method

    @field_validator("url")
    @classmethod
    def valid_url(cls, url: str) -> str:
        templates.check_url(url)
        return url

    @field_validator("headers")
    @classmethod
    def valid_headers(cls, headers: dict[str, SecretValue]) -> dict[str, SecretValue]:
        # The templates of values written now; a stored value was checked when it was written.
        templates.check_headers(
            {name: value.plain for name, value in headers.items() if value.plain is not None}
        )
        lowered = [name.lower() for name in headers]
        if len(set(lowered)) != len(lowered):
            raise ValueError("a header is named twice (header names ignore case)")
        return headers

    @field_validator("select")
    @classmethod
    def valid_select(cls, select: str) -> str:
        json_select.parse(select)
        return select

    @model_validator(mode="after")
    def valid_body(self) -> Connector:
        if self.body is not None and self.method == "GET":
            raise ValueError("body: a GET connector sends no body (use POST)")
        try:
            templates.body_fields(self.body)
        except templates.TemplateError as error:
            raise ValueError(f"body: {error}") from None
        size = len(json.dumps(self.body))
        if size > 64 * 1024:
            raise ValueError(f"body: {size} bytes of JSON, at most 65536")
        return self

    @property
    def fields(self) -> set[str]:
        """The request values this connector's templates need."""
        return (
            set(templates.fields_of(self.url))
            | self.header_fields()
            | templates.body_fields(self.body)
        )

    def header_fields(self) -> set[str]:
        try:
            return templates.check_headers(self.plain_headers)
        except SecretUnavailable:
            return set()  # the request is not built either: the connector fails, naming why

    @cached_property
    def plain_headers(self) -> dict[str, str]:
        """The header templates decrypted (once per loaded connector): a request is being built.
        ``SecretUnavailable`` when a stored value is readable by no configured key."""
        return revealed_headers(self.headers)


class RealtimeApisSettings(SourceSettings):
    type: Literal["realtime_apis"] = "realtime_apis"
    priority: int = Field(default=70, ge=0, le=1000)
    connectors: list[Connector] = Field(min_length=1, max_length=MAX_CONNECTORS)

    @model_validator(mode="after")
    def unique_names(self) -> RealtimeApisSettings:
        names = [connector.name for connector in self.connectors]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"connectors: {', '.join(twice)} named more than once")
        return self


class ConnectorError(Exception):
    """One connector's call failed (refused, unreachable, an HTTP error, too large, not JSON)."""


class ConnectorTimeout(ConnectorError, TimeoutError):
    """One connector ran out of time."""


class ConnectorsFailed(Exception):
    """Every connector that ran failed."""


class ConnectorsTimedOut(ConnectorsFailed, TimeoutError):
    """Every connector that ran timed out: the source reports ``timeout``."""


@dataclass(frozen=True)
class Prepared:
    """A connector's request as it is sent (the values filled in)."""

    method: str
    url: str
    headers: dict[str, str]
    body: Any

    def identity(self) -> dict[str, Any]:
        return {"method": self.method, "url": self.url, "headers": self.headers, "body": self.body}


@dataclass
class ConnectorOutcome:
    name: str
    status: str  # ok, empty, failed, timeout, skipped
    values: list[tuple[str, str]] = field(default_factory=list)  # (path, text) per item
    ms: float = 0.0
    error: str | None = None
    cache: str | None = None  # hit, miss (None: not cached)
    prewarmed: bool = False

    def note(self) -> dict[str, Any]:
        note: dict[str, Any] = {"status": self.status, "items": len(self.values), "ms": self.ms}
        if self.cache:
            note["cache"] = self.cache
        if self.prewarmed:
            note["prewarmed"] = True
        if self.error:
            note["error"] = self.error
        return note


def values_of(request: ContextRequest) -> dict[str, str | None]:
    return {"user": request.user, "session": request.session, "query": request.query or None}


def prepare(connector: Connector, request: ContextRequest) -> Prepared | str:
    """The request to send, or why it cannot be sent (a value it needs is missing)."""
    values = values_of(request)
    missing = sorted(name for name in connector.fields if not values.get(name))
    if missing:
        return f"needs {', '.join('{' + name + '}' for name in missing)}: the request has none"
    filled = {name: value for name, value in values.items() if value}
    headers = templates.render_headers(connector.plain_headers, filled)
    if not any(name.lower() == "accept" for name in headers):
        headers["Accept"] = "application/json"
    return Prepared(
        method=connector.method,
        url=templates.render_url(connector.url, filled),
        headers=headers,
        body=templates.render_body(connector.body, filled),
    )


def cache_key(request: ContextRequest, source: str, connector: Connector, sent: Prepared) -> str:
    payload = json.dumps(
        {
            "schema": request.tenant,
            "user": request.user,
            "session": request.session,
            "source": source,
            "connector": connector.name,
            "request": sent.identity(),
            "select": connector.select,
            "max_items": connector.max_items,
        },
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    return CACHE_PREFIX + hashlib.sha256(payload.encode()).hexdigest()


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def connector_seconds(connector: Connector) -> tuple[float, bool]:
    """The connector's bound, and whether the source's deadline (not its own timeout) sets it."""
    own = connector.timeout_ms / 1000 if connector.timeout_ms else None
    left = fetch_deadline.remaining()
    if left is None:
        return (own or 30.0), False
    margin = min(DEADLINE_MARGIN_S, left * 0.1)
    if own is not None and own <= left - margin:
        return own, False
    return max(0.0, left - margin), True


async def read_capped(response: httpx.Response, limit: int) -> bytes:
    try:
        # aiter_bytes is decoded: the limit holds after decompression.
        return await read_bounded(response.aiter_bytes(), limit, headers=response.headers)
    except ResponseTooLarge as error:
        raise ConnectorError(str(error)) from error


async def call(connector: Connector, sent: Prepared, allowlist: tuple[str, ...]) -> Any:
    """The connector's JSON answer; ConnectorError / ConnectorTimeout otherwise. Messages name
    the connector's host at most, never the path or query (they hold the user's values)."""
    seconds, by_deadline = connector_seconds(connector)
    said = (
        f"timed out at the source's deadline ({seconds * 1000:.0f} ms left)"
        if by_deadline
        else f"timed out after {connector.timeout_ms} ms"
    )
    try:
        async with asyncio.timeout(seconds):  # the whole exchange, every redirect and read
            client = await realtime_clients.client_for(allowlist)
            async with client.stream(
                sent.method,
                sent.url,
                headers=sent.headers,
                json=sent.body if sent.method != "GET" else None,
                timeout=max(seconds, 0.001),
            ) as response:
                body = await read_capped(response, connector.max_response_bytes)
    except OutboundError as error:
        raise ConnectorError(str(error)) from error
    except (TimeoutError, httpx.TimeoutException) as error:
        raise ConnectorTimeout(said) from error
    except httpx.HTTPError as error:
        raise ConnectorError(f"unreachable: {type(error).__name__}") from error
    if not response.is_success:
        raise ConnectorError(f"answered HTTP {response.status_code}")
    try:
        return json.loads(body, parse_constant=refuse_constant)
    except (ValueError, UnicodeDecodeError):
        raise ConnectorError("answered something that is not JSON") from None


def items_of(connector: Connector, answer: Any) -> list[tuple[str, str]]:
    matches = json_select.select(answer, json_select.parse(connector.select))
    return [(path, as_text(value)) for path, value in matches[: connector.max_items]]


async def cached(key: str) -> list[tuple[str, str]] | None:
    try:
        found = await cache.aget(key)
    except Exception as error:  # a cache that does not answer is a miss, not a failed connector
        logger.warning("realtime_cache_unavailable", extra={"err": failure_text(error)})
        return None
    return [(path, text) for path, text in found] if isinstance(found, list) else None


async def remember(key: str, values: list[tuple[str, str]], ttl_seconds: int) -> None:
    try:
        await cache.aset(key, [list(pair) for pair in values], ttl_seconds)
    except Exception as error:  # not remembered: the next resolve asks the service again
        logger.warning("realtime_cache_unavailable", extra={"err": failure_text(error)})


async def run_connector(
    connector: Connector, request: ContextRequest, source: str
) -> ConnectorOutcome:
    started = time.perf_counter()
    outcome = ConnectorOutcome(name=connector.name, status="skipped")
    try:
        sent = prepare(connector, request)
        if isinstance(sent, str):
            outcome.error = sent
            return outcome
        key = None
        if connector.cache_ttl_seconds and request.use_cache:
            key = cache_key(request, source, connector, sent)
            hit = await cached(key)
            if hit is not None:
                outcome.values, outcome.cache = hit, "hit"
                outcome.status = "ok" if hit else "empty"
                return outcome
            outcome.cache = "miss"
        answer = await call(connector, sent, request.allowlist)
        outcome.values = items_of(connector, answer)
        outcome.status = "ok" if outcome.values else "empty"
        if key is not None:
            await remember(key, outcome.values, connector.cache_ttl_seconds)
    except ConnectorTimeout as error:
        outcome.status, outcome.error = "timeout", str(error)
    except (ConnectorError, templates.RenderError, SecretUnavailable) as error:
        outcome.status, outcome.error = "failed", str(error)
    finally:
        outcome.ms = round((time.perf_counter() - started) * 1000, 3)
    return outcome


def connector_header_paths(source: dict[str, Any]) -> list[tuple[str | int, ...]]:
    """Where a ``realtime_apis`` source (as written) keeps its secrets: each connector's header
    values."""
    connectors = source.get("connectors")
    if not isinstance(connectors, list):
        return []
    return [
        path
        for index, connector in enumerate(connectors)
        if isinstance(connector, dict)
        for path in header_paths(connector.get("headers"), ("connectors", index, "headers"))
    ]


register_secret_locator("realtime_apis", connector_header_paths)


@register_source_kind
class RealtimeApisSource(ContextSource):
    type = "realtime_apis"
    Settings = RealtimeApisSettings
    default_priority = 70
    prewarmable = True  # the connectors that need no {query}: see warmable

    @property
    def realtime(self) -> RealtimeApisSettings:
        return self.settings  # type: ignore[return-value]

    async def fetch(self, request: ContextRequest) -> SourceResult:
        return await self.fetch_with(request, {})

    async def fetch_with(self, request: ContextRequest, warm: dict[str, Any]) -> SourceResult:
        """The fetch, serving the pre-warmed answers in ``warm`` that are still fresh."""
        outcomes = await asyncio.gather(
            *(self.outcome(connector, request, warm) for connector in self.realtime.connectors)
        )
        notes: dict[str, Any] = {"connectors": {o.name: o.note() for o in outcomes}}
        ran = [o for o in outcomes if o.status != "skipped"]
        failed = [o for o in ran if o.status in {"failed", "timeout"}]
        if failed:
            notes["failed"] = [o.name for o in failed]
        if ran and len(failed) == len(ran):
            said = "; ".join(f"{o.name}: {o.error}" for o in failed)
            every_timeout = all(o.status == "timeout" for o in failed)
            error_type = ConnectorsTimedOut if every_timeout else ConnectorsFailed
            raise SourceFailed(error_type(f"every connector failed: {said}"), notes)
        items = [
            self.item(
                f"[{o.name}] {text}",
                title=o.name,
                metadata={"connector": o.name, "path": path},
            )
            for o in outcomes
            for path, text in o.values
        ]
        return SourceResult(items, notes=notes)

    async def outcome(
        self, connector: Connector, request: ContextRequest, warm: dict[str, Any]
    ) -> ConnectorOutcome:
        read = warm.get(connector.name)
        fresh = (
            isinstance(read, dict)
            and connector in self.warmable()
            and time.time() - float(read.get("at", 0)) < connector.cache_ttl_seconds
        )
        if fresh:
            assert isinstance(read, dict)
            values = [(str(path), str(text)) for path, text in read.get("values", [])]
            status = "ok" if values else "empty"
            return ConnectorOutcome(connector.name, status, values, prewarmed=True)
        return await run_connector(connector, request, self.name)

    # --- pre-warm ----------------------------------------------------------------------------

    def warmable(self) -> list[Connector]:
        """The connectors read ahead: no {query} in their templates, and cacheable."""
        return [
            connector
            for connector in self.realtime.connectors
            if connector.cache_ttl_seconds and "query" not in connector.fields
        ]

    async def prewarm(self, request: ContextRequest) -> dict[str, Any]:
        connectors = self.warmable()
        if not connectors:
            raise PrewarmSkipped(
                "no connector reads ahead: each needs {query} or caches nothing "
                "(cache_ttl_seconds 0)"
            )
        live = dataclasses.replace(request, use_cache=False)  # read now, not an older cached value
        outcomes = await asyncio.gather(
            *(run_connector(connector, live, self.name) for connector in connectors)
        )
        read_at = time.time()
        warm = {
            o.name: {"values": [list(pair) for pair in o.values], "at": read_at}
            for o in outcomes
            if o.status in {"ok", "empty"}
        }
        if not warm:
            said = "; ".join(f"{o.name}: {o.error}" for o in outcomes)
            raise ConnectorsFailed(f"no connector could be read ahead: {said}")
        return warm

    async def fetch_prewarmed(self, request: ContextRequest, warm: Any) -> SourceResult:
        return await self.fetch_with(request, warm if isinstance(warm, dict) else {})
