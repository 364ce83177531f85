"""What a gateway request asks for: the route, the user, the session and the memory switch, read
from the headers and the provider's own body fields as the contract says."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.utils.datastructures import CaseInsensitiveMapping

from contextplatform.core import text_limits
from contextplatform.core.errors import ApiError
from contextplatform.gateway.protocol import GatewayError, Protocol, invalid_request
from contextplatform.protocols.registry import protocol_for
from contextplatform.resolve.chat import ChatRequest, parse_chat_request
from contextplatform.resolve.use_cases import ResolveCall
from contextplatform.routes.selectors import LoadedRoute
from tenants.models import Tenant

MAX_NAME_LENGTH = 200
# Credentials stay out of what the resolve sees (and could record).
PRIVATE_HEADERS = frozenset({"authorization", "x-api-key", "cookie", "proxy-authorization"})


@dataclass(frozen=True)
class GatewayCall:
    route: str
    body: dict[str, Any]
    # The body checked against its provider's whole shape, once: the resolve takes it as it is.
    chat: ChatRequest | None = None
    user: str | None = None
    session: str | None = None
    # True asks for the memory write, False opts out (x-memory-store: false), None is silent.
    store_memory: bool | None = None

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    def resolve_call(
        self,
        tenant: Tenant,
        protocol: Protocol,
        headers: Mapping[str, str],
        loaded: LoadedRoute,
        *,
        defer_replay: bool = False,
        key_id: int | None = None,
    ) -> ResolveCall:
        """The resolve this call asks for: its route already loaded (its deployment checked), the
        body parsed once, and the route's lazy search tools offered, since the gateway serves
        them."""
        return ResolveCall(
            tenant=tenant,
            route=self.route,
            request_body=self.body,
            chat=self.chat,
            user=self.user,
            session=self.session,
            chat_format=protocol,
            store_memory=self.store_memory,
            headers=headers,
            loaded=loaded,
            serves_tools=True,
            defer_replay=defer_replay,
            key_id=key_id,
        )


def parse_body(raw: bytes) -> dict[str, Any]:
    """The body as JSON: orjson (several times faster), nesting past 64 levels and a string with
    a NUL or an unpaired surrogate refused naming its field, as on the REST API
    (core/text_limits.py). Numbers are the provider's to judge: what the gateway stores of the
    body is read back through core/safe_json.py, whatever its numbers."""
    try:
        body = text_limits.loads(raw, numbers=False) if raw.strip() else None
    except text_limits.MalformedJson as error:
        raise invalid_request(f"malformed request body: {error}") from None
    except ApiError as error:
        raise GatewayError.from_api_error(error) from None
    if not isinstance(body, dict):
        raise invalid_request("request body: expected a JSON object")
    return body


def _named(value: Any, where: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_NAME_LENGTH:
        raise invalid_request(
            f"{where}: expected a string of at most {MAX_NAME_LENGTH} characters", where
        )
    if problem := text_limits.text_problem(value):
        raise invalid_request(f"{where}: {problem}", where)
    return value


def check_shape(protocol: Protocol, body: dict[str, Any], *, for_call: bool = True) -> ChatRequest:
    """The body against its provider's whole request shape (protocols/provider_shapes.py),
    before anything is resolved, held or sent: a 400 naming the field as the body spells it.
    The body is sent on as it is, so it needs what the provider requires of a call. The parsed
    request is the resolve's too: the body is validated once per call."""
    try:
        return parse_chat_request(body, protocol, prefix="", for_call=for_call)
    except ApiError as error:
        raise GatewayError.from_api_error(error) from None


def _store_memory(value: str | None) -> bool | None:
    if value is None:
        return None
    switch = value.strip().lower()
    if switch in ("true", "false"):
        return switch == "true"
    raise invalid_request(f"x-memory-store: expected true or false, got {value!r}")


def gateway_call(
    protocol: Protocol, headers: Mapping[str, str], raw: bytes, *, for_call: bool = True
) -> GatewayCall:
    """The call a request makes; a 400 in the provider's shape when it names no route.
    ``for_call`` False: a body that is counted, not sent (a token count takes no ``max_tokens``)."""
    return call_of(protocol, headers, parse_body(raw), for_call=for_call)


def request_user(headers: Mapping[str, str], body: Mapping[str, Any], field: str) -> str | None:
    """The end user: ``x-user-id``, else the body's ``field``."""
    return _named(headers.get("x-user-id"), "x-user-id") or _named(body.get(field), field)


def call_of(
    protocol: Protocol, headers: Mapping[str, str], body: dict[str, Any], *, for_call: bool = True
) -> GatewayCall:
    """The call a parsed body makes (``gateway_call``; a Responses call's body once translated)."""
    route = _named(headers.get("x-route"), "x-route") or _named(body.get("model"), "model")
    if route is None:
        raise invalid_request(
            "no route: send the header x-route or name a route as the body's model", "model"
        )
    header_user = _named(headers.get("x-user-id"), "x-user-id")
    provider = protocol_for(protocol)
    user = header_user or _named(provider.body_user(body), provider.user_field)
    chat = check_shape(protocol, body, for_call=for_call)
    return GatewayCall(
        route=route,
        body=body,
        chat=chat,
        user=user,
        session=_named(headers.get("x-session-id"), "x-session-id"),
        store_memory=_store_memory(headers.get("x-memory-store")),
    )


def resolve_headers(headers: Mapping[str, str]) -> Mapping[str, str]:
    """The request's headers as the resolve reads them (compression controls, looked up in any
    case), credentials out."""
    return CaseInsensitiveMapping(
        {name: value for name, value in headers.items() if name.lower() not in PRIVATE_HEADERS}
    )


__all__ = [
    "GatewayCall",
    "GatewayError",
    "call_of",
    "gateway_call",
    "parse_body",
    "request_user",
    "resolve_headers",
]
