"""Per-tenant compression state: recovery blobs, running stats, and the audit trail."""

from __future__ import annotations

from django.db import models


class RecoveryBlob(models.Model):
    """The original text of a ``recoverable`` block, retrievable only by the request that made it."""

    request_id = models.CharField(max_length=40)
    route = models.CharField(max_length=100)
    user_id = models.CharField(max_length=200, blank=True, default="")
    key = models.CharField(max_length=32)
    content = models.TextField()
    size_bytes = models.PositiveIntegerField()
    retrievals = models.PositiveIntegerField(default=0)
    max_retrievals = models.PositiveIntegerField(
        default=8, help_text="Per request, from the route's recovery config."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["request_id", "key"], name="recovery_request_key_unique"
            )
        ]
        indexes = [models.Index(fields=["route", "user_id", "request_id"], name="recovery_scope")]

    def __str__(self) -> str:
        return f"{self.request_id}:{self.key}"


class CompressionStats(models.Model):
    """One row per tenant schema: counters since the tenant was created."""

    requests = models.PositiveBigIntegerField(default=0)
    applied = models.PositiveBigIntegerField(default=0)
    skipped = models.PositiveBigIntegerField(default=0)
    failures = models.PositiveBigIntegerField(default=0)
    tokens_before = models.PositiveBigIntegerField(default=0)
    tokens_after = models.PositiveBigIntegerField(default=0)
    recovery_writes = models.PositiveBigIntegerField(default=0)
    recovery_reads = models.PositiveBigIntegerField(default=0)
    recovery_failures = models.PositiveBigIntegerField(default=0)


class AuditEntry(models.Model):
    """Preview and invalidate calls, each hash-chained to the one before."""

    sequence = models.PositiveBigIntegerField(unique=True)
    timestamp = models.DateTimeField()
    action = models.CharField(max_length=60)
    key_id = models.BigIntegerField(null=True)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=300)
    status = models.PositiveSmallIntegerField()
    detail = models.JSONField(default=dict)
    previous_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["sequence"]
