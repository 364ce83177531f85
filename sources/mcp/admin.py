"""Operators' pages of MCP servers. Header values are write-only: a JSON object typed into a field
that is never shown again (blank keeps the stored headers; "remove" clears them); the pages list
the header names only. Saves go through the services, validated by the API's own schema, so the
admin accepts exactly what the API accepts.

"Test connection" (``<id>/test-connection/``) connects to the server as a source would (through the
tenant's outbound allow-list, with its headers) and lists its resources, resource templates and
tools, or the error. It makes outbound calls with the tenant's credentials, so it needs the right to
change the server (operators), and it connects only when asked (a POST), never on opening.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from contextplatform.core.errors import ApiError
from contextplatform.core.form_errors import error_text
from sources.mcp import client, selectors, services
from sources.mcp_config import McpServerSpec
from sources.models import McpServer
from tenants.admin import TenantOnlyAdmin, WriteOnlyHeadersForm, write_only_headers

WRITTEN = ("name", "url", "timeout_ms")


class McpServerForm(WriteOnlyHeadersForm):
    headers = write_only_headers("Authorization")

    class Meta:
        model = McpServer
        fields = WRITTEN

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        written: dict[str, Any] = {name: cleaned.get(name) for name in WRITTEN}
        if written["timeout_ms"] is None:
            del written["timeout_ms"]
        if self.typed_headers():
            written["headers"] = cleaned["headers"]
        try:
            self.spec: McpServerSpec = services.parse_server(written)
        except ApiError as error:
            for problem in error.every():
                field = (problem.param or "").split(".")[0].split("[")[0]
                self.add_error(field if field in self.fields else None, error_text(problem))
        return cleaned


@admin.register(McpServer)
class McpServerAdmin(TenantOnlyAdmin):
    form = McpServerForm
    change_form_template = "admin/sources/mcpserver/change_form.html"
    list_display = ("name", "url", "timeout_ms", "headers_stored", "updated_at")
    search_fields = ("name", "url")
    readonly_fields = ("headers_stored", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "url", "timeout_ms")}),
        ("Headers", {"fields": ("headers", "clear_headers", "headers_stored")}),
        ("Other", {"fields": ("created_at", "updated_at")}),
    )

    @admin.display(description="headers stored")
    def headers_stored(self, server: McpServer) -> str:
        return ", ".join(server.header_names) or "none"

    def save_model(self, request: HttpRequest, obj: McpServer, form: Any, change: bool) -> None:
        spec: McpServerSpec = form.spec
        try:
            if change:
                original = McpServer.objects.get(pk=obj.pk)
                saved = services.update_server(
                    server=original, spec=spec, replace_headers=form.replace_headers()
                )
            else:
                saved = services.create_server(spec=spec)
        except ApiError as error:  # a concurrent save of the same name
            raise forms.ValidationError(error.message) from None
        obj.pk, obj.created_at, obj.updated_at = saved.pk, saved.created_at, saved.updated_at

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        test = path(
            "<path:object_id>/test-connection/",
            self.admin_site.admin_view(self.test_connection_view),
            name=f"{info[0]}_{info[1]}_test_connection",
        )
        return [test, *super().get_urls()]

    def test_connection_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        server = self.get_object(request, unquote(object_id))
        if server is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_change_permission(request, server):
            raise PermissionDenied
        description, error = None, None
        if request.method == "POST":
            description, error = test_connection(request, server)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Test connection: {server.name}",
            "opts": self.opts,
            "original": server,
            "tested": request.method == "POST",
            "description": description,
            "error": error,
        }
        return TemplateResponse(request, "admin/sources/mcpserver/test_connection.html", context)


def test_connection(
    request: HttpRequest, server: McpServer
) -> tuple[client.ServerDescription | None, str | None]:
    """What the server offers, or why it could not be reached (the MCP client's own words)."""
    tenant = request.tenant  # type: ignore[attr-defined]  (set by the tenant middleware)
    try:
        endpoint = selectors.http_endpoint(server, connection.schema_name)
        return async_to_sync(client.describe)(endpoint, tenant.outbound_allowlist), None
    except (client.McpError, selectors.HeadersUnreadable) as error:
        return None, str(error)
