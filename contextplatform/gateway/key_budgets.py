"""A key's budget (``budget.max_tokens`` and/or ``budget.max_usd`` per UTC day, UTC month or in
total) on the gateway's calls, with the session budget's promise (``budgets``): a key never spends
past its budget when its provider honours the output limit it is sent.

Before dispatch a call reserves in ONE SQL statement over the key's ``KeySpend`` row of the
current period (``tenants.models``, public schema) the most it may cost: its input as the provider
will count it (``budgets.ask_for``, for the costliest deployment the call may reach) priced at that
deployment's dearest input rate (plain, cached read or cache write), plus an output allowance: as
much of the client's output limit as both the tokens and the dollars left allow, priced at the
dearest output rate. The statement's condition holds both limits and answers the allowance it
granted; the call's output limit is lowered to it. After the answer the reservation is replaced by
what the provider reported, priced at the answering deployment's price (``cost_usd``); a failed
call gives it back. A USD budget cannot be kept over a deployment without a price: such a call is
refused (400 ``invalid_request`` naming the deployment) before anything is sent.

A key with no budget costs no query here: its settings come with the key's kept lookup."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date
from decimal import ROUND_CEILING, Decimal
from functools import cache
from typing import Any

from django.db import connection

from contextplatform.deployments.pricing import Price, usage_cost
from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway.protocol import GatewayError
from contextplatform.protocols.usage import ProviderUsage
from tenants.models import ApiKey, KeySpend, period_start

logger = logging.getLogger("contextplatform.gateway")

# No limit on one side of a budget: a bound no key reaches.
NO_TOKEN_LIMIT = 2**62
NO_USD_LIMIT = Decimal(10**15)
MIN_OUTPUT_TOKENS = 16
USD = Decimal("0.000000001")  # the column's precision: a reservation rounds up to it


@cache
def _sql() -> dict[str, str]:
    table = KeySpend._meta.db_table
    # The output the call may have: what it wants, what the tokens left allow, what the dollars
    # left allow at its output rate (no rate: no dollar bound), from the row as ``held`` read it.
    grant = """LEAST(
        %(want)s::bigint,
        %(limit_t)s::bigint - {spent_t} - {reserved_t} - %(fixed_t)s::bigint,
        FLOOR((%(limit_u)s::numeric - {spent_u} - {reserved_u} - %(fixed_u)s::numeric)
              / NULLIF(%(out_rate)s::numeric, 0))
    )::bigint"""
    first = grant.format(spent_t=0, reserved_t=0, spent_u=0, reserved_u=0)
    held = grant.format(
        spent_t="h.spent_tokens",
        reserved_t="h.reserved_tokens",
        spent_u="h.spent_usd",
        reserved_u="h.reserved_usd",
    )
    return {
        "insert": f"""
INSERT INTO {table} AS spend
    (key_id, period_start, spent_tokens, reserved_tokens, spent_usd, reserved_usd, updated_at)
SELECT %(key)s, %(period)s, 0, %(fixed_t)s::bigint + g.granted, 0,
       %(fixed_u)s::numeric + CEIL(g.granted * %(out_rate)s::numeric * 1e9) / 1e9, now()
FROM (SELECT {first} AS granted) AS g
WHERE g.granted >= %(least)s::bigint
ON CONFLICT (key_id, period_start) DO NOTHING
RETURNING spend.reserved_tokens - %(fixed_t)s::bigint
""",
        # The CTE locks the row first (waiting for a concurrent reservation to commit, then
        # reading the row as that left it): concurrent calls never share the same headroom.
        "reserve": f"""
WITH h AS (
    SELECT spent_tokens, reserved_tokens, spent_usd, reserved_usd FROM {table}
    WHERE key_id = %(key)s AND period_start = %(period)s FOR UPDATE
), g AS (SELECT {held} AS granted FROM h)
UPDATE {table} AS spend
SET reserved_tokens = spend.reserved_tokens + %(fixed_t)s::bigint + g.granted,
    reserved_usd = spend.reserved_usd + %(fixed_u)s::numeric
        + CEIL(g.granted * %(out_rate)s::numeric * 1e9) / 1e9,
    updated_at = now()
FROM g
WHERE spend.key_id = %(key)s AND spend.period_start = %(period)s
    AND g.granted >= %(least)s::bigint
RETURNING g.granted
""",
        "extend": f"""
UPDATE {table} AS spend
SET reserved_tokens = spend.reserved_tokens + %(tokens)s::bigint,
    reserved_usd = spend.reserved_usd + %(usd)s::numeric, updated_at = now()
WHERE key_id = %(key)s AND period_start = %(period)s
    AND spend.spent_tokens + spend.reserved_tokens + %(tokens)s::bigint <= %(limit_t)s::bigint
    AND spend.spent_usd + spend.reserved_usd + %(usd)s::numeric <= %(limit_u)s::numeric
RETURNING spend.reserved_tokens
""",
        "settle": f"""
UPDATE {table} AS spend
SET reserved_tokens = GREATEST(spend.reserved_tokens - %(held_t)s::bigint, 0),
    reserved_usd = GREATEST(spend.reserved_usd - %(held_u)s::numeric, 0),
    spent_tokens = spend.spent_tokens + %(spent_t)s::bigint,
    spent_usd = spend.spent_usd + %(spent_u)s::numeric,
    updated_at = now()
WHERE key_id = %(key)s AND period_start = %(period)s
""",
        "row": f"""
SELECT spent_tokens, reserved_tokens, spent_usd, reserved_usd FROM {table}
WHERE key_id = %(key)s AND period_start = %(period)s
""",
    }


def usd(value: float | Decimal) -> Decimal:
    return Decimal(str(value)).quantize(USD, rounding=ROUND_CEILING)


def dearest_input_rate(price: Price) -> Decimal:
    """USD per input token at the dearest rate any of its tokens may be charged."""
    rates = [price.input_per_mtok, price.cached_input_per_mtok, price.cache_write_per_mtok]
    return Decimal(str(max(rate for rate in rates if rate is not None))) / 1_000_000


def output_rate(price: Price) -> Decimal:
    return Decimal(str(price.output_per_mtok)) / 1_000_000


@dataclass(frozen=True)
class KeyAsk:
    """What a call asks of its key's budget."""

    key_id: int
    period: date
    limit_tokens: int
    limit_usd: Decimal
    input_tokens: int
    input_usd: Decimal
    in_rate: Decimal  # USD per input token, the dearest (0: no dollar bound)
    out_rate: Decimal  # USD per output token (0: no dollar bound on the output)
    output_wanted: int

    @property
    def least(self) -> int:
        return max(1, min(self.output_wanted, MIN_OUTPUT_TOKENS))

    def params(self) -> dict[str, Any]:
        return {
            "key": self.key_id,
            "period": self.period,
            "limit_t": self.limit_tokens,
            "limit_u": self.limit_usd,
            "fixed_t": self.input_tokens,
            "fixed_u": self.input_usd,
            "out_rate": self.out_rate,
            "want": self.output_wanted,
            "least": self.least,
        }


@dataclass(frozen=True)
class KeyReservation:
    ask: KeyAsk
    output_tokens: int  # the output limit the call is sent
    tokens: int  # everything held, follow-ups included
    usd: Decimal


def key_budget_exceeded(message: str) -> GatewayError:
    # Waiting does not refill a budget before its period ends: the official clients must not
    # retry on their own.
    return GatewayError(429, "budget_exceeded", message, headers={"x-should-retry": "false"})


def unpriced(upstream: Upstream) -> GatewayError:
    return GatewayError(
        400,
        "invalid_request",
        f"this API key has a USD budget, and the deployment {upstream.name!r} this call may "
        "reach has no price: give the deployment a price (USD per million tokens) or use a key "
        "with a token budget only",
    )


def ask_of(
    api_key: ApiKey,
    asks: Sequence[tuple[int, Upstream]],
    output_wanted: int,
    *,
    spent_tokens: int = 0,
    spent_usd: Decimal = Decimal(0),
) -> KeyAsk:
    """The key's ask for a call that may reach each deployment of ``asks`` (with the input each
    would count): the largest input, priced at the dearest rates among them; ``spent_tokens`` and
    ``spent_usd``: what the call already cost (its resolve's judge), held with it."""
    needs_usd = api_key.budget_max_usd is not None
    input_tokens = max(tokens for tokens, _ in asks)
    in_rate, out_rate = Decimal(0), Decimal(0)
    if needs_usd:
        for _, upstream in asks:
            if upstream.price is None:
                raise unpriced(upstream)
            in_rate = max(in_rate, dearest_input_rate(upstream.price))
            out_rate = max(out_rate, output_rate(upstream.price))
    max_tokens = api_key.budget_max_tokens
    max_usd = api_key.budget_max_usd
    return KeyAsk(
        key_id=api_key.pk,
        period=period_start(api_key.budget_period),
        limit_tokens=max_tokens if max_tokens is not None else NO_TOKEN_LIMIT,
        limit_usd=Decimal(max_usd) if max_usd is not None else NO_USD_LIMIT,
        input_tokens=input_tokens + spent_tokens,
        input_usd=usd(input_tokens * in_rate + spent_usd),
        in_rate=in_rate,
        out_rate=out_rate,
        output_wanted=output_wanted,
    )


def _refusal(ask: KeyAsk) -> GatewayError:
    with connection.cursor() as cursor:
        cursor.execute(_sql()["row"], ask.params())
        row = cursor.fetchone() or (0, 0, Decimal(0), Decimal(0))
    spent_t, reserved_t, spent_u, reserved_u = row
    limits = []
    if ask.limit_tokens != NO_TOKEN_LIMIT:
        limits.append(f"{spent_t} of {ask.limit_tokens} tokens ({reserved_t} held in flight)")
    if ask.limit_usd != NO_USD_LIMIT:
        limits.append(
            f"${float(spent_u):.6f} of ${float(ask.limit_usd):.2f} ({float(reserved_u):.6f} held)"
        )
    return key_budget_exceeded(
        f"this API key's budget is spent for the period starting {ask.period.isoformat()}: "
        f"{' and '.join(limits)}; this call needs at least {ask.input_tokens + ask.least} tokens"
        + (f" (${float(ask.input_usd):.6f} of input)" if ask.input_usd else "")
    )


def reserve_key(ask: KeyAsk) -> KeyReservation:
    """Hold the call's input and grant it as much output as the budget has left, in one
    statement; 429 ``budget_exceeded`` when not even the input and the least output fit."""
    sql, params = _sql(), ask.params()
    with connection.cursor() as cursor:
        # The period's row is there for every call but its first: one statement then.
        cursor.execute(sql["reserve"], params)
        granted = cursor.fetchone()
        if granted is None:  # no row yet, or the budget is spent
            cursor.execute(sql["insert"], params)
            granted = cursor.fetchone()
            if granted is None:  # a concurrent first call inserted it meanwhile
                cursor.execute(sql["reserve"], params)
                granted = cursor.fetchone()
    if granted is None:
        raise _refusal(ask)
    output = int(granted[0])
    return KeyReservation(
        ask=ask,
        output_tokens=output,
        tokens=ask.input_tokens + output,
        usd=ask.input_usd + usd(output * ask.out_rate),
    )


def extend_key(
    reservation: KeyReservation, input_tokens: int, output_tokens: int
) -> KeyReservation | None:
    """Hold a follow-up call's input and output limit too, in one statement; None when the
    budget cannot afford it."""
    ask = reservation.ask
    tokens = input_tokens + output_tokens
    usd_more = usd(input_tokens * ask.in_rate + output_tokens * ask.out_rate)
    params = {**ask.params(), "tokens": tokens, "usd": usd_more}
    with connection.cursor() as cursor:
        cursor.execute(_sql()["extend"], params)
        if cursor.fetchone() is None:
            return None
    return replace(reservation, tokens=reservation.tokens + tokens, usd=reservation.usd + usd_more)


def settle_key(reservation: KeyReservation, tokens: int, spent_usd: Decimal) -> None:
    params = {
        **reservation.ask.params(),
        "held_t": reservation.tokens,
        "held_u": reservation.usd,
        "spent_t": max(tokens, 0),
        "spent_u": max(spent_usd, Decimal(0)),
    }
    with connection.cursor() as cursor:
        cursor.execute(_sql()["settle"], params)


def settle_keys(settlements: Sequence[tuple[KeyReservation, int, Decimal]]) -> None:
    """``settle_key`` for many calls at once: the calls of one key's period added up into one
    statement (a reservation only shrinks by what its calls held, never below 0, so one
    subtraction of their sum is theirs one by one), each key's in a statement of its own, in key
    order (a statement holds one row: two processes' settlements never wait on each other)."""
    summed: dict[tuple[int, date], list[Any]] = {}
    for reservation, tokens, spent_usd in settlements:
        ask = reservation.ask
        row = summed.setdefault((ask.key_id, ask.period), [0, Decimal(0), 0, Decimal(0)])
        row[0] += reservation.tokens
        row[1] += reservation.usd
        row[2] += max(tokens, 0)
        row[3] += max(spent_usd, Decimal(0))
    with connection.cursor() as cursor:
        for (key_id, period), (held_t, held_u, spent_t, spent_u) in sorted(summed.items()):
            params = {
                "key": key_id,
                "period": period,
                "held_t": held_t,
                "held_u": held_u,
                "spent_t": spent_t,
                "spent_u": spent_u,
            }
            cursor.execute(_sql()["settle"], params)


def charged_usd(upstream: Upstream | None, usage: ProviderUsage | None, tokens: int) -> Decimal:
    """What the call cost at the answering deployment's price: from the provider's usage, else
    every token estimated priced as input at its dearest rate (no price: nothing is known)."""
    price = upstream.price if upstream is not None else None
    if price is None:
        return Decimal(0)
    if usage is None:
        return usd(tokens * max(dearest_input_rate(price), output_rate(price)))
    return usd(usage_cost(price, usage) or 0.0)


__all__ = [
    "KeyAsk",
    "KeyReservation",
    "ask_of",
    "charged_usd",
    "extend_key",
    "key_budget_exceeded",
    "reserve_key",
    "settle_key",
    "settle_keys",
]
