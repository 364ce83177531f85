"""A gateway call against its API key's own limits: its requests a minute (``rate_limit.rpm``,
at admission), its tokens a minute (``rate_limit.tpm``) and its budget (``budget``), both held
once the call's input is known, beside the session's budget (``budgets.HeldBudget`` carries them
all and settles or releases them together). Over a rate: 429 ``rate_limited`` with
``Retry-After``; over a budget: 429 ``budget_exceeded``; both in the provider's shape.

A key that sets none of them costs nothing here: its settings come with its kept lookup. The
minute's count and the budget's statement are made on one trip to the request's thread, the
resolve's own when nothing has to wait on the event loop first (``holds_at_once``)."""

from __future__ import annotations

from collections.abc import Sequence

from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway.budgets import HeldBudget, KeyHolds, ask_for, margin_key_of
from contextplatform.gateway.connections import in_tenant
from contextplatform.gateway.key_budgets import ask_of, reserve_key
from contextplatform.gateway.margin_probes import PROBES
from contextplatform.gateway.output_limits import client_output_limit
from contextplatform.gateway.protocol import GatewayError
from contextplatform.gateway.reservation_margins import MARGINS
from contextplatform.resolve.resolver import Resolution
from tenants import key_rates
from tenants.key_services import charge, judge_spend
from tenants.models import ApiKey, Tenant


def key_rate_refusal(api_key: ApiKey) -> GatewayError | None:
    """One request counted against the key's ``rate_limit.rpm`` (none set: no cache trip)."""
    if not api_key.rate_limit_rpm:
        return None
    limited = key_rates.rpm_refusal(api_key)
    if limited is None:
        return None
    return GatewayError(429, "rate_limited", limited.message, headers=limited.headers)


def holds_at_once(api_key: ApiKey, tenant: Tenant, first: Upstream) -> bool:
    """Whether the key's limits may be held without waiting on the event loop first: its budget's
    calls wait for a cold deployment's probe (``margin_probes``), a known one's never do."""
    return not api_key.has_budget or MARGINS.known(margin_key_of(tenant, first))


def hold_key_limits_now(
    held: HeldBudget,
    api_key: ApiKey,
    tenant: Tenant,
    resolution: Resolution,
    upstreams: Sequence[Upstream],
) -> None:
    """The key's tokens a minute and budget held into ``held``, on the request's thread in the
    tenant's schema: the minute's count and the budget's statement on one trip there. The caller
    releases ``held`` when this raises."""
    first = upstreams[0]
    asks = [(ask_for(tenant, resolution, upstream, ("",), 0), upstream) for upstream in upstreams]
    costliest, _ = max(asks, key=lambda pair: pair[0].input_tokens)
    wanted = client_output_limit(resolution.rewritten) or resolution.budget.reserved_output
    if held.reservation is not None:  # the session's grant already lowered the output
        wanted = min(wanted, held.reservation.output_tokens)
    judged, judged_usd = judge_spend(resolution.outcomes)  # spent already, by the resolve's judge
    key = KeyHolds(
        input_tokens=costliest.input_tokens,
        estimated_input=costliest.estimated_input,
        margin_key=costliest.margin_key,
        already_spent=judged,
        already_spent_usd=judged_usd,
    )
    held.key = key
    if held.upstream is None:
        held.upstream, held.counting, held.route = first, resolution.counting, resolution.route
    try:
        if api_key.rate_limit_tpm:
            hold = key_rates.hold_tokens(api_key, judged + key.input_tokens + wanted)
            if isinstance(hold, key_rates.TokensLimited):
                raise GatewayError(429, "rate_limited", hold.message, headers=hold.headers)
            key.tokens = hold
        if api_key.has_budget:
            inputs = [(a.input_tokens, upstream) for a, upstream in asks]
            ask = ask_of(api_key, inputs, wanted, spent_tokens=judged, spent_usd=judged_usd)
            key.budget = reserve_key(ask)
            key.granted_output = key.budget.output_tokens
    except GatewayError:
        if judged and key.budget is None:  # refused, but the judge's calls were made
            charge(api_key=api_key, tokens=judged, usd=judged_usd)
        raise


def limits_key(api_key: ApiKey | None) -> bool:
    """Whether the key sets limits a call holds (a budget or tokens a minute)."""
    return api_key is not None and bool(api_key.has_budget or api_key.rate_limit_tpm)


async def hold_key_limits(
    held: HeldBudget,
    api_key: ApiKey | None,
    tenant: Tenant,
    resolution: Resolution,
    upstreams: Sequence[Upstream],
) -> None:
    """Hold the call's cost against the key's tokens a minute and its budget, for the costliest
    of ``upstreams`` (the deployments the call may reach), into ``held``. The caller releases
    ``held`` when this raises."""
    if api_key is None or not limits_key(api_key):
        return
    first = upstreams[0]
    if api_key.has_budget and held.reservation is None and held.probe is None:
        # A cold deployment's budgeted calls wait for its first report, as a session's do.
        held.probe = await PROBES.admit(margin_key_of(tenant, first), first.timeout_ms / 1000)
    await in_tenant(
        tenant, lambda: hold_key_limits_now(held, api_key, tenant, resolution, upstreams)
    )


__all__ = [
    "hold_key_limits",
    "hold_key_limits_now",
    "holds_at_once",
    "key_rate_refusal",
    "limits_key",
]
