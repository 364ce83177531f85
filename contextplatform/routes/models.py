"""Routes and the configuration layers beneath them (recipes, the tenant defaults), in each tenant's schema."""

from __future__ import annotations

from typing import Any

from django.db import models

from contextplatform.routes.configuration.schema import RouteSpec


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
    variants = models.JSONField(
        default=list,
        blank=True,
        help_text="Arms splitting the route's traffic: name, weight and each one's own context "
        "layer (validated as RouteSpec.variants, each layered as the route's own context is).",
    )
    # How many times the route was saved: an evaluation run names the version it measured.
    version = models.PositiveIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Every save is a new version, whichever path wrote it (API, admin, import)."""
        self.version = (self.version or 0) + 1
        fields = kwargs.get("update_fields")
        if fields is not None:
            kwargs["update_fields"] = {*fields, "version"}
        super().save(*args, **kwargs)

    # The tenant defaults' context, when the query read them along (``selectors.with_layers``).
    DEFAULTS_ANNOTATION = "defaults_context"

    def inherited_context(self, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
        """Tenant defaults, then the recipe: what the route's own layer is merged onto, i.e. what
        a field it does not write stands for (unvalidated).

        ``defaults`` saves a query when the caller has already read the tenant defaults; so does a
        route read by ``selectors.with_layers``."""
        from contextplatform.routes.configuration.layering import effective_context

        if defaults is None:
            if hasattr(self, self.DEFAULTS_ANNOTATION):
                defaults = getattr(self, self.DEFAULTS_ANNOTATION) or {}
            else:
                defaults = TenantDefaults.current_context()
        recipe = self.recipe.context if self.recipe_id is not None else None
        return effective_context(defaults, recipe)

    def effective_context(self, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
        """Tenant defaults, then the recipe, then the route, merged field by field (unvalidated)."""
        from contextplatform.routes.configuration.layering import effective_context

        return effective_context(self.inherited_context(defaults), self.context)

    def spec(self, defaults: dict[str, Any] | None = None) -> RouteSpec:
        """The route as resolve runs it: its effective context configuration, validated."""
        from contextplatform.routes.configuration.layering import (
            effective_context,
            layered_variants,
        )
        from contextplatform.routes.configuration.schema import validate_route_spec

        inherited = self.inherited_context(defaults)
        return validate_route_spec(
            {
                "name": self.name,
                "description": self.description,
                "model": self.model,
                "recipe": self.recipe.name if self.recipe_id is not None else None,
                "context": effective_context(inherited, self.context),
                "variants": layered_variants(self.variants or [], inherited),
            },
            stored=True,
        )
