"""A gateway call against its API key's own limits: its requests a minute (``rate_limit.rpm``,
at admission), its tokens a minute (``rate_limit.tpm``) and its budget (``budget``), both held
once the call's input is known, beside the session's budget (``budgets.HeldBudget`` carries them
all and settles or releases them together). Over a rate: 429 ``rate_limited`` with
``Retry-After``; over a budget: 429 ``budget_exceeded``; both in the provider's shape.

A key that sets none of them costs nothing here: its settings come with its kept lookup."""

from __future__ import annotations

from collections.abc import Sequence

from asgiref.sync import sync_to_async

from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway.budgets import HeldBudget, KeyHolds, ask_for, margin_key_of
from contextplatform.gateway.connections import in_tenant
from contextplatform.gateway.key_budgets import ask_of, reserve_key
from contextplatform.gateway.margin_probes import PROBES
from contextplatform.gateway.output_limits import client_output_limit
from contextplatform.gateway.protocol import GatewayError
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
    if api_key is None or not (api_key.has_budget or api_key.rate_limit_tpm):
        return
    first = upstreams[0]
    if api_key.has_budget and held.reservation is None and held.probe is None:
        # A cold deployment's budgeted calls wait for its first report, as a session's do.
        held.probe = await PROBES.admit(margin_key_of(tenant, first), first.timeout_ms / 1000)
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
            hold = await sync_to_async(key_rates.hold_tokens, thread_sensitive=False)(
                api_key, judged + key.input_tokens + wanted
            )
            if isinstance(hold, key_rates.TokensLimited):
                raise GatewayError(429, "rate_limited", hold.message, headers=hold.headers)
            key.tokens = hold
        if api_key.has_budget:
            inputs = [(a.input_tokens, upstream) for a, upstream in asks]
            ask = ask_of(api_key, inputs, wanted, spent_tokens=judged, spent_usd=judged_usd)
            key.budget = await in_tenant(tenant, lambda: reserve_key(ask))
            key.granted_output = key.budget.output_tokens
    except GatewayError:
        if judged and key.budget is None:  # refused, but the judge's calls were made
            await in_tenant(tenant, lambda: charge(api_key=api_key, tokens=judged, usd=judged_usd))
        raise


__all__ = ["hold_key_limits", "key_rate_refusal"]
