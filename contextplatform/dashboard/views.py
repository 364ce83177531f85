"""The live metrics page of a tenant's admin site (routed on tenant hosts only, see ``urls.py``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from contextplatform.replay.selectors import latest_replay_records
from contextplatform.replay.source_health_selectors import sources_health
from contextplatform.replay.writer import flush_current_tenant
from contextplatform.resolve.live_events import recorded_call_events, recorded_source_events

SOCKET_PATH = "/ws/metrics/"  # contextplatform.live.websocket_urlpatterns
HEALTH_PATH = "/admin/live/health.json"  # contextplatform.urls
# How many of the latest resolves the page starts with, so that it is not empty until traffic
# arrives; the stream adds to them from there.
HISTORY_RESOLVES = 30


def recent_events(limit: int = HISTORY_RESOLVES) -> list[dict[str, Any]]:
    """The source outcomes of the tenant's latest resolves, and the gateway calls among them,
    oldest first, in the stream's frames."""
    flush_current_tenant()  # the records this process has accepted but not yet written
    records = list(reversed(latest_replay_records(limit)))
    return recorded_source_events(records) + recorded_call_events(records)


def live_dashboard(request: HttpRequest) -> TemplateResponse:
    """The page with the latest resolves drawn; the browser opens the stream itself with the
    admin session."""
    context = {
        **admin.site.each_context(request),
        "title": "Live metrics",
        "socket_path": SOCKET_PATH,
        "history": recent_events(),
        "history_resolves": HISTORY_RESOLVES,
        "health": health_rows(),
        "health_path": HEALTH_PATH,
        "spend_url": reverse("spend-dashboard"),
    }
    return TemplateResponse(request, "dashboard/live.html", context)


def health_rows() -> list[dict[str, Any]]:
    """Each source's health per route (``GET /api/v1/sources/health``'s rows): the page marks
    the sources that raise an alert."""
    return [health.as_dict() for health in sources_health()]


def live_health(request: HttpRequest) -> JsonResponse:
    """The same rows again, for the page to refresh its alerts while it stays open."""
    return JsonResponse({"data": health_rows()})


# Any active staff user of the tenant (the admin's login page otherwise); never cached.
live_dashboard_view = admin.site.admin_view(live_dashboard)
live_health_view = admin.site.admin_view(live_health)
