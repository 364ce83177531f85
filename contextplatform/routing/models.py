"""Routes and replay records, in each tenant's schema."""

from __future__ import annotations

from django.db import models

from contextplatform.routing.config import RouteSpec


class Route(models.Model):
    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True, default="")
    context_window = models.PositiveIntegerField(default=128_000)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    model = models.JSONField(default=dict, help_text="Model settings (validated RouteSpec.model).")
    context = models.JSONField(
        default=dict, help_text="Context configuration (validated RouteSpec.context)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def spec(self) -> RouteSpec:
        from contextplatform.routing.config import validate_route_spec

        return validate_route_spec(
            {
                "name": self.name,
                "description": self.description,
                "model": self.model,
                "context": self.context,
            },
            stored=True,
        )


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

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["route", "-created_at"], name="replay_route_time"),
            models.Index(fields=["user_id", "-created_at"], name="replay_user_time"),
            models.Index(fields=["status", "-created_at"], name="replay_status_time"),
        ]

    def __str__(self) -> str:
        return self.id
