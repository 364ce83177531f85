"""A route's evaluation cases and the runs that measured them, in each tenant's schema."""

from __future__ import annotations

from typing import Any

from django.db import models

from contextplatform.routes.models import Route


class EvalCase(models.Model):
    """One question a route should answer with what it names: documents by id, memories and
    text by what the kept items say."""

    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="eval_cases")
    slug = models.CharField(max_length=100)
    position = models.PositiveIntegerField(default=0)
    query = models.TextField()
    user = models.CharField(max_length=200, blank=True, default="")
    session = models.CharField(max_length=200, blank=True, default="")
    expect = models.JSONField(default=dict)

    class Meta:
        ordering = ["route", "position"]
        constraints = [
            models.UniqueConstraint(fields=["route", "slug"], name="eval_case_slug_unique")
        ]

    def __str__(self) -> str:
        return self.slug

    def as_dict(self) -> dict[str, Any]:
        case: dict[str, Any] = {"id": self.slug, "query": self.query}
        if self.user:
            case["user"] = self.user
        if self.session:
            case["session"] = self.session
        case["expect"] = self.expect
        return case


class EvalRun(models.Model):
    QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
    STATUSES = [(s, s) for s in (QUEUED, RUNNING, DONE, FAILED)]
    MANUAL, SAVE = "manual", "save"
    TRIGGERS = [(t, t) for t in (MANUAL, SAVE)]

    id = models.CharField(max_length=40, primary_key=True)
    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="eval_runs")
    route_version = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=STATUSES, default=QUEUED)
    triggered_by = models.CharField(max_length=10, choices=TRIGGERS, default=MANUAL)
    # The route's own context's metrics ("main"): what a run is compared with.
    metrics = models.JSONField(default=dict)
    # When the route has variants: each arm's metrics, main's included ({"main": {...}, "b": {...}});
    # empty for a route without variants.
    arms = models.JSONField(default=dict, blank=True)
    # Each case's outcome on main: hit, what it missed, what was kept (see runner.run_case).
    results = models.JSONField(default=list)
    error = models.TextField(blank=True, default="")
    # The route's version, effective configuration and cases the run measured, hashed: a change
    # that leaves them as they were (or a second layer saved in the same transaction) runs nothing.
    fingerprint = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["route", "status", "-created_at"])]

    def __str__(self) -> str:
        return self.id
