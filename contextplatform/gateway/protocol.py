"""Each provider's error shape, with the statuses that make its official client raise its own
exception types (``AuthenticationError`` on 401, ``PermissionDeniedError`` on 403,
``NotFoundError`` on 404, ``BadRequestError`` on 400, ``RateLimitError`` on 429,
``APIStatusError`` otherwise).

The platform's own code (``budget_exceeded`` or ``rate_limited``, both 429; ``protocol_mismatch``
or ``invalid_request``, both 400) rides along in each shape where that provider's client reads it:
OpenAI's ``error.code`` (``exc.code``); in Anthropic's shape, which has no code of its own, an
added ``error.code`` (``exc.body["error"]["code"]``), a member the client keeps in ``body`` and
otherwise ignores. Not ``error.details.error_code``, although the ``anthropic`` client reads it
as ``exc.error_code``: it also builds ``exc.details`` from it as one of Anthropic's own detail
types (the first of its union, for a code it does not know), which would tell a caller that checks
those types a cause that is not ours. Every error the gateway answers also carries the code in the
``x-context-error-code`` header, whatever the shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from contextplatform.core.errors import ApiError
from contextplatform.protocols.base import ProtocolName
from contextplatform.protocols.registry import protocol_for

Protocol = ProtocolName
ERROR_CODE_HEADER = "x-context-error-code"


class GatewayError(Exception):
    """An error the gateway answers itself, in the caller's provider shape."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        # Response headers the clients act on (Retry-After, x-should-retry).
        self.headers = dict(headers or {})

    @classmethod
    def from_api_error(cls, error: ApiError) -> GatewayError:
        """A refusal of the resolve (unknown route, context_length_exceeded, source_failed...)."""
        return cls(error.status, error.code, error.message, param=error.param)


def unauthorized(message: str) -> GatewayError:
    return GatewayError(401, "unauthorized", message)


def forbidden(message: str) -> GatewayError:
    return GatewayError(403, "forbidden", message)


def invalid_request(message: str, param: str | None = None) -> GatewayError:
    return GatewayError(400, "invalid_request", message, param=param)


def upstream_error(message: str) -> GatewayError:
    return GatewayError(502, "upstream_error", message)


def upstream_timeout(message: str) -> GatewayError:
    return GatewayError(504, "upstream_timeout", message)


def error_body(protocol: Protocol, error: GatewayError) -> dict[str, Any]:
    """The error in the provider's shape (its protocol's)."""
    return protocol_for(protocol).error_body(error.status, error.code, error.message, error.param)


def error_response(protocol: Protocol, error: GatewayError) -> JsonResponse:
    response = JsonResponse(error_body(protocol, error), status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    response[ERROR_CODE_HEADER] = error.code
    if error.status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


def api_error_renderer(
    protocol: Protocol,
) -> Callable[[ApiError, HttpRequest | None], HttpResponse]:
    """What the kernel's middleware answers on a gateway path (an oversized body, a last-resort
    500): the provider's shape, not the REST envelope."""

    def render(error: ApiError, request: HttpRequest | None = None) -> HttpResponse:
        return error_response(protocol, GatewayError.from_api_error(error))

    return render


# What only Anthropic's clients send: the key as x-api-key (OpenAI's send Authorization) and the
# API version they speak.
ANTHROPIC_HEADERS = ("x-api-key", "anthropic-version")


def caller_protocol(request: HttpRequest | None) -> Protocol:
    """The shape a caller of a path no protocol owns (an unknown path under /v1/) reads: Anthropic's
    when the request carries a header only Anthropic's clients send, else OpenAI's."""
    if request is not None and any(name in request.headers for name in ANTHROPIC_HEADERS):
        return "anthropic"
    return "openai"


def caller_error_renderer(error: ApiError, request: HttpRequest | None = None) -> HttpResponse:
    """The rest of /v1/: the error in the shape its caller's client reads."""
    return error_response(caller_protocol(request), GatewayError.from_api_error(error))


__all__ = [
    "ERROR_CODE_HEADER",
    "GatewayError",
    "Protocol",
    "api_error_renderer",
    "caller_error_renderer",
    "caller_protocol",
    "error_body",
    "error_response",
    "forbidden",
    "invalid_request",
    "unauthorized",
    "upstream_error",
    "upstream_timeout",
]
