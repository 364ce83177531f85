"""What a gateway request asks for, read from its headers and body (no server needed)."""

from __future__ import annotations

import pytest

from contextplatform.gateway.calls import gateway_call, resolve_headers
from contextplatform.gateway.protocol import GatewayError, error_body

MESSAGES = b'"messages": [{"role": "user", "content": "hi"}]'


def body(extra: str = "") -> bytes:
    return b"{" + MESSAGES + extra.encode() + b"}"


def test_the_route_comes_from_the_header_else_the_model() -> None:
    assert gateway_call("openai", {"x-route": "a"}, body(', "model": "b"')).route == "a"
    assert gateway_call("openai", {}, body(', "model": "b"')).route == "b"


def test_the_user_comes_from_the_header_else_the_providers_field() -> None:
    openai_body = body(', "model": "r", "user": "u-body"')
    assert gateway_call("openai", {}, openai_body).user == "u-body"
    assert gateway_call("openai", {"x-user-id": "u-head"}, openai_body).user == "u-head"
    anthropic_body = body(', "model": "r", "max_tokens": 64, "metadata": {"user_id": "u-meta"}')
    assert gateway_call("anthropic", {}, anthropic_body).user == "u-meta"
    # OpenAI's user field means nothing to the Anthropic endpoint.
    openai_user = body(', "model": "r", "max_tokens": 64, "user": "u-body"')
    assert gateway_call("anthropic", {}, openai_user).user is None


def test_session_memory_switch_and_stream() -> None:
    headers = {"x-session-id": "s1", "x-memory-store": "false"}
    call = gateway_call("openai", headers, body(', "model": "r", "stream": true'))
    assert (call.session, call.store_memory, call.stream) == ("s1", False, True)
    assert gateway_call("openai", {}, body(', "model": "r"')).store_memory is None


@pytest.mark.parametrize(
    ("headers", "raw", "says"),
    [
        ({}, b"not json", "malformed request body"),
        ({}, b"[1]", "expected a JSON object"),
        ({}, body(), "no route"),
        ({"x-memory-store": "maybe"}, body(', "model": "r"'), "x-memory-store"),
        ({}, body(', "model": 7'), "model: expected a string"),
        ({}, body(', "model": "r", "stream": "true"'), "stream: Input should be a valid boolean"),
    ],
)
def test_bad_requests_are_400(headers: dict[str, str], raw: bytes, says: str) -> None:
    with pytest.raises(GatewayError) as refused:
        gateway_call("openai", headers, raw)
    assert refused.value.status == 400 and says in refused.value.message


def test_credentials_never_reach_the_resolve() -> None:
    headers = resolve_headers(
        {"Authorization": "Bearer k", "X-Api-Key": "k", "X-VSR-Compression-Control": "off"}
    )
    assert dict(headers) == {"X-VSR-Compression-Control": "off"}
    assert headers.get("x-vsr-compression-control") == "off"


def test_error_shapes() -> None:
    error = GatewayError(404, "not_found", "route 'x' does not exist", param="model")
    assert error_body("openai", error) == {
        "error": {
            "message": "route 'x' does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "not_found",
        }
    }
    assert error_body("anthropic", error) == {
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": "route 'x' does not exist",
            "code": "not_found",
        },
    }
    assert error_body("anthropic", GatewayError(502, "upstream_error", "x"))["error"]["type"] == (
        "api_error"
    )
