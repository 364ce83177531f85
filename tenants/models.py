"""Tenants, their domains, their API keys and what each key has spent. All live in the ``public``
schema."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django_tenants.models import DomainMixin, TenantMixin


def validate_outbound_allowlist(value: Any) -> None:
    from contextplatform.core.outbound.policy import validate_allowlist

    try:
        validate_allowlist(value)
    except ValueError as error:
        raise ValidationError(str(error)) from error


class OutboundAllowlistField(models.JSONField):
    """A JSON list of allow-list entries, read back as a list of strings whatever the column
    holds (``outbound.policy.readable_allowlist``): every outbound call of the tenant reads it."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        from contextplatform.core.outbound.policy import readable_allowlist

        return readable_allowlist(super().from_db_value(value, expression, connection))


class Tenant(TenantMixin):
    name = models.CharField(max_length=100, unique=True)
    capture_content = models.BooleanField(
        default=False,
        help_text="Store raw message content in replay records (off by default).",
    )
    outbound_allowlist = OutboundAllowlistField(
        default=list,
        blank=True,
        validators=[validate_outbound_allowlist],
        help_text=(
            "Host names, IPs, host:port or CIDRs (e.g. "
            '["search.internal", "127.0.0.1:8001", "[::1]:8001", "10.0.0.0/8"]) that this '
            "tenant's outbound requests may reach although they are private, loopback or "
            "link-local; host:port allows that port only. Anything not listed must be a public "
            "address."
        ),
    )
    memory_max_age_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="Memories older than this are deleted (retention task)."
    )
    memory_max_per_user = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Beyond this many memories per user, the weakest are pruned.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    auto_create_schema = True
    auto_drop_schema = True

    def __str__(self) -> str:
        return self.name


class Domain(DomainMixin):
    def __str__(self) -> str:
        return self.domain


BUDGET_PERIODS = ("day", "month", "total")
# The start of the one period a ``total`` budget has.
TOTAL_PERIOD_START = date(1970, 1, 1)


class ApiKey(models.Model):
    """An API key: only its SHA-256 is stored; the plain key is shown once, at creation. Its
    limits and budget live on its row, so the lookup every request makes (kept per process)
    carries them: an unlimited key costs no query more."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, default="default")
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise a key.")
    key_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    rate_limit_rpm = models.PositiveIntegerField(null=True, blank=True)
    rate_limit_tpm = models.PositiveIntegerField(null=True, blank=True)
    budget_max_usd = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    budget_max_tokens = models.BigIntegerField(null=True, blank=True)
    budget_period = models.CharField(
        max_length=5, choices=[(p, p) for p in BUDGET_PERIODS], default="month"
    )
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["tenant_id", "created_at"]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(budget_max_usd__isnull=True) | models.Q(budget_max_usd__gte=0))
                & (models.Q(budget_max_tokens__isnull=True) | models.Q(budget_max_tokens__gte=0)),
                name="api_key_budget_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.name}:{self.name} ({self.prefix}…)"

    @property
    def public_id(self) -> str:
        return f"key_{self.pk}"

    def expired(self, now: datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and not self.expired()

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.expired() else "active"

    @property
    def has_budget(self) -> bool:
        return self.budget_max_usd is not None or self.budget_max_tokens is not None


def period_start(period: str, now: datetime | None = None) -> date:
    """The first day of the UTC calendar period ``now`` falls in."""
    today = (now or timezone.now()).astimezone(UTC).date()
    if period == "day":
        return today
    if period == "month":
        return today.replace(day=1)
    return TOTAL_PERIOD_START


class KeySpend(models.Model):
    """What one key has spent in one budget period (tokens and USD) and what its calls in flight
    hold. Written only in single atomic SQL statements (``contextplatform/gateway/key_budgets.py``),
    so concurrent calls never reserve past the key's budget."""

    key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="spend")
    period_start = models.DateField()
    spent_tokens = models.BigIntegerField(default=0)
    reserved_tokens = models.BigIntegerField(default=0)
    spent_usd = models.DecimalField(max_digits=20, decimal_places=9, default=0)
    reserved_usd = models.DecimalField(max_digits=20, decimal_places=9, default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key", "period_start"], name="key_spend_key_period"),
            models.CheckConstraint(
                condition=models.Q(
                    spent_tokens__gte=0,
                    reserved_tokens__gte=0,
                    spent_usd__gte=0,
                    reserved_usd__gte=0,
                ),
                name="key_spend_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return (
            f"{self.key_id} from {self.period_start}: {self.spent_tokens} tokens, ${self.spent_usd}"
        )


class TenantApiKey(ApiKey):
    """The tenant admin's page of its own keys (the platform admin has ``ApiKey``'s)."""

    class Meta:
        proxy = True
        verbose_name = "API key"
        verbose_name_plural = "API keys"
