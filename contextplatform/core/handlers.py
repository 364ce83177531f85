"""Django's 404/500 handlers: the JSON envelope on API paths, Django's pages elsewhere."""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from contextplatform.core.errors import envelope, error_response, is_api_path, not_found
from contextplatform.core.middleware import DATABASE_ERRORS, database_unavailable


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api_path(request.path):
        # In the shape the path's callers read (a provider's under /v1/, the envelope elsewhere).
        missing = not_found(f"no such endpoint: {request.path}")
        return error_response(missing, request.path, request)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if is_api_path(request.path):
        # Django calls this inside the except clause of what was raised (asgiref re-raises it on
        # the thread it runs this on): the database unreachable before any view ran is a 503 too.
        error = sys.exc_info()[1]
        if isinstance(error, DATABASE_ERRORS):
            return database_unavailable(request.path, error)
        return JsonResponse(envelope("internal_error", "internal server error"), status=500)
    return defaults.server_error(request)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api_path(request.path):
        return JsonResponse(
            envelope("invalid_request", str(exception) or "bad request"), status=400
        )
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api_path(request.path):
        return JsonResponse(envelope("forbidden", str(exception) or "forbidden"), status=403)
    return defaults.permission_denied(request, exception)
