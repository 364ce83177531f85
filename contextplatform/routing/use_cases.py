"""The operations every entry point runs (the REST API, the admin's preview, the gateway), each
one function, so that they behave the same whoever calls them. Entry points parse and present;
everything a call does to the tenant's data happens here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contextplatform.routing.pipeline.chat import ChatFormat
from contextplatform.routing.pipeline.resolver import Resolution, resolve
from contextplatform.routing.pipeline.turns import begin_turn, complete_turn
from contextplatform.routing.pipeline.usage import ProviderUsage
from contextplatform.routing.pipeline.usage_records import (
    record_tool_calls as record_tool_calls_in_replay,
)
from contextplatform.routing.pipeline.usage_records import record_usage as record_usage_in_replay
from contextplatform.routing.selectors import LoadedRoute
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
    )
    refusal = resolution.refusal()
    if refusal is not None:
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
        if source.settings.enabled:
            source.after_resolve(turn)
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


def record_tool_calls(*, resolve_id: str, calls: list[dict[str, Any]]) -> bool:
    """The calls of the platform's own tools the gateway served for a resolve, into its replay
    record."""
    return record_tool_calls_in_replay(resolve_id=resolve_id, calls=calls)
