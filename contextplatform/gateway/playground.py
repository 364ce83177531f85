"""The admin playground's call: one message sent through the gateway exactly as an application's
``POST /v1/chat/completions`` would be (the route's context resolved and injected, its
deployments called, the served tools answered, the turn and the replay record written), with the
tenant's playground key (``tenants.services.playground_key``) in place of a typed one.

What comes back is what an operator trying a route wants to see: the answer or the error as the
client would get it, the replay record's id, the deployment that answered and the arm.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from django.http import HttpRequest

from contextplatform.gateway.lifecycle import ChatCall
from contextplatform.gateway.views import (
    DEPLOYMENT_HEADER,
    RESOLVE_ID_HEADER,
    VARIANT_HEADER,
    carried_call,
)
from tenants.models import ApiKey

PATH = "/v1/chat/completions"
MAX_MESSAGE_CHARS = 32_000


@dataclass(frozen=True)
class PlayedCall:
    status: int
    answer: str | None  # the model's text (None when the call failed or answered only tools)
    error: str | None  # the gateway's or the upstream's error message
    resolve_id: str | None
    deployment: str | None
    variant: str | None
    response: dict[str, Any] | None  # the provider's answer as the client receives it


def gateway_request(
    key: ApiKey, route: str, user: str, session: str, messages: list[dict[str, Any]]
) -> HttpRequest:
    """An HTTP request as the gateway's view receives one, its key already verified."""
    body = orjson.dumps({"model": route, "messages": messages})
    request = HttpRequest()
    request.method = "POST"
    request.path = request.path_info = PATH
    request.META = {
        "REQUEST_METHOD": "POST",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_X_ROUTE": route,
        **({"HTTP_X_USER_ID": user} if user else {}),
        **({"HTTP_X_SESSION_ID": session} if session else {}),
    }
    request._body = body  # what the view reads: the body as it arrived
    request.api_key = key  # type: ignore[attr-defined]  # what the key middleware sets
    return request


def _answer_text(payload: dict[str, Any]) -> str | None:
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices:
        return None
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


def _error_text(payload: Any, status: int) -> str:
    error = payload.get("error") if isinstance(payload, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message) if message else f"HTTP {status}"


async def play(
    key: ApiKey, route: str, user: str, session: str, messages: list[dict[str, Any]]
) -> PlayedCall:
    """Send ``messages`` through the gateway on ``route`` for ``user`` in ``session``."""
    request = gateway_request(key, route, user, session, messages)
    response = await carried_call("openai", ChatCall("openai", request))
    raw = getattr(response, "content", b"")
    try:
        payload = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        payload = None
    status = response.status_code
    ok = status == 200 and isinstance(payload, dict)
    return PlayedCall(
        status=status,
        answer=_answer_text(payload) if ok and isinstance(payload, dict) else None,
        error=None if ok else _error_text(payload, status),
        resolve_id=response.get(RESOLVE_ID_HEADER),
        deployment=response.get(DEPLOYMENT_HEADER),
        variant=response.get(VARIANT_HEADER),
        response=payload if isinstance(payload, dict) else None,
    )
