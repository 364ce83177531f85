"""Writes of a tenant's own keys: create, change, revoke, rotate. A key never grants a scope the
key (or admin user) writing it lacks. Every write saves the row, so the kept lookups of every
process drop it (``tenants.signals``): a revoked key is refused by the next request anywhere."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from contextplatform.core.errors import ApiError, invalid_request
from tenants.key_schema import KeySpec
from tenants.models import ApiKey, KeySpend, Tenant, period_start
from tenants.services import IssuedKey, issue_api_key


def check_grantable(scopes: Iterable[str], granter_scopes: Iterable[str]) -> None:
    """403 naming the scopes asked for that the one writing the key does not hold."""
    missing = [scope for scope in scopes if scope not in set(granter_scopes)]
    if missing:
        raise ApiError(
            "forbidden",
            f"a key cannot grant scopes its creator lacks: {', '.join(missing)}",
            status=403,
            param="scopes",
        )


def apply_spec(api_key: ApiKey, spec: KeySpec) -> None:
    rate_limit, budget = spec.rate_limit, spec.budget
    api_key.name = spec.name
    api_key.scopes = spec.scopes
    api_key.expires_at = spec.expires_at
    api_key.rate_limit_rpm = rate_limit.rpm if rate_limit else None
    api_key.rate_limit_tpm = rate_limit.tpm if rate_limit else None
    api_key.budget_max_usd = (
        Decimal(str(budget.max_usd)) if budget and budget.max_usd is not None else None
    )
    api_key.budget_max_tokens = budget.max_tokens if budget else None
    api_key.budget_period = budget.period if budget else "month"
    api_key.metadata = spec.metadata


def _check_expiry(spec: KeySpec) -> None:
    if spec.expires_at is not None and spec.expires_at <= timezone.now():
        raise invalid_request("expires_at: must be in the future", "expires_at")


def create_key(*, tenant: Tenant, spec: KeySpec, granter_scopes: Iterable[str]) -> IssuedKey:
    check_grantable(spec.scopes, granter_scopes)
    _check_expiry(spec)
    with transaction.atomic():
        issued = issue_api_key(tenant=tenant, scopes=spec.scopes, name=spec.name)
        apply_spec(issued.api_key, spec)
        issued.api_key.save()
    return issued


def update_key(*, api_key: ApiKey, spec: KeySpec, granter_scopes: Iterable[str]) -> ApiKey:
    # Only scopes added need the granter's: one already on the key stays whoever edits it.
    check_grantable(set(spec.scopes) - set(api_key.scopes), granter_scopes)
    if spec.expires_at != api_key.expires_at:
        _check_expiry(spec)
    apply_spec(api_key, spec)
    api_key.save()
    return api_key


def revoke_key(*, api_key: ApiKey) -> ApiKey:
    """Revoked from now on (the row stays, for its history and spend); revoking again keeps the
    first time."""
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
    return api_key


def rotate_key(*, api_key: ApiKey, granter_scopes: Iterable[str]) -> IssuedKey:
    """A new key with the old one's settings; the old one revoked at once (no overlap: the caller
    swaps keys and retries). The new key carries the old one's spend of its budget periods (its
    calls in flight counted as spent), so rotating never refills a budget."""
    if api_key.revoked_at is not None:
        raise ApiError("conflict", f"{api_key.public_id} is revoked: nothing to rotate", status=409)
    check_grantable(api_key.scopes, granter_scopes)
    with transaction.atomic():
        issued = issue_api_key(tenant=api_key.tenant, scopes=api_key.scopes, name=api_key.name)
        new = issued.api_key
        for field in (
            "expires_at",
            "rate_limit_rpm",
            "rate_limit_tpm",
            "budget_max_usd",
            "budget_max_tokens",
            "budget_period",
            "metadata",
        ):
            setattr(new, field, getattr(api_key, field))
        new.save()
        revoke_key(api_key=api_key)
        table = KeySpend._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (key_id, period_start, spent_tokens, reserved_tokens, "
                "spent_usd, reserved_usd, updated_at) "
                "SELECT %s, period_start, spent_tokens + reserved_tokens, 0, "
                f"spent_usd + reserved_usd, 0, now() FROM {table} WHERE key_id = %s",
                [new.pk, api_key.pk],
            )
    return issued


def charge(*, api_key: ApiKey, tokens: int, usd: Decimal = Decimal(0)) -> None:
    """What the key's calls already spent without a reservation (the relevance judge's calls of
    a resolve, made before the call could be admitted), added to its current budget period in one
    statement. It may take the period past its budget: it was spent; the next call is refused."""
    if (tokens <= 0 and usd <= 0) or not api_key.has_budget:
        return
    table = KeySpend._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} AS spend (key_id, period_start, spent_tokens, reserved_tokens, "
            "spent_usd, reserved_usd, updated_at) VALUES (%s, %s, %s, 0, %s, 0, now()) "
            "ON CONFLICT (key_id, period_start) DO UPDATE "
            "SET spent_tokens = spend.spent_tokens + EXCLUDED.spent_tokens, "
            "spent_usd = spend.spent_usd + EXCLUDED.spent_usd, updated_at = now()",
            [api_key.pk, period_start(api_key.budget_period), max(tokens, 0), max(usd, Decimal(0))],
        )


def judge_spend(outcomes: Iterable[Any]) -> tuple[int, Decimal]:
    """The tokens the relevance judge's calls reported in a resolve's source outcomes, and their
    cost where the judging deployment has a price."""
    tokens, usd = 0, Decimal(0)
    for outcome in outcomes:
        usage = (getattr(outcome, "notes", None) or {}).get("judge_usage") or {}
        for name in ("input_tokens", "output_tokens"):
            value = usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                tokens += value
        cost = usage.get("cost_usd")
        if isinstance(cost, int | float) and not isinstance(cost, bool) and cost > 0:
            usd += Decimal(str(cost))
    return tokens, usd


__all__ = [
    "charge",
    "check_grantable",
    "create_key",
    "judge_spend",
    "revoke_key",
    "rotate_key",
    "update_key",
]
