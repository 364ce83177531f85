"""Middleware that keeps API paths inside the JSON envelope: body size limits and last-resort errors."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse

from contextplatform.core.errors import ApiError, error_response, is_api_path

logger = logging.getLogger("contextplatform.api")

BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


class BodySizeLimitMiddleware:
    """Refuse bodies over ``API_MAX_BODY_BYTES`` with 413 before anything parses them."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method in BODY_METHODS and is_api_path(request.path):
            limit = settings.API_MAX_BODY_BYTES
            too_big = error_response(
                ApiError(
                    "payload_too_large",
                    f"request body exceeds the limit of {limit} bytes",
                    status=413,
                ),
                request.path,
            )
            try:
                declared = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                return error_response(
                    ApiError("invalid_request", "invalid Content-Length header"), request.path
                )
            if declared > limit:
                return too_big
            try:
                body = request.body  # enforces DATA_UPLOAD_MAX_MEMORY_SIZE on chunked bodies too
            except RequestDataTooBig:
                return too_big
            if len(body) > limit:
                return too_big
        return self.get_response(request)


class ApiErrorMiddleware:
    """Any exception that escapes a view on an API path becomes a logged 500 envelope."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_api_path(request.path):
            return None
        if isinstance(exception, ApiError):
            return error_response(exception, request.path)
        logger.exception("unhandled error on %s", request.path)
        return error_response(
            ApiError("internal_error", "internal server error", status=500), request.path
        )
