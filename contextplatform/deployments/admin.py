"""Operators' pages of deployments. The key is a write-only password field: blank keeps the stored
key, "clear" removes it; the page never shows it. Saves go through the services, validated by the
API's own schema, so the admin accepts exactly what the API accepts."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from contextplatform.core.errors import ApiError
from contextplatform.core.form_errors import error_text
from contextplatform.deployments import services
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.schema import DeploymentSpec
from tenants.admin import TenantOnlyAdmin

WRITTEN = (
    "name",
    "protocol",
    "base_url",
    "model",
    "timeout_ms",
    "context_window",
    "max_output_tokens",
    "headers",
    "may_judge",
)


class DeploymentForm(forms.ModelForm):
    api_key = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Write-only: stored encrypted, never shown. Leave blank to keep the stored key.",
    )
    clear_api_key = forms.BooleanField(required=False, label="Remove the stored key")

    class Meta:
        model = Deployment
        fields = WRITTEN

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        written = {name: cleaned.get(name) for name in WRITTEN}
        if written["headers"] is None:
            written["headers"] = {}
        if cleaned.get("api_key"):
            written["api_key"] = cleaned["api_key"]
        try:
            self.spec = services.parse_deployment(written)
        except ApiError as error:
            for problem in error.every():
                field = (problem.param or "").split(".")[0].split("[")[0]
                self.add_error(field if field in self.fields else None, error_text(problem))
        return cleaned

    def key_change(self) -> services.KeyChange:
        if self.cleaned_data.get("api_key"):
            return self.spec.api_key
        return None if self.cleaned_data.get("clear_api_key") else services.KEEP_KEY


@admin.register(Deployment)
class DeploymentAdmin(TenantOnlyAdmin):
    form = DeploymentForm
    list_display = (
        "name",
        "protocol",
        "base_url",
        "model",
        "key_stored",
        "may_judge",
        "calibration",
        "updated_at",
    )
    search_fields = ("name", "base_url", "model")
    list_filter = ("protocol", "may_judge")
    readonly_fields = (
        "key_stored",
        "calibration",
        "calibration_samples",
        "created_at",
        "updated_at",
    )
    fieldsets = (
        (None, {"fields": ("name", "protocol", "base_url", "model")}),
        ("Key", {"fields": ("api_key", "clear_api_key", "key_stored")}),
        ("Limits", {"fields": ("timeout_ms", "context_window", "max_output_tokens")}),
        # Kept by the gateway from the provider's usage; budgets multiply estimates by it.
        ("Token calibration", {"fields": ("calibration", "calibration_samples")}),
        ("Other", {"fields": ("headers", "may_judge", "created_at", "updated_at")}),
    )

    @admin.display(boolean=True, description="key stored")
    def key_stored(self, deployment: Deployment) -> bool:
        return deployment.api_key_set

    def save_model(self, request: HttpRequest, obj: Deployment, form: Any, change: bool) -> None:
        spec: DeploymentSpec = form.spec
        try:
            if change:
                original = Deployment.objects.get(pk=obj.pk)
                saved = services.update_deployment(
                    deployment=original, spec=spec, api_key=form.key_change()
                )
            else:
                saved = services.create_deployment(spec=spec, api_key=form.key_change())
        except ApiError as error:  # a concurrent save of the same name
            raise forms.ValidationError(error.message) from None
        obj.pk, obj.created_at, obj.updated_at = saved.pk, saved.created_at, saved.updated_at
