"""Reads of the responses the gateway keeps (``StoredResponse``): one for ``GET
/v1/responses/{id}``, the conversation a ``previous_response_id`` continues. Only the caller's
own: a response of another user (or, in another schema, another tenant) is as unknown as one that
never was, so its existence is never told."""

from __future__ import annotations

from typing import Any

from contextplatform.gateway.models import StoredResponse
from contextplatform.gateway.protocol import GatewayError

NOT_STORED_CODE = "response_not_stored"


def unknown(response_id: str, param: str | None) -> GatewayError:
    return GatewayError(404, "not_found", f"no response {response_id!r}", param=param)


def not_stored(response_id: str, param: str | None) -> GatewayError:
    return GatewayError(
        404,
        NOT_STORED_CODE,
        f"response {response_id} was not stored: this tenant does not capture content",
        param=param,
    )


def own_response(response_id: str, user: str | None, param: str | None = None) -> StoredResponse:
    """The caller's stored response (a response stored without a user is the user-less
    callers'); 404 when there is none for them, or it kept no content."""
    stored = StoredResponse.objects.filter(response_id=response_id, user_id=user or "").first()
    if stored is None:
        raise unknown(response_id, param)
    if not stored.content_stored:
        raise not_stored(response_id, param)
    return stored


def stored_response(response_id: str, user: str | None) -> dict[str, Any]:
    """The response object as it was answered."""
    return dict(own_response(response_id, user).response or {})


def previous_items(response_id: str, user: str | None) -> list[dict[str, Any]]:
    """The conversation ``response_id`` ended: its input items (with those it followed) and its
    output, as the next request's input takes them."""
    items = own_response(response_id, user, "previous_response_id").items
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


__all__ = ["NOT_STORED_CODE", "own_response", "previous_items", "stored_response", "unknown"]
