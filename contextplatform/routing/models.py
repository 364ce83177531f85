"""Routes, their configuration layers and replay records, in each tenant's schema."""

from __future__ import annotations

from typing import Any

from django.db import models

from contextplatform.routing.configuration.schema import RouteSpec


class TenantDefaults(models.Model):
    """The tenant's default context configuration: the least specific layer (one row)."""

    SINGLETON_ID = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON_ID, editable=False)
    context = models.JSONField(
        default=dict, help_text="A partial context configuration every route layers on."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "tenant defaults"
        constraints = [
            models.CheckConstraint(condition=models.Q(id=1), name="tenant_defaults_single_row")
        ]

    def __str__(self) -> str:
        return "tenant defaults"

    @classmethod
    def current_context(cls) -> dict[str, Any]:
        row = cls.objects.filter(pk=cls.SINGLETON_ID).only("context").first()
        return row.context if row else {}


class Recipe(models.Model):
    """A named partial context configuration, layered between the tenant defaults and a route."""

    name = models.CharField(max_length=100, unique=True)
    context = models.JSONField(default=dict, help_text="A partial context configuration.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Route(models.Model):
    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True, default="")
    context_window = models.PositiveIntegerField(default=128_000)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    model = models.JSONField(default=dict, help_text="Model settings (validated RouteSpec.model).")
    context = models.JSONField(
        default=dict,
        help_text="The route's own context configuration, layered on its recipe and the tenant "
        "defaults (what the route writes; validated as part of the effective RouteSpec.context).",
    )
    recipe = models.ForeignKey(
        Recipe, null=True, blank=True, on_delete=models.PROTECT, related_name="routes"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    # The tenant defaults' context, when the query read them along (``selectors.with_layers``).
    DEFAULTS_ANNOTATION = "defaults_context"

    def inherited_context(self, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
        """Tenant defaults, then the recipe: what the route's own layer is merged onto, i.e. what
        a field it does not write stands for (unvalidated).

        ``defaults`` saves a query when the caller has already read the tenant defaults; so does a
        route read by ``selectors.with_layers``."""
        from contextplatform.routing.configuration.layering import effective_context

        if defaults is None:
            if hasattr(self, self.DEFAULTS_ANNOTATION):
                defaults = getattr(self, self.DEFAULTS_ANNOTATION) or {}
            else:
                defaults = TenantDefaults.current_context()
        recipe = self.recipe.context if self.recipe_id is not None else None
        return effective_context(defaults, recipe)

    def effective_context(self, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
        """Tenant defaults, then the recipe, then the route, merged field by field (unvalidated)."""
        from contextplatform.routing.configuration.layering import effective_context

        return effective_context(self.inherited_context(defaults), self.context)

    def spec(self, defaults: dict[str, Any] | None = None) -> RouteSpec:
        """The route as resolve runs it: its effective context configuration, validated."""
        from contextplatform.routing.configuration.schema import validate_route_spec

        return validate_route_spec(
            {
                "name": self.name,
                "description": self.description,
                "model": self.model,
                "recipe": self.recipe.name if self.recipe_id is not None else None,
                "context": self.effective_context(defaults),
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
    # The calls of the platform's own tools the gateway served (vsr_context_retrieve, lazy
    # sources' search tools): tool, round, status and what it returned, never the content.
    tool_calls = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["route", "-created_at"], name="replay_route_time"),
            models.Index(fields=["user_id", "-created_at"], name="replay_user_time"),
            models.Index(fields=["status", "-created_at"], name="replay_status_time"),
        ]

    def __str__(self) -> str:
        return self.id


class SessionSpend(models.Model):
    """What one session (of one user) has spent against its route's ``budget.session_max_tokens``
    and what its calls in flight have reserved. The gateway writes it only in single atomic SQL
    statements (``gateway/budgets.py``), so concurrent calls can never reserve past the limit."""

    session_key = models.CharField(max_length=200)
    user_id = models.CharField(max_length=200, blank=True, default="")
    spent = models.BigIntegerField(default=0)
    reserved = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session_key", "user_id"], name="session_spend_session_user_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(spent__gte=0, reserved__gte=0),
                name="session_spend_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_key} ({self.user_id or 'anonymous'}): {self.spent} spent"
