"""A tenant's host: the API and the tenant's own admin site (its operators)."""

from django.contrib import admin
from django.urls import path

from contextplatform.dashboard.playground import playground_view
from contextplatform.dashboard.spend import spend_page_view
from contextplatform.dashboard.views import live_dashboard_view, live_health_view
from contextplatform.urls_common import urlpatterns as common

urlpatterns = [
    *common,
    # Before the admin's catch-all; the platform host (urls_public.py) has no dashboard.
    path("admin/live/", live_dashboard_view, name="live-dashboard"),
    path("admin/live/health.json", live_health_view, name="live-health"),
    path("admin/playground/", playground_view, name="playground"),
    path("admin/spend/", spend_page_view, name="spend-dashboard"),
    path("admin/", admin.site.urls),
]

handler400 = "contextplatform.core.handlers.bad_request"
handler403 = "contextplatform.core.handlers.permission_denied"
handler404 = "contextplatform.core.handlers.page_not_found"
handler500 = "contextplatform.core.handlers.server_error"
