"""Per-session token budgets: a route's ``budget.session_max_tokens`` (layered like every field,
so tenant defaults can set it) caps what one session of one user may spend through the gateway.

Before dispatch a call reserves its worst case (the rewritten request's input estimate plus the
most it may answer) in ONE SQL statement whose condition holds the limit, so any number of
concurrent calls can never reserve more than the budget between them. LiteLLM checks the spend and
records it in separate steps, which is how parallel requests overshoot its budgets (vLLM Semantic
Router #2018, LiteLLM #34732). After the answer the reservation is replaced by what the provider
reports it used; a call that fails gives its reservation back."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection
from django_tenants.utils import tenant_context

from contextplatform.core.estimation import count_json, default_estimator
from contextplatform.routing.gateway.connections import return_to_pool
from contextplatform.routing.gateway.protocol import GatewayError, Protocol
from contextplatform.routing.gateway.streams import StreamTranscript
from contextplatform.routing.models import SessionSpend
from contextplatform.routing.pipeline.resolver import Resolution
from contextplatform.routing.pipeline.usage import ProviderUsage, usage_from_response
from tenants.models import Tenant

logger = logging.getLogger("contextplatform.gateway")

TABLE = SessionSpend._meta.db_table

# Insert the session's row holding the reservation, or add the reservation to the row there is;
# either only while spent + reserved stays within the limit. Postgres evaluates the conflict
# branch's WHERE on the row it has locked, so two calls cannot both pass on the same old totals.
RESERVE_SQL = f"""
INSERT INTO {TABLE} AS spend (session_key, user_id, spent, reserved, updated_at)
SELECT %s, %s, 0, %s::bigint, now() WHERE %s::bigint <= %s::bigint
ON CONFLICT (session_key, user_id) DO UPDATE
    SET reserved = spend.reserved + EXCLUDED.reserved, updated_at = EXCLUDED.updated_at
    WHERE spend.spent + spend.reserved + EXCLUDED.reserved <= %s::bigint
RETURNING spend.spent, spend.reserved
"""

SETTLE_SQL = f"""
UPDATE {TABLE}
SET reserved = GREATEST(reserved - %s::bigint, 0), spent = spent + %s::bigint, updated_at = now()
WHERE session_key = %s AND user_id = %s
"""

# A call that grows (a follow-up with served tools' results) holds more, on the same condition.
EXTEND_SQL = f"""
UPDATE {TABLE} SET reserved = reserved + %s::bigint, updated_at = now()
WHERE session_key = %s AND user_id = %s AND spent + reserved + %s::bigint <= %s::bigint
RETURNING reserved
"""


@dataclass(frozen=True)
class Reservation:
    """The tokens one call holds against its session's budget while it runs."""

    session: str
    user: str
    tokens: int  # the worst case: input estimate + the most the call may answer
    input_estimate: int
    limit: int


def session_limit(resolution: Resolution) -> int | None:
    spec = resolution.spec
    return spec.context.budget.session_max_tokens if spec is not None else None


def worst_case_tokens(resolution: Resolution) -> int:
    """What the call may cost at most: the rewritten request as the platform counts it, plus the
    output the pipeline reserved (the request's ``max_tokens``, else the route's, else Relay-E's
    headroom)."""
    return resolution.tokens_after + resolution.budget.reserved_output


def reservation_for(
    resolution: Resolution, session: str | None, user: str | None
) -> Reservation | None:
    """The reservation a call needs, or None when its route sets no session budget or it names
    no session (nothing to count against)."""
    limit = session_limit(resolution)
    if limit is None or not session:
        return None
    return Reservation(
        session=session,
        user=user or "",
        tokens=worst_case_tokens(resolution),
        input_estimate=resolution.tokens_after,
        limit=limit,
    )


def budget_exceeded(message: str) -> GatewayError:
    # 429 makes the official clients raise RateLimitError; waiting does not refill a session's
    # budget, so ``x-should-retry: false`` keeps them from retrying on their own.
    return GatewayError(429, "budget_exceeded", message, headers={"x-should-retry": "false"})


def reserve(reservation: Reservation) -> None:
    """Hold the call's worst case, or refuse it with 429 ``budget_exceeded`` when that does not
    fit in what the session has left."""
    limit = reservation.limit
    with connection.cursor() as cursor:
        cursor.execute(
            RESERVE_SQL,
            [
                reservation.session,
                reservation.user,
                reservation.tokens,
                reservation.tokens,
                limit,
                limit,
            ],
        )
        held = cursor.fetchone()
    if held is not None:
        return
    if reservation.tokens > limit:
        raise budget_exceeded(
            f"this request may use up to {reservation.tokens} tokens, more than the session "
            f"budget of {limit} tokens: lower max_tokens or shorten the request"
        )
    row = (
        SessionSpend.objects.filter(session_key=reservation.session, user_id=reservation.user)
        .values("spent", "reserved")
        .first()
    ) or {"spent": 0, "reserved": 0}
    raise budget_exceeded(
        f"session {reservation.session!r} has spent {row['spent']} of its {limit} tokens "
        f"({row['reserved']} more are held by calls in flight); this request may use up to "
        f"{reservation.tokens}"
    )


def extend(reservation: Reservation, tokens: int) -> bool:
    """Hold ``tokens`` more for the same call, in one statement; False when they do not fit."""
    with connection.cursor() as cursor:
        cursor.execute(
            EXTEND_SQL,
            [tokens, reservation.session, reservation.user, tokens, reservation.limit],
        )
        return cursor.fetchone() is not None


def settle(reservation: Reservation, spent: int) -> None:
    """The call is over: its reservation goes, what it used is spent."""
    with connection.cursor() as cursor:
        cursor.execute(
            SETTLE_SQL, [reservation.tokens, max(spent, 0), reservation.session, reservation.user]
        )


def release(reservation: Reservation) -> None:
    """The call failed before the provider answered: nothing was spent."""
    settle(reservation, 0)


def answer_tokens(protocol: Protocol, payload: dict[str, Any]) -> int:
    """The platform's estimate of an answer's output, for a provider that reports no usage."""
    output = payload.get("content") if protocol == "anthropic" else payload.get("choices")
    return count_json(output) if output else 0


def spent_tokens(
    reservation: Reservation, usage: ProviderUsage | None, estimated_output: int
) -> int:
    """What the call is charged: the provider's reported usage (input, cached input and output),
    else the platform's estimate of the request and the answer."""
    if usage is not None:
        return usage.input + usage.output
    return reservation.input_estimate + estimated_output


def follow_up_cost(resolution: Resolution, body: dict[str, Any]) -> tuple[int, int]:
    """A follow-up call's worst case, as input and output: its request as the platform counts
    it, and the same output reserve as the first call."""
    return count_json(body, resolution.counting.estimator), resolution.budget.reserved_output


def text_tokens(text: str) -> int:
    return default_estimator().count(text) if text else 0


class HeldBudget:
    """A gateway call's reservation while it runs (nothing to hold when its route sets no
    session budget): settled once with what the call used, or released when it failed."""

    def __init__(self, tenant: Tenant, reservation: Reservation | None) -> None:
        self.tenant = tenant
        self.reservation = reservation

    async def _close(self, spent: int | None) -> None:
        reservation, self.reservation = self.reservation, None
        if reservation is None:
            return

        def run() -> None:
            try:
                with tenant_context(self.tenant):
                    if spent is None:
                        release(reservation)
                    else:
                        settle(reservation, spent)
            finally:
                return_to_pool()

        try:
            await sync_to_async(run, thread_sensitive=True)()
        except Exception:
            # The reservation stays held: the session may get less than its budget, never more.
            logger.exception("settling the session budget of %r failed", reservation.session)

    async def extend(self, input_tokens: int, output_tokens: int) -> bool:
        """Hold a follow-up call's worst case too; False when the session cannot afford it."""
        reservation = self.reservation
        if reservation is None:
            return True
        tokens = input_tokens + output_tokens

        def run() -> bool:
            try:
                with tenant_context(self.tenant):
                    return extend(reservation, tokens)
            finally:
                return_to_pool()

        if not await sync_to_async(run, thread_sensitive=True)():
            return False
        self.reservation = replace(
            reservation,
            tokens=reservation.tokens + tokens,
            input_estimate=reservation.input_estimate + input_tokens,
        )
        return True

    async def settle_answer(self, protocol: Protocol, payload: dict[str, Any]) -> None:
        if self.reservation is not None:
            estimated = answer_tokens(protocol, payload)
            spent = spent_tokens(self.reservation, usage_from_response(payload), estimated)
            await self._close(spent)

    async def settle_stream(
        self, transcript: StreamTranscript, usage: ProviderUsage | None = None
    ) -> None:
        """Also for a stream cut short: what the upstream generated until then was spent.
        ``usage``: what the stream's calls reported together, when it took several."""
        if self.reservation is not None:
            estimated = text_tokens(transcript.text)
            reported = usage or transcript.provider_usage
            await self._close(spent_tokens(self.reservation, reported, estimated))

    async def release(self) -> None:
        await self._close(None)


async def hold_budget(
    tenant: Tenant, resolution: Resolution, session: str | None, user: str | None
) -> HeldBudget:
    """Reserve the call's worst case against its session's budget (429 ``budget_exceeded`` when
    it does not fit); a database round trip only for a route that sets a budget."""
    reservation = reservation_for(resolution, session, user)
    if reservation is not None:

        def run() -> None:
            try:
                with tenant_context(tenant):
                    reserve(reservation)
            finally:
                return_to_pool()

        await sync_to_async(run, thread_sensitive=True)()
    return HeldBudget(tenant, reservation)


__all__ = [
    "HeldBudget",
    "Reservation",
    "answer_tokens",
    "budget_exceeded",
    "extend",
    "follow_up_cost",
    "hold_budget",
    "release",
    "reservation_for",
    "reserve",
    "settle",
    "spent_tokens",
    "text_tokens",
    "worst_case_tokens",
]
