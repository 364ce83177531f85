"""The platform's error code reaches callers of either shape: OpenAI's ``error.code`` as before,
Anthropic's shape with an added ``error.code`` (its own has none, so 429 ``budget_exceeded`` and
``rate_limited``, or 400 ``protocol_mismatch`` and ``invalid_request``, looked alike), and the
``x-context-error-code`` header on every error the gateway answers; the official clients still
raise their own exception types."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.gateway.conftest import Gateway, unique
from tests.upstream import LoopbackUpstream

HEADER = "x-context-error-code"


def messages() -> list[Any]:
    return [{"role": "user", "content": "What went wrong?"}]


def anthropic_client(gateway: Gateway, **headers: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=gateway.server, api_key=gateway.key, max_retries=0, default_headers=headers
    )


def openai_client(gateway: Gateway, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gateway.openai_base_url,
        api_key=gateway.key,
        max_retries=0,
        default_headers=headers,
    )


@pytest.fixture
def tiny_budget_routes(gateway: Gateway) -> Iterator[dict[str, str]]:
    """A route per protocol, forwarding to the package's deployments, whose sessions may spend
    10 tokens, less than any request's input: every call is refused with ``budget_exceeded``."""
    made: dict[str, str] = {}
    with gateway.api() as api:
        for protocol, like in (
            ("openai", gateway.openai_route),
            ("anthropic", gateway.anthropic_route),
        ):
            upstream = api.get(f"/api/v1/routes/{like}").json()["model"]["upstream"]
            name = unique(f"gw-codes-{protocol}")
            body = {
                "name": name,
                "model": {"upstream": upstream},
                "context": {"sources": [], "budget": {"session_max_tokens": 10}},
            }
            assert api.post("/api/v1/routes", json=body).status_code == 201
            made[protocol] = name
        try:
            yield made
        finally:
            for name in made.values():
                api.delete(f"/api/v1/routes/{name}")


def anthropic_refusal(error: anthropic.APIStatusError) -> tuple[int, str, str, str]:
    """(status, the shape's type, the platform's code in the body, the header)."""
    body: Any = error.body
    assert body["type"] == "error" and body["error"]["message"]
    return (
        error.status_code,
        body["error"]["type"],
        body["error"]["code"],
        error.response.headers[HEADER],
    )


def test_anthropic_callers_tell_a_spent_budget_from_the_rate_limit(
    gateway: Gateway, upstream: LoopbackUpstream, tiny_budget_routes: dict[str, str]
) -> None:
    client = anthropic_client(gateway, **{"x-session-id": unique("s")})
    with pytest.raises(anthropic.RateLimitError) as refused:
        client.messages.create(
            model=tiny_budget_routes["anthropic"], max_tokens=200, messages=messages()
        )
    assert anthropic_refusal(refused.value) == (
        429,
        "rate_limit_error",
        "budget_exceeded",
        "budget_exceeded",
    )
    assert refused.value.response.headers["x-should-retry"] == "false"  # still there


def test_anthropic_callers_tell_a_protocol_mismatch_from_an_invalid_request(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    hits = upstream.hits
    with pytest.raises(anthropic.BadRequestError) as mismatch:
        anthropic_client(gateway).messages.create(
            model=gateway.openai_route, max_tokens=10, messages=messages()
        )
    assert anthropic_refusal(mismatch.value) == (
        400,
        "invalid_request_error",
        "protocol_mismatch",
        "protocol_mismatch",
    )
    with pytest.raises(anthropic.BadRequestError) as invalid:
        anthropic_client(gateway, **{"x-memory-store": "maybe"}).messages.create(
            model=gateway.anthropic_route, max_tokens=10, messages=messages()
        )
    assert anthropic_refusal(invalid.value) == (
        400,
        "invalid_request_error",
        "invalid_request",
        "invalid_request",
    )
    assert upstream.hits == hits  # neither reached the upstream


def test_anthropic_not_found_and_unauthorized_carry_their_codes(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        anthropic_client(gateway).messages.create(
            model="no-such-route", max_tokens=10, messages=messages()
        )
    assert anthropic_refusal(missing.value) == (404, "not_found_error", "not_found", "not_found")
    with pytest.raises(anthropic.AuthenticationError) as unknown_key:
        anthropic.Anthropic(
            base_url=gateway.server, api_key="cp_wrong", max_retries=0
        ).messages.create(model=gateway.anthropic_route, max_tokens=10, messages=messages())
    assert anthropic_refusal(unknown_key.value) == (
        401,
        "authentication_error",
        "unauthorized",
        "unauthorized",
    )


def test_openai_callers_still_see_the_code_and_the_header_too(
    gateway: Gateway, upstream: LoopbackUpstream, tiny_budget_routes: dict[str, str]
) -> None:
    client = openai_client(gateway, **{"x-session-id": unique("s")})
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(
            model=tiny_budget_routes["openai"], max_tokens=200, messages=messages()
        )
    assert refused.value.code == "budget_exceeded"
    assert refused.value.type == "rate_limit_error"
    assert refused.value.response.headers[HEADER] == "budget_exceeded"

    with pytest.raises(openai.BadRequestError) as mismatch:
        client.chat.completions.create(model=gateway.anthropic_route, messages=messages())
    assert mismatch.value.code == "protocol_mismatch"
    assert mismatch.value.param == "model"
    assert mismatch.value.response.headers[HEADER] == "protocol_mismatch"


def test_an_answer_and_an_upstreams_own_error_carry_no_code_header(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    answered = openai_client(gateway).chat.completions.with_raw_response.create(
        model=gateway.openai_route, messages=messages()
    )
    assert HEADER not in answered.headers
    # An upstream's 4xx passes through as the upstream said it: its code, if any, is its own.
    upstream.fail(429, {"error": {"message": "slow down", "type": "rate_limit_error"}})
    with pytest.raises(openai.RateLimitError) as limited:
        openai_client(gateway).chat.completions.create(
            model=gateway.openai_route, messages=messages()
        )
    assert HEADER not in limited.value.response.headers


OVERSIZED = "x" * (4 * 1024 * 1024 + 1)  # over API_MAX_BODY_BYTES, the live server's default


def test_an_oversized_body_is_refused_in_each_providers_shape(gateway: Gateway) -> None:
    """The kernel's body limit answers before any view: in the caller's provider shape."""
    with pytest.raises(openai.APIStatusError) as refused:
        openai_client(gateway).chat.completions.create(
            model=gateway.openai_route, messages=[{"role": "user", "content": OVERSIZED}]
        )
    assert refused.value.status_code == 413 and refused.value.code == "payload_too_large"
    assert refused.value.response.headers[HEADER] == "payload_too_large"
    with pytest.raises(anthropic.APIStatusError) as too_large:
        anthropic_client(gateway).messages.create(
            model=gateway.anthropic_route,
            max_tokens=10,
            messages=[{"role": "user", "content": OVERSIZED}],
        )
    assert anthropic_refusal(too_large.value) == (
        413,
        "request_too_large",
        "payload_too_large",
        "payload_too_large",
    )
