"""The operations every entry point runs (the REST API, the admin's preview, the gateway), each
one function, so that they behave the same whoever calls them. Entry points parse and present;
everything a call does to the tenant's data happens here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contextplatform.protocols.usage import ProviderUsage
from contextplatform.replay.usage_records import apply_usage
from contextplatform.replay.usage_records import record_usage as record_usage_in_replay
from contextplatform.resolve.chat import ChatFormat, ChatRequest
from contextplatform.resolve.resolver import Resolution, resolve
from contextplatform.resolve.turns import begin_turn, complete_turn, record_answer
from contextplatform.routes.selectors import LoadedRoute
from sources.base import ResolvedTurn

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
    # when ``finish_call`` is given the answer, instead of at resolve.
    defer_replay: bool = False


def resolve_context(call: ResolveCall) -> Resolution:
    """Resolve, record, refuse with 503 when a blocking source failed, and start the turn: the
    user's message lands in the session and each source kind queues what it does after the
    response (memory's write)."""
    tenant = call.tenant
    resolution = resolve(
        tenant_schema=tenant.schema_name,
        capture_content=tenant.capture_content,
        route_name=call.route,
        user=call.user,
        session=call.session,
        request_body=call.request_body,
        chat_format=call.chat_format,
        allowlist=tenant.outbound_allowlist,
        headers=call.headers,
        loaded=call.loaded,
        serves_tools=call.serves_tools,
        defer_replay=call.defer_replay,
        chat=call.chat,
    )
    refusal = resolution.refusal()
    if refusal is not None:
        if resolution.pending_replay is not None:
            resolution.pending_replay.submit()
        raise refusal
    turn = ResolvedTurn(
        resolve_id=resolution.id,
        route=resolution.route,
        user=call.user,
        session=call.session,
        user_text=resolution.chat.query,
        store_requested=call.store_memory,
    )
    for source in resolution.sources:
        if source.settings.enabled and source.after_resolve(turn):
            resolution.answer_kinds.append(type(source))
    if call.session:
        begin_turn(
            resolve_id=resolution.id,
            user=call.user,
            session=call.session,
            messages=call.request_body["messages"],
        )
    return resolution


def hand_back(
    *, tenant: Tenant, resolve_id: str, response: Any, usage: ProviderUsage | None = None
) -> dict[str, Any]:
    """The model's answer to a resolve: stored in the session, and handed to each source kind's
    after-response hook (memory's write); the provider's ``usage``, when given, recorded as
    ``record_usage`` does. Idempotent per resolve: a repeated answer changes nothing."""
    result = complete_turn(
        record_id=resolve_id, response=response, capture_content=tenant.capture_content
    )
    if usage is not None and not result["duplicate"]:
        record_usage(resolve_id=resolve_id, usage=usage)
    return result


def record_usage(
    *, resolve_id: str, usage: ProviderUsage, first_call: ProviderUsage | None = None
) -> bool:
    """The provider's reported usage of a resolve's answer: into its replay record beside the
    estimate, and into its deployment's token calibration. Once per resolve. ``first_call``: when
    the answer took follow-up calls (served tools), the first call's usage, the one the estimate
    is of, which alone moves the calibration."""
    return record_usage_in_replay(resolve_id=resolve_id, usage=usage, first_call=first_call)


def finish_call(
    *,
    tenant: Tenant,
    resolution: Resolution,
    response: Any | None,
    usage: ProviderUsage | None = None,
    first_call: ProviderUsage | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    session_budget: dict[str, Any] | None = None,
) -> None:
    """The end of a call whose entry point forwarded it (the gateway): what a hand-back does
    when there is an answer (``response``; None when the call ended without one), the provider's
    usage, the session budget's reservation and charge (``session_budget``) and the served tool
    calls, all into the replay record the resolve left pending, which
    is then written, once. Only the kinds whose after-resolve hook queued something hear the
    answer. The session's message is written before this returns (the conversation's next call
    reads it); the record and the deployment's calibration are written in the background."""
    pending = resolution.pending_replay
    if pending is None or pending.submitted:
        return
    record = pending.record
    calibration = None
    try:
        if response is not None and record.status != "refused":
            record_answer(
                record,
                response,
                capture_content=tenant.capture_content,
                kinds=dict.fromkeys(resolution.answer_kinds),
            )
        if usage is not None:
            calibration = apply_usage(record, usage, first_call)
        if tool_calls:
            record.tool_calls = list(tool_calls)
        if session_budget is not None:
            # The reservation beside the charge (the provider's report, the bill): an auditor
            # sees which calls went past what they held, and by how much.
            record.tokens = {**(record.tokens or {}), "session_budget": session_budget}
    finally:
        # The calibration moves in the writer's thread: nothing the caller waits for.
        pending.submit(after=calibration)
