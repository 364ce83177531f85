from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError
from django.db import connection, models
from django.http import HttpRequest

from contextplatform.core.json_form_field import BoundedJSONField
from tenants.models import ApiKey, Domain, Tenant
from tenants.selectors import admins_signing_in
from tenants.services import issue_api_key


class WriteOnlyTextarea(forms.Textarea):
    """A textarea that never renders a value: what was typed into it (headers holding
    credentials) is not sent back."""

    def format_value(self, value: Any) -> str | None:
        return None


def write_only_headers(example: str) -> BoundedJSONField:
    """The field of an outbound call's headers, whose values may be credentials: a JSON object
    typed in and never shown again (``example`` names a header the form's model is sent)."""
    return BoundedJSONField(
        required=False,
        widget=WriteOnlyTextarea(attrs={"rows": 3, "autocomplete": "off", "spellcheck": "false"}),
        help_text=(
            f'Write-only, as JSON: {{"{example}": "Bearer ..."}}. Stored encrypted, never shown. '
            "Leave blank to keep the stored headers; what you type replaces them all."
        ),
    )


class WriteOnlyHeadersForm(forms.ModelForm):
    """A model's form with write-only ``headers`` (the subclass declares the field with
    ``write_only_headers``): blank keeps the stored headers, what is typed replaces them all,
    "remove" clears them."""

    clear_headers = forms.BooleanField(required=False, label="Remove the stored headers")

    def typed_headers(self) -> bool:
        return self.cleaned_data.get("headers") not in (None, "", {})

    def replace_headers(self) -> bool:
        return self.typed_headers() or bool(self.cleaned_data.get("clear_headers"))


def on_public_schema(request: HttpRequest) -> bool:
    return connection.schema_name == "public"


def served_admin_hint(request: HttpRequest | None) -> str:
    """Which admin this host serves: a tenant's users exist only in their tenant's schema, so
    signing in on another host is refused by this host's backend. The page is shown to anyone,
    signed in or not, so it never lists the tenants or their hosts (``signed_in_elsewhere`` names
    a host only to the one who typed that account's password)."""
    tenant = getattr(request, "tenant", None)
    if tenant is not None and not on_public_schema(request):  # type: ignore[arg-type]
        return (
            f"This host serves the admin of the tenant {tenant.name}: its own users sign in "
            "here; the platform's administrators sign in on the platform host (any host that "
            "is not a tenant's)."
        )
    return (
        "This host serves the platform's admin (tenants and API keys), for platform "
        "administrators. A tenant's users sign in on their tenant's own host (the domain the "
        "platform's administrators gave the tenant, such as demo.localhost for the demo)."
    )


def signed_in_elsewhere(request: HttpRequest | None, cleaned: dict[str, Any]) -> str:
    """What a refused login says when its username and password are right on another host's
    admin: not that the password is wrong, but where that account signs in."""
    username, password = cleaned.get("username"), cleaned.get("password")
    if not username or not password:
        return ""
    here = connection.schema_name
    hosts = admins_signing_in(username, password, other_than=here)
    if not hosts:
        return ""
    tenant = getattr(request, "tenant", None)
    if here == "public" or tenant is None:
        where = "this host serves the platform's admin"
    else:
        where = f"this host serves the admin of the tenant {tenant.name}"
    return (
        f"This account belongs to another host's admin, not this one ({where}): sign in on "
        f"{' or '.join(hosts)}."
    )


class HostAwareLoginForm(AdminAuthenticationForm):
    """The admin's login: a refused login also says which admin this host serves."""

    def clean(self) -> dict[str, Any]:
        try:
            return super().clean()
        except ValidationError as error:
            if error.code != "invalid_login":
                raise
            elsewhere = signed_in_elsewhere(self.request, self.cleaned_data)
            if elsewhere:
                raise ValidationError(elsewhere, code="other_host") from None
            hint = served_admin_hint(self.request)
            raise ValidationError(
                f"{' '.join(error.messages)} {hint}", code="invalid_login"
            ) from None


admin.site.login_form = HostAwareLoginForm
# The product's name, not Django's; each page also names whose admin the host serves
# (templates/admin/base_site.html). "View site" leads to the page at / (dashboard.home).
admin.site.site_header = "Context Platform"
admin.site.site_title = "Context Platform"
admin.site.index_title = "Administration"
admin.site.site_url = "/"


class SchemaScopedAdmin(admin.ModelAdmin):
    """Shown and usable only on the hosts whose schema holds the model's rows: every permission,
    not only viewing, so that no add or change form posts into the wrong schema. Every JSON field
    under the boundary's limits of nesting, numbers and text, as the REST API's bodies."""

    formfield_overrides = {models.JSONField: {"form_class": BoundedJSONField}}

    def served_here(self, request: HttpRequest) -> bool:
        raise NotImplementedError

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.served_here(request) and super().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return self.served_here(request) and super().has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.served_here(request) and super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return self.served_here(request) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return self.served_here(request) and super().has_delete_permission(request, obj)


class TenantOnlyAdmin(SchemaScopedAdmin):
    """Tenant data is managed on the tenant's own host, never on the platform host."""

    def served_here(self, request: HttpRequest) -> bool:
        return not on_public_schema(request)


class PublicOnlyAdmin(SchemaScopedAdmin):
    """Platform models are managed on the platform host only, never from a tenant's admin."""

    def served_here(self, request: HttpRequest) -> bool:
        return on_public_schema(request)


class DomainInline(admin.TabularInline):
    model = Domain
    extra = 0


@admin.register(Tenant)
class TenantAdmin(PublicOnlyAdmin):
    list_display = ("name", "schema_name", "capture_content", "outbound_allowlist", "created_at")
    inlines = [DomainInline]


@admin.register(ApiKey)
class ApiKeyAdmin(PublicOnlyAdmin):
    list_display = (
        "tenant",
        "name",
        "prefix",
        "scopes",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at")
    fields = (
        "tenant",
        "name",
        "scopes",
        "prefix",
        "key_hash",
        "created_at",
        "last_used_at",
        "revoked_at",
    )

    def save_model(self, request: HttpRequest, obj: ApiKey, form, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        issued = issue_api_key(tenant=obj.tenant, scopes=obj.scopes or None, name=obj.name)
        obj.pk = issued.api_key.pk
        messages.warning(request, f"API key (shown once, store it now): {issued.plain_key}")
