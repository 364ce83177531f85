"""The replay record: what one resolve did, kept for the auditors (the table of the routing app)."""

from __future__ import annotations

from django.db import models


class ReplayRecord(models.Model):
    """What one resolve did: sources, items with their decisions, budget. Content only if captured."""

    STATUS_CHOICES = [("ok", "ok"), ("partial", "partial"), ("refused", "refused")]

    id = models.CharField(primary_key=True, max_length=40)
    route = models.CharField(max_length=100)
    user_id = models.CharField(max_length=200, blank=True, default="")
    session_key = models.CharField(max_length=200, blank=True, default="")
    status = models.CharField(max_length=16, choices=STATUS_CHOICES)
    format = models.CharField(max_length=16)
    created_at = models.DateTimeField(db_index=True)
    duration_ms = models.FloatField()
    sources = models.JSONField(default=list)
    items = models.JSONField(default=list)
    budget = models.JSONField(default=dict)
    tokens = models.JSONField(default=dict)
    compression = models.JSONField(default=dict)
    error = models.JSONField(null=True, blank=True)
    request_body = models.JSONField(null=True, blank=True)
    rewritten_body = models.JSONField(null=True, blank=True)
    response_received_at = models.DateTimeField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True)
    # The calls of the platform's own tools the gateway served (vsr_context_retrieve, lazy
    # sources' search tools): tool, round, status and what it returned, never the content.
    tool_calls = models.JSONField(default=list, blank=True)
    # The arm of the route's traffic split this resolve ran ("main": the route's own context).
    variant = models.CharField(max_length=64, default="main", blank=True)
    # What the call spent, as columns so that spend is summed in SQL (``replay.spend_selectors``):
    # the provider's usage over every upstream call of the request (tool-loop rounds included),
    # its cost at the answering deployment's price plus the judge's calls (None: unpriced), the
    # deployment that answered and the API key that made the call.
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cached_input_tokens = models.PositiveIntegerField(default=0)
    cache_write_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.FloatField(null=True, blank=True)
    deployment = models.CharField(max_length=100, blank=True, default="")
    key_id = models.BigIntegerField(null=True, blank=True)
    # The whole call the gateway carried, the deployment's answer included (``duration_ms`` is
    # the resolve's alone); None where the platform did not carry the call (REST resolve).
    call_ms = models.FloatField(null=True, blank=True)

    class Meta:
        app_label = "routing"  # its table and admin pages kept their names when it moved apps
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["created_at", "route"], name="replay_spend_time"),
            models.Index(fields=["route", "-created_at"], name="replay_route_time"),
            models.Index(fields=["user_id", "-created_at"], name="replay_user_time"),
            models.Index(fields=["status", "-created_at"], name="replay_status_time"),
        ]

    def __str__(self) -> str:
        return self.id


class Feedback(models.Model):
    """An application's verdict on one resolve (thumbs up, neutral, down), one per record: a
    second verdict replaces the first."""

    SCORES = [(1, "up"), (0, "neutral"), (-1, "down")]
    MAX_COMMENT = 2000

    record = models.OneToOneField(
        ReplayRecord, on_delete=models.CASCADE, related_name="feedback", db_index=True
    )
    score = models.SmallIntegerField(choices=SCORES)
    comment = models.TextField(blank=True, default="", max_length=MAX_COMMENT)
    # The API key that gave it, so a verdict can be traced to an application.
    key_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "routing"  # beside the records it judges
        constraints = [
            models.CheckConstraint(
                condition=models.Q(score__in=(-1, 0, 1)), name="feedback_score_range"
            )
        ]

    def __str__(self) -> str:
        return f"{self.record_id}: {self.score:+d}"


# The counts behind each source's health (``contextplatform/replay/source_health/``).
from contextplatform.replay.source_health.models import (  # noqa: E402
    SourceHealthMinute,
    SourceHealthStreak,
)

__all__ = ["Feedback", "ReplayRecord", "SourceHealthMinute", "SourceHealthStreak"]
