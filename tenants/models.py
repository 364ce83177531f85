"""Tenants, their domains and their API keys. All three live in the ``public`` schema."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
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


class ApiKey(models.Model):
    """An API key: only its SHA-256 is stored; the plain key is shown once, at creation."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, default="default")
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise a key.")
    key_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["tenant_id", "created_at"]

    def __str__(self) -> str:
        return f"{self.tenant.name}:{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
