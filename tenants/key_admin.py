"""The tenant admin's page of its own API keys (the platform admin keeps ``ApiKey``'s page of every
tenant's): the list (name, prefix, scopes, expiry, last use, this period's spend against the
budget, status), a create form whose answer shows the plain key once, an edit form of the scopes,
expiry, limits, budget and metadata, and the actions rotate and revoke. Keys are read through
``selectors.tenant_keys`` and written through the services with the API's own schema, so the page
accepts exactly what ``/api/v1/keys`` accepts. A key is never deleted here: revoked, it stays."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from contextplatform.core.errors import ApiError
from contextplatform.core.form_errors import error_text
from contextplatform.core.json_form_field import BoundedJSONField
from contextplatform.core.validation import parse
from tenants import key_services, selectors
from tenants.admin import TenantOnlyAdmin
from tenants.key_schema import KeySpec
from tenants.models import BUDGET_PERIODS, TenantApiKey
from tenants.scopes import ALL_SCOPES

# The tenant's administrators hold every scope: what a key of theirs may be granted.
ADMIN_SCOPES = frozenset(ALL_SCOPES)

FORM_FIELDS = (
    "name",
    "scopes",
    "expires_at",
    "rate_limit_rpm",
    "rate_limit_tpm",
    "budget_max_usd",
    "budget_max_tokens",
    "budget_period",
    "metadata",
)


class TenantKeyForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=[(scope, scope) for scope in ALL_SCOPES],
        widget=forms.CheckboxSelectMultiple,
        initial=["resolve"],  # a new key calls the gateway and resolves, unless told otherwise
    )
    budget_period = forms.ChoiceField(choices=[(p, p) for p in BUDGET_PERIODS], initial="month")
    metadata = BoundedJSONField(required=False, help_text='A JSON object, e.g. {"team": "web"}.')

    class Meta:
        model = TenantApiKey
        fields = FORM_FIELDS
        labels = {
            "rate_limit_rpm": "Requests a minute",
            "rate_limit_tpm": "Tokens a minute",
            "budget_max_usd": "Budget (USD)",
            "budget_max_tokens": "Budget (tokens)",
        }

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        max_usd = cleaned.get("budget_max_usd")
        has_budget = max_usd is not None or cleaned.get("budget_max_tokens") is not None
        written = {
            "name": cleaned.get("name") or "",
            "scopes": list(cleaned.get("scopes") or []),
            "expires_at": cleaned.get("expires_at"),
            "rate_limit": {
                "rpm": cleaned.get("rate_limit_rpm"),
                "tpm": cleaned.get("rate_limit_tpm"),
            },
            "budget": {
                "max_usd": float(max_usd) if max_usd is not None else None,
                "max_tokens": cleaned.get("budget_max_tokens"),
                "period": cleaned.get("budget_period") or "month",
            }
            if has_budget
            else None,
            "metadata": cleaned.get("metadata") or {},
        }
        try:
            self.spec = parse(KeySpec, written)
        except ApiError as error:
            for problem in error.every():
                param = (problem.param or "").replace("rate_limit.", "rate_limit_")
                field = param.replace("budget.", "budget_").split("[")[0]
                self.add_error(field if field in self.fields else None, error_text(problem))
            return cleaned
        expires_at = self.spec.expires_at
        changed = self.instance.pk is None or "expires_at" in self.changed_data
        if expires_at is not None and changed and expires_at <= timezone.now():
            self.add_error("expires_at", "must be in the future")
        return cleaned


@admin.action(permissions=["change"], description="Revoke the selected keys")
def revoke_selected(
    modeladmin: TenantApiKeyAdmin, request: HttpRequest, queryset: QuerySet[TenantApiKey]
) -> None:
    revoked = 0
    for api_key in queryset:
        if api_key.revoked_at is None:
            key_services.revoke_key(api_key=api_key)
            revoked += 1
    modeladmin.message_user(request, f"Revoked {revoked} key(s); they are refused from now on.")


@admin.action(
    permissions=["change"],
    description="Rotate the selected keys (new keys; the old ones revoked at once)",
)
def rotate_selected(
    modeladmin: TenantApiKeyAdmin, request: HttpRequest, queryset: QuerySet[TenantApiKey]
) -> None:
    for api_key in queryset:
        if api_key.revoked_at is not None:
            modeladmin.message_user(
                request,
                f"{api_key.name} ({api_key.prefix}…) is revoked: not rotated",
                messages.ERROR,
            )
            continue
        issued = key_services.rotate_key(api_key=api_key, granter_scopes=ADMIN_SCOPES)
        modeladmin.message_user(
            request,
            f"New key for {api_key.name} (shown once, store it now; the old one is revoked): "
            f"{issued.plain_key}",
            messages.WARNING,
        )


@admin.register(TenantApiKey)
class TenantApiKeyAdmin(TenantOnlyAdmin):
    form = TenantKeyForm
    actions = [rotate_selected, revoke_selected]
    list_display = (
        "name",
        "prefix",
        "scope_list",
        "expires_at",
        "last_used_at",
        "spent_vs_budget",
        "status",
    )
    readonly_fields = (
        "prefix",
        "status",
        "spent_vs_budget",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    fieldsets = (
        (None, {"fields": ("name", "scopes", "expires_at")}),
        ("Rate limit", {"fields": ("rate_limit_rpm", "rate_limit_tpm")}),
        (
            "Budget",
            {"fields": ("budget_max_usd", "budget_max_tokens", "budget_period", "spent_vs_budget")},
        ),
        ("Metadata", {"fields": ("metadata",)}),
        ("State", {"fields": ("prefix", "status", "created_at", "last_used_at", "revoked_at")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[TenantApiKey]:
        return selectors.tenant_keys(request.tenant, TenantApiKey)  # type: ignore[attr-defined]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoked, a key stays: its history and spend with it

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @admin.display(description="Scopes")
    def scope_list(self, obj: TenantApiKey) -> str:
        return ", ".join(obj.scopes)

    @admin.display(description="Spent this period / budget")
    def spent_vs_budget(self, obj: TenantApiKey) -> str:
        if obj.pk is None or not obj.has_budget:
            return "no budget"
        tokens, usd = selectors.current_spend([obj]).get(obj.pk, (0, 0))
        parts = []
        if obj.budget_max_tokens is not None:
            parts.append(f"{tokens} / {obj.budget_max_tokens} tokens")
        if obj.budget_max_usd is not None:
            parts.append(f"${float(usd):.4f} / ${float(obj.budget_max_usd):.2f}")
        return f"{'; '.join(parts)} ({obj.budget_period})"

    def save_model(self, request: HttpRequest, obj: TenantApiKey, form: Any, change: bool) -> None:
        spec = form.spec
        if change:
            stored = selectors.tenant_keys(request.tenant).get(pk=obj.pk)  # type: ignore[attr-defined]
            key_services.update_key(api_key=stored, spec=spec, granter_scopes=ADMIN_SCOPES)
            return
        issued = key_services.create_key(
            tenant=request.tenant,  # type: ignore[attr-defined]
            spec=spec,
            granter_scopes=ADMIN_SCOPES,
        )
        obj.pk, obj.tenant, obj.prefix = (
            issued.api_key.pk,
            issued.api_key.tenant,
            issued.api_key.prefix,
        )
        messages.warning(request, f"API key (shown once, store it now): {issued.plain_key}")

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass  # no relations: the services saved the key
