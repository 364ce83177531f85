"""The live metrics page of a tenant's admin site (routed on tenant hosts only, see ``urls.py``)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse

SOCKET_PATH = "/ws/metrics/"  # contextplatform.live.websocket_urlpatterns


def live_dashboard(request: HttpRequest) -> TemplateResponse:
    """The page only; the browser opens the stream itself with the admin session."""
    context = {
        **admin.site.each_context(request),
        "title": "Live source metrics",
        "socket_path": SOCKET_PATH,
    }
    return TemplateResponse(request, "dashboard/live.html", context)


# Any active staff user of the tenant (the admin's login page otherwise); never cached.
live_dashboard_view = admin.site.admin_view(live_dashboard)
