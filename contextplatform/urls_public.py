"""The platform host: the API (a key still selects the tenant), and the platform admin."""

from django.contrib import admin
from django.urls import path

from contextplatform.urls_common import urlpatterns as common

urlpatterns = [*common, path("admin/", admin.site.urls)]

handler400 = "contextplatform.core.handlers.bad_request"
handler403 = "contextplatform.core.handlers.permission_denied"
handler404 = "contextplatform.core.handlers.page_not_found"
handler500 = "contextplatform.core.handlers.server_error"
