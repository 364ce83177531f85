"""The page at ``/`` of every host: what the product is and where its pages are (the admin, the
API's documentation and, on a tenant's host, the live dashboard). The admin's "View site" leads
here."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse

PRODUCT = "Context Platform"


def admin_of(request: HttpRequest) -> str:
    """Whose admin this host serves, in the words of the pages: the tenant's name, or platform."""
    tenant = getattr(request, "tenant", None)
    if tenant is None or connection.schema_name == "public":
        return "platform"
    return str(tenant.name)


def home(request: HttpRequest) -> TemplateResponse:
    try:
        live = reverse("live-dashboard")
    except NoReverseMatch:  # the platform host has no dashboard
        live = None
    context = {"product": PRODUCT, "admin_of": admin_of(request), "live_dashboard_url": live}
    return TemplateResponse(request, "dashboard/home.html", context)
