"""One error envelope for every API error: ``{"error": {"code", "message", "param"}}``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response

logger = logging.getLogger("contextplatform.api")

API_PATH_PREFIXES = ("/api/", "/v1/")


class ApiError(Exception):
    """An error the API reports to its caller as it is."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        also: tuple[ApiError, ...] = (),
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.param = param
        # Further errors found in the same check: the envelope reports the first; a form can
        # show them all next to their fields.
        self.also = also

    def every(self) -> list[ApiError]:
        return [self, *self.also]


def together(errors: list[ApiError]) -> ApiError:
    """The first error, carrying the others (and theirs) in ``also``."""
    first, *rest = errors
    also = tuple(error for later in rest for error in later.every())
    return ApiError(
        first.code,
        first.message,
        status=first.status,
        param=first.param,
        also=(*first.also, *also),
    )


def invalid_request(message: str, param: str | None = None) -> ApiError:
    return ApiError("invalid_request", message, status=400, param=param)


def not_found(message: str, param: str | None = None) -> ApiError:
    return ApiError("not_found", message, status=404, param=param)


def envelope(code: str, message: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "param": param}}


# Paths whose callers expect another error shape than the envelope (the gateway's providers'):
# an app registers a renderer for its prefix, and the kernel's middleware answers through it.
# The request, when there is one, lets a renderer read what the caller sent (its headers).
ErrorRenderer = Callable[[ApiError, HttpRequest | None], HttpResponse]
_renderers: list[tuple[str, ErrorRenderer]] = []


def register_error_renderer(prefix: str, render: ErrorRenderer) -> None:
    """Render errors on paths starting with ``prefix`` with ``render``; the longest prefix wins."""
    _renderers[:] = [(p, r) for p, r in _renderers if p != prefix] + [(prefix, render)]
    _renderers.sort(key=lambda entry: -len(entry[0]))


def error_response(
    error: ApiError, path: str | None = None, request: HttpRequest | None = None
) -> HttpResponse:
    """The error in the shape the caller of ``path`` expects (the envelope unless an app
    registered another for it)."""
    if path is not None:
        for prefix, render in _renderers:
            if path.startswith(prefix):
                return render(error, request)
    return JsonResponse(envelope(error.code, error.message, error.param), status=error.status)


def is_api_path(path: str) -> bool:
    return path.startswith(API_PATH_PREFIXES) or path in {"/api", "/v1"}


def _first_validation_error(detail: Any, path: str = "") -> tuple[str, str | None]:
    if isinstance(detail, dict):
        for key, value in detail.items():
            sub = f"{path}.{key}" if path else str(key)
            if key == "non_field_errors":
                sub = path
            return _first_validation_error(value, sub)
    if isinstance(detail, list) and detail:
        if all(isinstance(item, str) for item in detail):
            return (f"{path}: {detail[0]}" if path else str(detail[0])), (path or None)
        for index, item in enumerate(detail):
            if item:
                return _first_validation_error(item, f"{path}[{index}]")
    return (f"{path}: {detail}" if path else str(detail)), (path or None)


_DRF_CODES: dict[type[Exception], tuple[str, int]] = {
    drf_exceptions.NotAuthenticated: ("unauthorized", 401),
    drf_exceptions.AuthenticationFailed: ("unauthorized", 401),
    drf_exceptions.PermissionDenied: ("forbidden", 403),
    drf_exceptions.NotFound: ("not_found", 404),
    drf_exceptions.MethodNotAllowed: ("method_not_allowed", 405),
    drf_exceptions.NotAcceptable: ("not_acceptable", 406),
    drf_exceptions.UnsupportedMediaType: ("unsupported_media_type", 415),
    drf_exceptions.Throttled: ("rate_limited", 429),
    drf_exceptions.ParseError: ("invalid_request", 400),
}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler: every exception becomes the envelope; unknown ones a logged 500."""
    if isinstance(exc, ApiError):
        return Response(envelope(exc.code, exc.message, exc.param), status=exc.status)
    if isinstance(exc, RequestDataTooBig):
        return Response(envelope("payload_too_large", str(exc)), status=413)
    if isinstance(exc, Http404):
        return Response(envelope("not_found", str(exc) or "not found"), status=404)
    if isinstance(exc, PermissionDenied):
        return Response(envelope("forbidden", str(exc) or "forbidden"), status=403)
    if isinstance(exc, drf_exceptions.ValidationError):
        message, param = _first_validation_error(exc.detail)
        return Response(envelope("invalid_request", message, param), status=400)
    for exc_type, (code, status) in _DRF_CODES.items():
        if isinstance(exc, exc_type):
            message = str(exc.detail) if isinstance(exc, drf_exceptions.APIException) else str(exc)
            if isinstance(exc, drf_exceptions.ParseError):
                message = f"malformed request body: {message}"
            response = Response(envelope(code, message), status=status)
            if status == 401:
                response["WWW-Authenticate"] = 'Bearer realm="api"'
            return response
    if isinstance(exc, drf_exceptions.APIException):
        return Response(envelope("invalid_request", str(exc.detail)), status=exc.status_code)
    logger.exception("unhandled API error", extra={"view": str(context.get("view"))})
    return Response(envelope("internal_error", "internal server error"), status=500)
