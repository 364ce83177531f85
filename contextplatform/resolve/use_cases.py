"""The operations every entry point runs (the REST API, the admin's preview, the gateway), each
one function, so that they behave the same whoever calls them. Entry points parse and present;
everything a call does to the tenant's data happens here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from contextplatform.core.errors import ApiError
from contextplatform.core.estimation import TokenEstimator
from contextplatform.deployments.pricing import Price
from contextplatform.protocols.usage import ProviderUsage
from contextplatform.replay.models import ReplayRecord
from contextplatform.replay.usage_records import apply_usage
from contextplatform.replay.usage_records import record_usage as record_usage_in_replay
from contextplatform.resolve import modes
from contextplatform.resolve.chat import ChatFormat, ChatRequest
from contextplatform.resolve.lazy_sources import MAX_QUERY_CHARS, SearchResult, render_passages
from contextplatform.resolve.pipeline import ResolveRequest, resolve
from contextplatform.resolve.prewarm import NOT_PREWARMABLE, Prewarmed, logger
from contextplatform.resolve.resolver import Resolution
from contextplatform.resolve.turns import complete_turn, record_answer
from contextplatform.routes.configuration.schema import RouteSpec
from contextplatform.routes.selectors import LoadedRoute
from sources.base import ContextRequest, ContextSource
from sources.prewarm import ttl_seconds

if TYPE_CHECKING:
    from tenants.models import Tenant


@dataclass(frozen=True)
class ResolveCall:
    """One request for context, as an entry point received it."""

    tenant: Tenant
    route: str
    request_body: dict[str, Any]
    user: str | None = None
    session: str | None = None
    chat_format: ChatFormat | None = None
    # The request's say on the memory write: True asks for it, False opts out, None is silent.
    store_memory: bool | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # The route, when the entry point already read it (the gateway checks its deployment first).
    loaded: LoadedRoute | None = None
    # The entry point answers the model's calls of the platform's own tools (the gateway does).
    serves_tools: bool = False
    # The request as the entry point already parsed it (the gateway): not parsed again.
    chat: ChatRequest | None = None
    # The entry point completes the call itself (the gateway): the replay record is written once,
    # when ``finish_turn`` is given the answer, instead of at resolve.
    defer_replay: bool = False
    # The API key that made the call, for the record (spend per key).
    key_id: int | None = None


def tenant_request(tenant: Tenant, **fields: Any) -> ResolveRequest:
    """A pipeline request on ``tenant``'s behalf: in its schema, under its outbound allow-list."""
    return ResolveRequest(
        tenant_schema=tenant.schema_name, allowlist=tuple(tenant.outbound_allowlist), **fields
    )


def resolve_context(call: ResolveCall) -> Resolution:
    """Resolve, record, refuse with 503 when a blocking source failed, and start the turn: the
    user's message lands in the session and each source kind queues what it does after the
    response (memory's write). REST POST /resolve and the gateway."""
    tenant = call.tenant
    # A call's fields are the request's, named alike; the tenant gives its schema, allow-list and
    # whether content is captured.
    asked = {
        field.name: getattr(call, field.name) for field in fields(call) if field.name != "tenant"
    }
    run = resolve(
        tenant_request(tenant, capture_content=tenant.capture_content, **asked),
        modes.LIVE,
    )
    resolution = run.resolution
    assert resolution is not None
    refusal = resolution.refusal()
    if refusal is not None:
        if resolution.pending_replay is not None:
            resolution.pending_replay.submit()
        raise refusal
    return resolution


def count_request(call: ResolveCall) -> Resolution:
    """A request resolved as the route would send it, to count its tokens (the gateway's
    ``POST /v1/messages/count_tokens``): its sources fetched, its context injected and compressed,
    no judge asked (the local judge scores) and nothing written: no record, no session message,
    no memory, no cache. Refused with 503 when a blocking source failed, as the call would be."""
    tenant = call.tenant
    asked = {
        field.name: getattr(call, field.name)
        for field in fields(call)
        if field.name not in ("tenant", "defer_replay", "key_id")
    }
    run = resolve(tenant_request(tenant, **asked), modes.COUNT)
    resolution = run.resolution
    assert resolution is not None
    refusal = resolution.refusal()
    if refusal is not None:
        raise refusal
    return resolution


def preview_resolve(
    *,
    tenant: Tenant,
    route: str,
    request_body: dict[str, Any],
    user: str | None,
    session: str | None,
    chat_format: ChatFormat | None,
) -> Resolution:
    """The route admin's Preview: a real resolve of a sample request that records nothing."""
    run = resolve(
        tenant_request(
            tenant,
            route=route,
            request_body=request_body,
            user=user,
            session=session,
            chat_format=chat_format,
        ),
        modes.PREVIEW,
    )
    assert run.resolution is not None
    return run.resolution


def rerun(*, tenant: Tenant, record: ReplayRecord, spec: RouteSpec | None = None) -> Resolution:
    """A recorded request (its captured ``request_body``) resolved again against the route's
    current configuration, or ``spec`` (a draft), reading history and memories as they stood when
    it was recorded. Writes nothing: no record, no session message, no memory or its strength."""
    if record.request_body is None:
        raise ApiError(
            "conflict",
            f"resolve {record.id!r} kept no request to run again: its tenant's capture_content "
            "was off when it was recorded",
            status=409,
        )
    run = resolve(
        tenant_request(
            tenant,
            route=record.route,
            request_body=record.request_body,
            user=record.user_id or None,
            session=record.session_key or None,
            chat_format=record.format or None,  # type: ignore[arg-type]
            spec=spec,
            as_of=record.created_at,
            variant=record.variant or None,  # the arm the record ran
        ),
        modes.RERUN,
    )
    assert run.resolution is not None
    return run.resolution


def prewarm_session(*, tenant: Tenant, route_name: str, user: str, session: str) -> dict[str, Any]:
    """Read the route's prewarmable sources ahead for ``user`` in ``session``; the answer lists
    every enabled source of the route with what became of it."""
    run = resolve(
        tenant_request(
            tenant,
            route=route_name,
            user=user,
            session=session,
        ),
        modes.PREWARM,
    )
    request = run.request
    assert request is not None
    lines = {id(line.source): line for line in run.prewarmed}
    report = [
        lines[id(s)] if id(s) in lines else Prewarmed(s, "skipped", reason=NOT_PREWARMABLE)
        for s in run.sources
    ]
    logger.info(
        "context_prewarm",
        extra={
            "request_id": request.request_id,
            "tenant": tenant.schema_name,
            "route": request.route,
            "sources": sum(1 for line in run.prewarmed if line.status == "prewarmed"),
        },
    )
    return {
        "route": request.route,
        "session": session,
        "user": user,
        "ttl_seconds": ttl_seconds(),
        "sources": [line.report() for line in report],
    }


def search_source(
    source: ContextSource,
    query: str,
    request: ContextRequest,
    estimator: TokenEstimator,
) -> SearchResult:
    """One call of a lazy source's tool (the gateway serves it): the source fetched for ``query``
    with its own timeout, match block and limits, exactly as a resolve fetches it, for the
    resolve whose ``request`` offered it. Runs on the tenant's database thread."""
    run = resolve(
        ResolveRequest(
            tenant_schema=request.tenant,
            route=request.route,
            query=query[:MAX_QUERY_CHARS],
            source=source,
            base=request,
            estimator=estimator,
        ),
        modes.SEARCH,
    )
    (outcome,) = run.outcomes
    return SearchResult(content=render_passages(outcome), outcome=outcome)


def finish_turn(
    *,
    tenant: Tenant,
    resolve_id: str,
    response: Any | None,
    usage: ProviderUsage | None = None,
    resolution: Resolution | None = None,
    first_call: ProviderUsage | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    session_budget: dict[str, Any] | None = None,
    attempts: list[dict[str, Any]] | None = None,
    price: Price | None = None,
    call_ms: float | None = None,
) -> dict[str, Any]:
    """The model's answer to a resolve, for REST (POST /resolve/{id}/response) and the gateway
    alike: stored in the session, handed to the after-response hooks of the source kinds
    (memory's write), the provider's ``usage`` recorded beside the estimate and moving the
    deployment's calibration (``first_call``'s, when the answer took follow-up calls). Idempotent
    per resolve: a repeated answer changes nothing (``duplicate``).

    ``resolution``: the gateway's own resolve, whose replay record was left pending; the answer,
    usage, served ``tool_calls`` and ``session_budget`` go into it and it is submitted, once
    (``response`` None when the call ended without an answer), with the ``attempts`` of the
    route's deployments (the deployment that answered named beside them), the usage priced at
    ``price`` (the answering deployment's) and the whole call's ``call_ms``. Only the kinds whose after-resolve
    hook queued something hear the answer. Without it (REST), the resolve's record is awaited
    (another worker may still be writing it), locked and completed; a refused resolve answers 409.
    The session's message is written before this returns (the conversation's next call reads it).
    """
    if resolution is None:
        result = complete_turn(
            record_id=resolve_id, response=response, capture_content=tenant.capture_content
        )
        if usage is not None and not result["duplicate"]:
            record_usage(resolve_id=resolve_id, usage=usage, first_call=first_call)
        return result
    pending = resolution.pending_replay
    duplicate = {"id": resolve_id, "status": "accepted", "duplicate": True, "messages_written": 0}
    if pending is None or pending.submitted:
        return duplicate
    record = pending.record
    calibration = None
    written, acted = 0, False
    try:
        if response is not None and record.status != "refused":
            written, acted = record_answer(
                record,
                response,
                capture_content=tenant.capture_content,
                kinds=dict.fromkeys(resolution.answer_kinds),
            )
        if attempts:
            record.tokens = {**(record.tokens or {}), **attempts_record(attempts)}
        answered_by = (record.tokens or {}).get("answered_by")
        record.call_ms = call_ms
        if answered_by:
            record.deployment = answered_by
        if usage is not None:
            calibration = apply_usage(
                record, usage, first_call, price=price, deployment=answered_by
            )
            if answered_by is not None and answered_by != (record.tokens or {}).get("deployment"):
                # A fallback answered: the estimate was counted for the first deployment.
                calibration = None
        if tool_calls:
            record.tool_calls = list(tool_calls)
        if session_budget is not None:
            # The reservation beside the charge (the provider's report, the bill): an auditor
            # sees which calls went past what they held, and by how much.
            record.tokens = {**(record.tokens or {}), "session_budget": session_budget}
    finally:
        # The record and the calibration are written in the writer's thread: nothing the
        # caller waits for.
        pending.submit(after=calibration)
    return {
        "id": resolve_id,
        "status": "accepted",
        "duplicate": False,
        "messages_written": written,
        "memory_write": "queued" if acted else "none",
    }


def attempts_record(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """The gateway's attempts as the record's ``tokens`` keeps them: each deployment tried, and
    the one that answered (None when none did)."""
    last = attempts[-1] if attempts else {}
    answered = last.get("deployment") if last.get("outcome") == "answered" else None
    return {"attempts": list(attempts), "answered_by": answered}


def record_usage(
    *, resolve_id: str, usage: ProviderUsage, first_call: ProviderUsage | None = None
) -> bool:
    """The provider's reported usage of a resolve's answer: into its replay record beside the
    estimate, and into its deployment's token calibration. Once per resolve. ``first_call``: when
    the answer took follow-up calls (served tools), the first call's usage, the one the estimate
    is of, which alone moves the calibration."""
    return record_usage_in_replay(resolve_id=resolve_id, usage=usage, first_call=first_call)
