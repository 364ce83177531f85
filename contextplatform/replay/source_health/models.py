"""The counts behind each source's health, in the tenant's schema (app label ``replay``)."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models


class SourceHealthMinute(models.Model):
    """One route's source over one minute: its outcomes, the items kept and a latency histogram
    (``rules.LATENCY_BOUNDS_MS``). Written when replay records are; pruned past the retention."""

    route = models.CharField(max_length=100)
    source = models.CharField(max_length=200)
    minute = models.DateTimeField()
    ok = models.IntegerField(default=0)
    empty = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    timeout = models.IntegerField(default=0)
    kept = models.IntegerField(default=0)
    latency = ArrayField(models.IntegerField())
    max_ms = models.FloatField(default=0.0)

    class Meta:
        app_label = "replay"
        constraints = [
            models.UniqueConstraint(
                fields=["route", "source", "minute"], name="source_health_minute_key"
            )
        ]
        indexes = [models.Index(fields=["minute"], name="source_health_minute_time")]


class SourceHealthStreak(models.Model):
    """A route's source's run of consecutive empty answers since its last hit (failures and
    timeouts neither extend nor end it)."""

    route = models.CharField(max_length=100)
    source = models.CharField(max_length=200)
    empty_streak = models.IntegerField(default=0)
    last_hit_at = models.DateTimeField(null=True)
    updated_at = models.DateTimeField()

    class Meta:
        app_label = "replay"
        constraints = [
            models.UniqueConstraint(fields=["route", "source"], name="source_health_streak_key")
        ]
