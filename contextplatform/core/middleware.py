"""Middleware that keeps API paths inside the JSON envelope: body size limits and last-resort errors.

Both run on either stack: on Django's async one they are coroutines (no trip to a thread), on the
synchronous one (the test client) plain calls."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse

from contextplatform.core.errors import ApiError, error_response, is_api_path

logger = logging.getLogger("contextplatform.api")

BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


class BothStacks:
    """A middleware that is a coroutine on an async stack and a plain call on a sync one."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        refusal = self.refusal(request)
        if self.is_async:
            return self._respond_async(request, refusal)
        return refusal or self.get_response(request)

    async def _respond_async(self, request: HttpRequest, refusal: HttpResponse | None) -> Any:
        return refusal or await self.get_response(request)

    def refusal(self, request: HttpRequest) -> HttpResponse | None:
        """The response that ends the request here, before the view; None lets it through."""
        return None


class BodySizeLimitMiddleware(BothStacks):
    """Refuse bodies over ``API_MAX_BODY_BYTES`` with 413 before anything parses them (the body is
    already in memory or a spooled file: reading it does not block the event loop on the
    network)."""

    def refusal(self, request: HttpRequest) -> HttpResponse | None:
        if request.method not in BODY_METHODS or not is_api_path(request.path):
            return None
        limit = settings.API_MAX_BODY_BYTES
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return error_response(
                ApiError("invalid_request", "invalid Content-Length header"), request.path
            )
        if declared > limit:
            return too_big(request, limit)
        try:
            body = request.body  # enforces DATA_UPLOAD_MAX_MEMORY_SIZE on chunked bodies too
        except RequestDataTooBig:
            return too_big(request, limit)
        if len(body) > limit:
            return too_big(request, limit)
        return None


def too_big(request: HttpRequest, limit: int) -> HttpResponse:
    """Built only for a body that is refused: rendering an envelope costs more than the check."""
    return error_response(
        ApiError(
            "payload_too_large", f"request body exceeds the limit of {limit} bytes", status=413
        ),
        request.path,
    )


DATABASE_RETRY_AFTER_S = "1"
DATABASE_ERRORS = (OperationalError, InterfaceError)


def database_unavailable(path: str, error: BaseException) -> HttpResponse:
    """The database unreachable (restarting, failing over, the pool out of connections): a 503
    the caller may retry, since the pool replaces broken connections by itself."""
    logger.warning("database unavailable on %s: %s", path, error)
    response = error_response(
        ApiError(
            "database_unavailable",
            "the database is unavailable; retry the request shortly",
            status=503,
        ),
        path,
    )
    response["Retry-After"] = DATABASE_RETRY_AFTER_S
    return response


class ApiErrorMiddleware(BothStacks):
    """Any exception that escapes a view on an API path becomes a logged 500 envelope; the
    database unreachable a 503 (``database_unavailable``; raised in a middleware before the view,
    such as the API key's lookup, it is answered by ``handlers.server_error``)."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_api_path(request.path):
            return None
        if isinstance(exception, ApiError):
            return error_response(exception, request.path, request)
        if isinstance(exception, DATABASE_ERRORS):
            return database_unavailable(request.path, exception)
        logger.exception("unhandled error on %s", request.path)
        return error_response(
            ApiError("internal_error", "internal server error", status=500), request.path
        )
