"""Operators' pages of deployments. The key is a write-only password field: blank keeps the stored
key, "clear" removes it; the page never shows it. Header values are write-only too (as an MCP
server's): a JSON object typed into a field that is never shown again (blank keeps the stored
headers, "remove" clears them); the pages list the header names only. Saves go through the services, validated by the
API's own schema, so the admin accepts exactly what the API accepts. A deployment that routes name
is neither deleted (its page, the bulk action) nor renamed: the page says which routes name it and
nothing changes (``usage``)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.contrib.admin.utils import unquote
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from contextplatform.core.errors import ApiError
from contextplatform.core.form_errors import error_text
from contextplatform.core.json_form_field import BoundedJSONField
from contextplatform.deployments import services, usage
from contextplatform.deployments.errors import DeploymentInUse
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.schema import DeploymentSpec
from tenants.admin import TenantOnlyAdmin, WriteOnlyHeadersForm, write_only_headers

WRITTEN = (
    "name",
    "protocol",
    "base_url",
    "model",
    "timeout_ms",
    "context_window",
    "max_output_tokens",
    "may_judge",
    "price",
    "limits",
)


class DeploymentForm(WriteOnlyHeadersForm):
    api_key = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Write-only: stored encrypted, never shown. Leave blank to keep the stored key.",
    )
    clear_api_key = forms.BooleanField(required=False, label="Remove the stored key")
    headers = write_only_headers("Helicone-Auth")
    price = BoundedJSONField(
        required=False,
        help_text=(
            'USD per million tokens, e.g. {"input_per_mtok": 0.15, "output_per_mtok": 0.6, '
            '"cached_input_per_mtok": 0.075}. Blank: the public price of a known model.'
        ),
    )

    class Meta:
        model = Deployment
        fields = WRITTEN

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        written = {name: cleaned.get(name) for name in WRITTEN}
        if self.typed_headers():
            written["headers"] = cleaned["headers"]
        if cleaned.get("api_key"):
            written["api_key"] = cleaned["api_key"]
        try:
            self.spec = services.parse_deployment(written)
        except ApiError as error:
            for problem in error.every():
                field = (problem.param or "").split(".")[0].split("[")[0]
                self.add_error(field if field in self.fields else None, error_text(problem))
            return cleaned
        stored = self.instance.name if self.instance.pk is not None else None
        if stored and stored != self.spec.name:
            # Said next to the field; the save itself is guarded too (a route written meanwhile).
            refused = usage.refusal(stored, change=f"renamed to {self.spec.name!r}")
            if refused is not None:
                self.add_error("name", refused.message)
        return cleaned

    def key_change(self) -> services.KeyChange:
        if self.cleaned_data.get("api_key"):
            return self.spec.api_key
        return None if self.cleaned_data.get("clear_api_key") else services.KEEP_KEY


@admin.action(permissions=["delete"], description=django_delete_selected.short_description)
def delete_selected(
    modeladmin: DeploymentAdmin, request: HttpRequest, queryset: QuerySet[Deployment]
) -> HttpResponse | None:
    """Django's bulk delete, all or nothing: one selected deployment that routes name keeps every
    one of them (and their log entries) and says why."""
    try:
        with transaction.atomic():
            return django_delete_selected(modeladmin, request, queryset)
    except DeploymentInUse as refused:
        modeladmin.message_user(request, f"Nothing was deleted: {refused.message}", messages.ERROR)
        return None


@admin.register(Deployment)
class DeploymentAdmin(TenantOnlyAdmin):
    form = DeploymentForm
    actions = [delete_selected]  # replaces the site's action of the same name
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
        "headers_stored",
        "calibration",
        "calibration_samples",
        "price_in_effect",
        "created_at",
        "updated_at",
    )
    fieldsets = (
        (None, {"fields": ("name", "protocol", "base_url", "model")}),
        ("Key", {"fields": ("api_key", "clear_api_key", "key_stored")}),
        (
            "Limits",
            {"fields": ("timeout_ms", "context_window", "max_output_tokens", "limits")},
        ),
        ("Price", {"fields": ("price", "price_in_effect")}),
        # Kept by the gateway from the provider's usage; budgets multiply estimates by it.
        ("Token calibration", {"fields": ("calibration", "calibration_samples")}),
        ("Headers", {"fields": ("headers", "clear_headers", "headers_stored")}),
        ("Other", {"fields": ("may_judge", "created_at", "updated_at")}),
    )

    @admin.display(boolean=True, description="key stored")
    def key_stored(self, deployment: Deployment) -> bool:
        return deployment.api_key_set

    @admin.display(description="price in effect")
    def price_in_effect(self, deployment: Deployment) -> str:
        price = deployment.effective_price
        if price is None:
            return "unpriced: costs are unknown"
        source = "this deployment's" if deployment.price is not None else "the model's public"
        cached = price.cached_input_per_mtok
        return (
            f"{source} price: ${price.input_per_mtok}/M input, ${price.output_per_mtok}/M output"
            + (f", ${cached}/M cached input" if cached is not None else "")
        )

    @admin.display(description="headers stored")
    def headers_stored(self, deployment: Deployment) -> str:
        return ", ".join(deployment.header_names) or "none"

    def save_model(self, request: HttpRequest, obj: Deployment, form: Any, change: bool) -> None:
        spec: DeploymentSpec = form.spec
        try:
            if change:
                original = Deployment.objects.get(pk=obj.pk)
                saved = services.update_deployment(
                    deployment=original,
                    spec=spec,
                    api_key=form.key_change(),
                    replace_headers=form.replace_headers(),
                )
            else:
                saved = services.create_deployment(spec=spec, api_key=form.key_change())
        except DeploymentInUse:
            raise  # changeform_view says it on the page
        except ApiError as error:  # a concurrent save of the same name
            raise forms.ValidationError(error.message) from None
        obj.pk, obj.created_at, obj.updated_at = saved.pk, saved.created_at, saved.updated_at

    def _change_url(self, object_id: str) -> str:
        opts = self.model._meta
        return reverse(
            f"admin:{opts.app_label}_{opts.model_name}_change",
            args=[object_id],
            current_app=self.admin_site.name,
        )

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except DeploymentInUse as refused:  # named between the form's check and the save
            self.message_user(request, refused.message, messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The delete page refuses a deployment that routes name before asking to confirm (when
        the user may delete at all: the page's own checks come first); the confirmed delete is
        refused by the guard, rolled back whole, with the same words."""
        if request.method == "GET":
            deployment = self.get_object(request, unquote(object_id))
            if deployment is not None and self.has_delete_permission(request, deployment):
                refused = usage.refusal(deployment.name)
                if refused is not None:
                    self.message_user(request, refused.message, messages.ERROR)
                    return HttpResponseRedirect(self._change_url(object_id))
        try:
            return super().delete_view(request, object_id, extra_context)
        except DeploymentInUse as refused:
            self.message_user(request, refused.message, messages.ERROR)
            return HttpResponseRedirect(self._change_url(object_id))
