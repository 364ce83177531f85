"""A tenant's host: the API and the tenant's own admin site (its operators)."""

from django.contrib import admin
from django.urls import path

from contextplatform.urls_common import urlpatterns as common

urlpatterns = [*common, path("admin/", admin.site.urls)]

handler400 = "contextplatform.api.handlers.bad_request"
handler403 = "contextplatform.api.handlers.permission_denied"
handler404 = "contextplatform.api.handlers.page_not_found"
handler500 = "contextplatform.api.handlers.server_error"
