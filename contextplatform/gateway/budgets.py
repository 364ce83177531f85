"""Per-session token budgets: a route's ``budget.session_max_tokens`` (layered like every field,
so tenant defaults can set it) caps what one session of one user may spend through the gateway.

The promise: a session never spends past its budget when its provider honours the output limit
it is sent. Before dispatch a call reserves, in ONE SQL statement whose condition holds the limit,
its input as the provider will count it (``ask_for``: the platform's count, exact for OpenAI
families, calibrated per deployment otherwise; the input the provider publishes that it adds; and
the deployment's learned margin) plus an output allowance: the client's output limit, or as much
of what the session has left as is smaller. The statement answers the allowance it granted, and
the call is forwarded with its output limit lowered to it (``output_limits``), so concurrent calls
cannot both be granted the same headroom and none may answer past its share. A call that cannot
be granted its input and ``MIN_OUTPUT_TOKENS`` is refused (429 ``budget_exceeded``). LiteLLM
checks the spend and records it in separate steps, which is how parallel requests overshoot its
budgets (vLLM Semantic Router #2018, LiteLLM #34732).

After the answer the reservation is replaced by what the provider reports (it is the bill); the
reservation and the charge go into the replay record (``Settlement``). A report past its
reservation (a provider that ignores the output limit, input it adds without publishing it) is
flagged there and in ``context_budget_reservation_exceeded_total``, and widens the deployment's
next reservations (``reservation_margins``); its overspend is bounded by the calls in flight, as
no call is admitted once the session's spend reaches its limit. A deployment this process has not
seen answer has no margin yet: its budgeted calls wait for its first one's report before they
reserve (``margin_probes``), so that a first burst is not admitted on a guess. A call that fails
gives its reservation back.

``Ledger`` is the statements over any table of (key columns, spent, reserved): a session's row
here, another owner's (a key's budget) the same way."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import cached_property
from typing import Any

from django.db import connection

from contextplatform.core import metrics, minute_counts
from contextplatform.core.estimation import count_json, default_estimator
from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway.connections import in_tenant
from contextplatform.gateway.key_budgets import (
    KeyReservation,
    charged_usd,
    extend_key,
)
from contextplatform.gateway.key_settlements import SETTLER
from contextplatform.gateway.margin_probes import PROBES, Probe
from contextplatform.gateway.models import SessionSpend
from contextplatform.gateway.output_limits import client_output_limit, with_output_limit
from contextplatform.gateway.protocol import GatewayError, Protocol
from contextplatform.gateway.provider_input import published_overhead
from contextplatform.gateway.reservation_margins import MARGINS, MarginKey, Report
from contextplatform.gateway.streams import StreamTranscript
from contextplatform.protocols.registry import protocol_for
from contextplatform.protocols.usage import ProviderUsage, usage_from_response
from contextplatform.resolve.estimators import EstimatorChoice
from contextplatform.resolve.resolver import Resolution
from tenants.key_rates import TokenHold, settle_tokens
from tenants.models import Tenant

logger = logging.getLogger("contextplatform.gateway")

# The least output a call is admitted with (or the client's own limit, when lower): a call whose
# input leaves less of the budget than this is refused rather than sent to answer nothing.
MIN_OUTPUT_TOKENS = 16


@dataclass(frozen=True)
class Ledger:
    """The budget statements over a table of rows keyed by ``keys`` with ``spent`` and
    ``reserved`` (bigint, never negative) and ``updated_at``."""

    table: str
    keys: tuple[str, ...]

    def _where(self, alias: str) -> str:
        return " AND ".join(f"{alias}.{key} = %({key})s" for key in self.keys)

    @cached_property
    def insert_sql(self) -> str:
        # The first reservation of a key: the whole allowance is there to take.
        columns = ", ".join(self.keys)
        values = ", ".join(f"%({key})s" for key in self.keys)
        return f"""
INSERT INTO {self.table} AS spend ({columns}, spent, reserved, updated_at)
SELECT {values}, 0, %(fixed)s::bigint + LEAST(%(want)s::bigint, %(limit)s::bigint - %(fixed)s::bigint), now()
WHERE %(fixed)s::bigint + %(least)s::bigint <= %(limit)s::bigint
ON CONFLICT ({columns}) DO NOTHING
RETURNING spend.reserved - %(fixed)s::bigint
"""

    @cached_property
    def reserve_sql(self) -> str:
        # The CTE locks the row first (waiting for a concurrent reservation to commit, then reading
        # the row as that left it), so the allowance RETURNING computes from ``held`` is the one
        # SET added: concurrent calls cannot both be granted the same headroom.
        return f"""
WITH held AS (
    SELECT spend.spent, spend.reserved FROM {self.table} AS spend
    WHERE {self._where("spend")} FOR UPDATE
)
UPDATE {self.table} AS spend
SET reserved = spend.reserved + %(fixed)s::bigint + LEAST(
        %(want)s::bigint, %(limit)s::bigint - spend.spent - spend.reserved - %(fixed)s::bigint
    ),
    updated_at = now()
FROM held
WHERE {self._where("spend")}
    AND spend.spent + spend.reserved + %(fixed)s::bigint + %(least)s::bigint <= %(limit)s::bigint
RETURNING LEAST(%(want)s::bigint, %(limit)s::bigint - held.spent - held.reserved - %(fixed)s::bigint)
"""

    @cached_property
    def extend_sql(self) -> str:
        # A call that grows (a follow-up with served tools' results) holds more, on the same
        # condition.
        return f"""
UPDATE {self.table} AS spend SET reserved = spend.reserved + %(tokens)s::bigint, updated_at = now()
WHERE {self._where("spend")} AND spend.spent + spend.reserved + %(tokens)s::bigint <= %(limit)s::bigint
RETURNING spend.reserved
"""

    @cached_property
    def settle_sql(self) -> str:
        return f"""
UPDATE {self.table} AS spend
SET reserved = GREATEST(spend.reserved - %(held)s::bigint, 0),
    spent = spend.spent + %(spent)s::bigint, updated_at = now()
WHERE {self._where("spend")}
"""

    def params(self, key: tuple[str, ...], **values: int) -> dict[str, Any]:
        return {**dict(zip(self.keys, key, strict=True)), **values}


SESSIONS = Ledger(SessionSpend._meta.db_table, ("session_key", "user_id"))


@dataclass(frozen=True)
class Ask:
    """What a call asks of a budget: its input (held whole) and the output it would like (granted
    up to what is left, at least ``least``)."""

    key: tuple[str, ...]
    limit: int
    input_tokens: int  # the input as the provider will count it, the learned margins included
    output_wanted: int
    ledger: Ledger = SESSIONS
    estimated_input: int = 0  # the input before the deployment's learned margin
    margin_key: MarginKey | None = None

    @property
    def least(self) -> int:
        return max(1, min(self.output_wanted, MIN_OUTPUT_TOKENS))


@dataclass(frozen=True)
class Reservation:
    """The tokens one call holds against a budget while it runs (its follow-ups' added)."""

    ask: Ask
    output_tokens: int  # the output limit the call is sent
    tokens: int  # everything held: input + output allowance, for every call of the loop
    input_tokens: int
    estimated_input: int
    granted_output: int  # the output limits of every call of the loop, added up
    calls: int = 1

    @property
    def key(self) -> tuple[str, ...]:
        return self.ask.key

    @property
    def limit(self) -> int:
        return self.ask.limit


def session_limit(resolution: Resolution) -> int | None:
    spec = resolution.spec
    return spec.context.budget.session_max_tokens if spec is not None else None


def budget_exceeded(message: str) -> GatewayError:
    # 429 makes the official clients raise RateLimitError; waiting does not refill a session's
    # budget, so ``x-should-retry: false`` keeps them from retrying on their own.
    return GatewayError(429, "budget_exceeded", message, headers={"x-should-retry": "false"})


def reserve(ask: Ask) -> Reservation:
    """Hold the call's input and grant it as much output as it wants and the budget has left, in
    one statement; 429 ``budget_exceeded`` when not even the input and the least output fit."""
    ledger = ask.ledger
    params = ledger.params(
        ask.key,
        fixed=ask.input_tokens,
        want=ask.output_wanted,
        least=ask.least,
        limit=ask.limit,
    )
    with connection.cursor() as cursor:
        cursor.execute(ledger.insert_sql, params)
        granted = cursor.fetchone()
        if granted is None:
            cursor.execute(ledger.reserve_sql, params)
            granted = cursor.fetchone()
    if granted is not None:
        output = int(granted[0])
        return Reservation(
            ask=ask,
            output_tokens=output,
            tokens=ask.input_tokens + output,
            input_tokens=ask.input_tokens,
            estimated_input=ask.estimated_input,
            granted_output=output,
        )
    needed = ask.input_tokens + ask.least
    if needed > ask.limit:
        raise budget_exceeded(
            f"this request needs at least {needed} tokens ({ask.input_tokens} of input and "
            f"{ask.least} of output), more than the session budget of {ask.limit} tokens: "
            "shorten the request"
        )
    row = (
        SessionSpend.objects.filter(session_key=ask.key[0], user_id=ask.key[1])
        .values("spent", "reserved")
        .first()
        if ledger is SESSIONS
        else None
    ) or {"spent": 0, "reserved": 0}
    raise budget_exceeded(
        f"session {ask.key[0]!r} has spent {row['spent']} of its {ask.limit} tokens "
        f"({row['reserved']} more are held by calls in flight); this request needs at least "
        f"{needed}"
    )


def extend(reservation: Reservation, tokens: int) -> bool:
    """Hold ``tokens`` more for the same call, in one statement; False when they do not fit."""
    ledger = reservation.ask.ledger
    params = ledger.params(reservation.key, tokens=tokens, limit=reservation.limit)
    with connection.cursor() as cursor:
        cursor.execute(ledger.extend_sql, params)
        return cursor.fetchone() is not None


def settle(reservation: Reservation, spent: int) -> None:
    """The call is over: its reservation goes, what it used is spent."""
    ledger = reservation.ask.ledger
    params = ledger.params(reservation.key, held=reservation.tokens, spent=max(spent, 0))
    with connection.cursor() as cursor:
        cursor.execute(ledger.settle_sql, params)


def release(reservation: Reservation) -> None:
    """The call failed before the provider answered: nothing was spent."""
    settle(reservation, 0)


def input_count(counted: int, upstream: Upstream, body: dict[str, Any]) -> int:
    """``body``'s input as its provider will count it: ``counted`` (the platform's count, with
    the route's estimator: exact, or calibrated by the deployment's reports) plus what the
    provider publishes that it adds."""
    return counted + published_overhead(upstream.protocol, upstream.model, body)


def margin_key_of(tenant: Tenant, upstream: Upstream) -> MarginKey:
    return (tenant.schema_name, upstream.name)


def ask_for(
    tenant: Tenant,
    resolution: Resolution,
    upstream: Upstream,
    key: tuple[str, ...],
    limit: int,
) -> Ask:
    """What a call of ``resolution`` asks of the budget of ``key``: its rewritten request as the
    provider will count it, held whole, and its output limit (the client's, else the route's
    output reserve) as the allowance it would like."""
    body = resolution.rewritten
    margin_key = margin_key_of(tenant, upstream)
    estimate = input_count(resolution.tokens_after, upstream, body)
    return Ask(
        key=key,
        limit=limit,
        input_tokens=estimate + MARGINS.tokens(margin_key),
        output_wanted=client_output_limit(body) or resolution.budget.reserved_output,
        estimated_input=estimate,
        margin_key=margin_key,
    )


def answer_tokens(protocol: Protocol, payload: dict[str, Any]) -> int:
    """The platform's estimate of an answer's output, for a provider that reports no usage."""
    output = protocol_for(protocol).answer_output(payload)
    return count_json(output) if output else 0


def text_tokens(text: str) -> int:
    return default_estimator().count(text) if text else 0


@dataclass(frozen=True)
class Settlement:
    """What a call held and what it was charged, for its replay record."""

    reserved: int
    charged: int
    output_allowance: int
    reported: bool  # the provider reported the usage (else the platform's estimate was charged)

    @property
    def exceeded_by(self) -> int:
        return max(self.charged - self.reserved, 0)

    def as_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "reserved": self.reserved,
            "charged": self.charged,
            "output_allowance": self.output_allowance,
            "charged_from": "provider" if self.reported else "estimate",
            "reservation_exceeded": self.exceeded_by > 0,
        }
        if self.exceeded_by:
            record["exceeded_by"] = self.exceeded_by
        return record


def settlement_of(
    reservation: Reservation, usage: ProviderUsage | None, estimated_output: int
) -> Settlement:
    """What the call is charged: the provider's reported usage (input, cached input and output),
    else the platform's estimate of the request and the answer."""
    if usage is not None:
        charged, reported = usage.input + usage.output, True
    else:
        charged, reported = reservation.input_tokens + estimated_output, False
    return Settlement(
        reserved=reservation.tokens,
        charged=charged,
        output_allowance=reservation.output_tokens,
        reported=reported,
    )


def learn_key(key: KeyHolds, granted_output: int, usage: ProviderUsage | None) -> None:
    """A call held by its key's budget alone teaches its deployment's margin as a session's
    does (a report past the estimate widens the next reservations; any answer marks it known)."""
    if key.margin_key is not None:
        expected = key.estimated_input + granted_output
        report = (
            Report(expected=expected, reported=usage.input + usage.output)
            if usage is not None
            else None
        )
        MARGINS.observe(key.margin_key, report)


def learn(
    route: str, reservation: Reservation, usage: ProviderUsage | None, paid: Settlement
) -> None:
    """A report widens its deployment's margin (an answer without one only marks it known); one
    past its reservation is counted."""
    margin_key = reservation.ask.margin_key
    if margin_key is not None:
        expected = reservation.estimated_input + reservation.granted_output
        report = (
            Report(expected=expected, reported=usage.input + usage.output)
            if usage is not None
            else None
        )
        MARGINS.observe(margin_key, report)
    if paid.exceeded_by:
        metrics.count_reservation_exceeded(route, paid.exceeded_by)
        logger.warning(
            "route %r: the provider reported %d tokens against a reservation of %d",
            route,
            paid.charged,
            paid.reserved,
        )


@dataclass
class KeyHolds:
    """What a call holds against its API key's own limits (``key_limits``): the tokens of its
    minute (``rate_limit.tpm``) and the reservation of its budget period (``budget``)."""

    input_tokens: int  # the call's input as its provider will count it, margins included
    estimated_input: int  # the same before the deployment's learned margin
    tokens: TokenHold | None = None
    budget: KeyReservation | None = None
    margin_key: MarginKey | None = None
    granted_output: int = 0  # the output limits of every call of the loop, added up
    # Spent before the call was admitted (the resolve's relevance judge): held with the call and
    # charged whatever becomes of it.
    already_spent: int = 0
    already_spent_usd: Decimal = Decimal(0)

    @property
    def output_tokens(self) -> int | None:
        return self.budget.output_tokens if self.budget is not None else None


@dataclass
class HeldBudget:
    """A gateway call's reservation while it runs (nothing to hold when its route sets no
    session budget and its key no budget or token rate): settled once with what the call used,
    or released when it failed. When the call is its cold deployment's probe, the calls waiting
    for it go on once it is over."""

    tenant: Tenant
    reservation: Reservation | None
    route: str = ""
    upstream: Upstream | None = None
    counting: EstimatorChoice | None = None
    probe: Probe | None = None
    settlement: Settlement | None = field(default=None, init=False)
    key: KeyHolds | None = None
    # The deployment that answered (its price is what the key's budget is charged at).
    answering: Upstream | None = None

    def output_limit(self) -> int | None:
        limits = [
            limit
            for limit in (
                self.reservation.output_tokens if self.reservation is not None else None,
                self.key.output_tokens if self.key is not None else None,
            )
            if limit is not None
        ]
        return min(limits) if limits else None

    def limit_output(
        self, body: dict[str, Any], upstream: Upstream | None = None
    ) -> dict[str, Any]:
        """``body`` as it is forwarded (to ``upstream``, else the deployment reserved for): its
        output limit at most the allowance granted, in the field that deployment reads."""
        upstream, limit = upstream or self.upstream, self.output_limit()
        if limit is None or upstream is None:
            return body
        return with_output_limit(upstream.protocol, upstream.model, body, limit)

    def answered_by(self, upstream: Upstream) -> None:
        """The deployment that answered (a fallback, maybe): its follow-ups are counted as it
        counts them. A report of another deployment than the one reserved for teaches no margin:
        the estimate it would be compared with is not its own."""
        self.answering = upstream
        if self.upstream is None or self.upstream.name == upstream.name:
            return
        self.upstream = upstream
        reservation = self.reservation
        if reservation is not None:
            self.reservation = replace(reservation, ask=replace(reservation.ask, margin_key=None))
        if self.key is not None:
            self.key.margin_key = None

    @property
    def holds_anything(self) -> bool:
        key = self.key
        return self.reservation is not None or (
            key is not None and (key.budget is not None or key.tokens is not None)
        )

    async def _close(self, spent: int | None) -> None:
        reservation, self.reservation = self.reservation, None
        if reservation is None:
            return

        def run() -> None:
            if spent is None:
                release(reservation)
            else:
                settle(reservation, spent)

        try:
            await in_tenant(self.tenant, run)
        except Exception:
            # The reservation stays held: the session may get less than its budget, never more.
            logger.exception("settling the session budget of %r failed", reservation.key[0])

    async def _close_key(self, usage: ProviderUsage | None, tokens: int | None) -> None:
        """The key's holds replaced by what the call used (``tokens`` None: it failed, nothing
        was used): its minute's tokens, its budget's tokens and dollars at the answering
        deployment's price."""
        key = self.key
        if key is None:
            return
        hold, budget = key.tokens, key.budget
        key.tokens = key.budget = None
        spent = (tokens or 0) + key.already_spent
        if budget is None:
            if hold is not None:
                await minute_counts.off_loop(settle_tokens, hold, spent)
            return
        spent_usd = key.already_spent_usd + (
            charged_usd(self.answering, usage, tokens) if tokens else Decimal(0)
        )
        try:  # with the calls that finish meanwhile; the minute's count with it
            await SETTLER.settle(self.tenant, budget, spent, spent_usd, hold)
        except Exception:
            # The reservation stays held: the key may get less than its budget, never more.
            logger.exception("settling the budget of key %s failed", budget.ask.key_id)

    async def extend(self, body: dict[str, Any]) -> bool:
        """Hold a follow-up call's cost too (``body``, sent with the same output limit); False
        when the session or the key cannot afford it."""
        reservation, upstream, counting = self.reservation, self.upstream, self.counting
        key = self.key
        key_budget = key.budget if key is not None else None
        if (reservation is None and key_budget is None) or upstream is None or counting is None:
            return True
        margin_key = reservation.ask.margin_key if reservation is not None else None
        if key is not None and reservation is None:
            margin_key = key.margin_key
        estimate = input_count(count_json(body, counting.estimator), upstream, body)
        input_tokens = estimate + (MARGINS.tokens(margin_key) if margin_key else 0)
        output_tokens = self.output_limit() or 0
        if key is not None and key_budget is not None:
            extended = await in_tenant(
                self.tenant, lambda: extend_key(key_budget, input_tokens, output_tokens)
            )
            if extended is None:
                return False
            key.budget = extended
            key.input_tokens += input_tokens
            key.estimated_input += estimate
            key.granted_output += output_tokens
        if reservation is None:
            return True
        tokens = input_tokens + reservation.output_tokens

        if not await in_tenant(self.tenant, lambda: extend(reservation, tokens)):
            return False
        self.reservation = replace(
            reservation,
            tokens=reservation.tokens + tokens,
            input_tokens=reservation.input_tokens + input_tokens,
            estimated_input=reservation.estimated_input + estimate,
            granted_output=reservation.granted_output + reservation.output_tokens,
            calls=reservation.calls + 1,
        )
        return True

    async def _settle(self, usage: ProviderUsage | None, estimated_output: int) -> None:
        reservation, key = self.reservation, self.key
        try:
            if key is not None:
                used = (
                    usage.input + usage.output
                    if usage is not None
                    else key.input_tokens + estimated_output
                )
                await self._close_key(usage, used)
                if reservation is None:
                    learn_key(key, key.granted_output, usage)
            if reservation is None:
                return
            paid = settlement_of(reservation, usage, estimated_output)
            self.settlement = paid
            await self._close(paid.charged)
            learn(self.route, reservation, usage, paid)
        finally:
            # Settled and learned first: the waiting calls reserve with the margin it taught.
            self._end_probe()

    async def settle_answer(self, protocol: Protocol, payload: dict[str, Any]) -> None:
        if self.holds_anything:
            await self._settle(usage_from_response(payload), answer_tokens(protocol, payload))

    async def settle_stream(
        self, transcript: StreamTranscript, usage: ProviderUsage | None = None
    ) -> None:
        """Also for a stream cut short: what the upstream generated until then was spent.
        ``usage``: what the stream's calls reported together, when it took several."""
        if self.holds_anything:
            reported = usage or transcript.provider_usage
            await self._settle(reported, text_tokens(transcript.text))

    async def release(self) -> None:
        try:
            await self._close_key(None, None)
            await self._close(None)
        finally:
            self._end_probe()  # no report: the next waiting call becomes the probe

    def _end_probe(self) -> None:
        probe, self.probe = self.probe, None
        if probe is not None:
            probe.end()

    def record(self) -> dict[str, Any] | None:
        """The settlement as the replay record keeps it, once the call is settled."""
        return self.settlement.as_record() if self.settlement is not None else None


async def hold_budget(
    tenant: Tenant,
    resolution: Resolution,
    upstream: Upstream,
    session: str | None,
    user: str | None,
    fallbacks: Sequence[Upstream] = (),
) -> HeldBudget:
    """Reserve the call's input and grant its output allowance against its session's budget
    (429 ``budget_exceeded`` when they do not fit); a database round trip only for a route that
    sets a budget and a call that names a session. While the deployment is cold, after its
    probe's report (or as the probe). With ``fallbacks`` (the route's other deployments, which
    the call may reach) the costliest ask of them all is reserved: the output allowance is the
    same for each, their input counts differ by what each provider adds and each one's margin."""
    limit = session_limit(resolution)
    if limit is None or not session:
        return HeldBudget(tenant, None)
    probe = await PROBES.admit(margin_key_of(tenant, upstream), upstream.timeout_ms / 1000)
    try:
        # Asked after the wait: with the margin the probe taught.
        key = (session, user or "")
        asks = [
            (ask_for(tenant, resolution, each, key, limit), each) for each in (upstream, *fallbacks)
        ]
        ask, upstream = max(asks, key=lambda pair: pair[0].input_tokens)
        reservation = await in_tenant(tenant, lambda: reserve(ask))
    except BaseException:
        if probe is not None:
            probe.end()  # refused or failed before the upstream: the next call probes
        raise
    return HeldBudget(
        tenant,
        reservation,
        route=resolution.route,
        upstream=upstream,
        counting=resolution.counting,
        probe=probe,
    )


__all__ = [
    "MIN_OUTPUT_TOKENS",
    "SESSIONS",
    "Ask",
    "HeldBudget",
    "KeyHolds",
    "Ledger",
    "Reservation",
    "Settlement",
    "answer_tokens",
    "ask_for",
    "budget_exceeded",
    "extend",
    "hold_budget",
    "input_count",
    "release",
    "reserve",
    "settle",
    "settlement_of",
    "text_tokens",
]
