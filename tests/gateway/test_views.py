"""The gateway end to end: the official clients, sync and async, streaming and not, against a
live server forwarding to the loopback upstream (``conftest.py``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import openai
import pytest

from tests.conftest import TENANT_KEYS
from tests.gateway.conftest import (
    ANTHROPIC_KEY,
    OPENAI_KEY,
    RULE,
    Gateway,
    unique,
)
from tests.upstream import LoopbackUpstream, text_of

QUESTION = "Where is my parcel?"
DISCONNECT_WAIT_S = 20  # an upper bound for the upstream to notice, not a measured time


def openai_client(gateway: Gateway, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=gateway.openai_base_url,
        api_key=gateway.key,
        max_retries=0,
        default_headers=headers or None,
    )


def anthropic_client(gateway: Gateway, **headers: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=gateway.server,
        api_key=gateway.key,
        max_retries=0,
        default_headers=headers or None,
    )


def conversation() -> list[Any]:
    return [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi, how can I help?"},
        {"role": "user", "content": QUESTION},
    ]


def assert_injected(upstream: LoopbackUpstream, model: str) -> dict[str, Any]:
    """The upstream received the route's context and the deployment's model name."""
    received = upstream.last.body
    assert received["model"] == model
    assert RULE in json.dumps(received)
    return dict(received)


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert OPENAI_KEY not in text and ANTHROPIC_KEY not in text


# --- OpenAI --------------------------------------------------------------------------------------


def test_openai_completion_carries_the_context_to_the_deployment(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    session, user = unique("s"), unique("u")
    client = openai_client(gateway, **{"x-session-id": session, "x-user-id": user})
    raw = client.chat.completions.with_raw_response.create(
        model=gateway.openai_route, messages=conversation()
    )
    completion = raw.parse()

    answer = completion.choices[0].message.content or ""
    assert answer.startswith("seen ") and f"question: {QUESTION}" in answer
    assert "model: upstream-gpt" in answer
    assert_injected(upstream, "upstream-gpt")
    assert upstream.last.path == "/v1/chat/completions"
    assert upstream.last.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert completion.usage is not None and completion.usage.total_tokens > 0

    resolve_id = raw.headers["x-context-resolve-id"]
    record = gateway.replay(resolve_id)
    assert record["id"] == resolve_id and record["route"] == gateway.openai_route
    assert_no_secret(raw.http_response.text, json.dumps(dict(raw.headers)), json.dumps(record))
    assert gateway.key not in json.dumps(record)

    # The turn is complete without a hand-back: the question and the answer are in the session.
    messages = gateway.session(session, user)
    assert [(m["role"], text_of(m["content"])) for m in messages[-2:]] == [
        ("user", QUESTION),
        ("assistant", answer),
    ]


def test_openai_async_stream_passes_the_events_and_completes_the_turn(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    session, user = unique("s"), unique("u")

    async def scenario() -> tuple[str, int, Any]:
        client = openai.AsyncOpenAI(
            base_url=gateway.openai_base_url,
            api_key=gateway.key,
            max_retries=0,
            default_headers={"x-session-id": session},
        )
        stream = await client.chat.completions.create(
            model=gateway.openai_route,
            messages=conversation(),
            stream=True,
            stream_options={"include_usage": True},
            user=user,
        )
        parts, usage = [], None
        chunks = 0
        async for chunk in stream:
            chunks += 1
            if chunk.usage is not None:
                usage = chunk.usage
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
        await client.close()
        return "".join(parts), chunks, usage

    text, chunks, usage = asyncio.run(scenario())
    assert text.startswith("seen ") and QUESTION in text
    assert chunks > 3 and usage is not None and usage.total_tokens > 0
    received = assert_injected(upstream, "upstream-gpt")
    assert received["stream"] is True
    messages = gateway.session(session, user)
    assert messages[-1]["role"] == "assistant" and text_of(messages[-1]["content"]) == text


def test_openai_sync_stream(gateway: Gateway, upstream: LoopbackUpstream) -> None:
    client = openai_client(gateway)
    stream = client.chat.completions.create(
        model=gateway.openai_route, messages=conversation(), stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.startswith("seen ")


def test_the_route_header_wins_over_the_model(gateway: Gateway, upstream: LoopbackUpstream) -> None:
    client = openai_client(gateway, **{"x-route": gateway.openai_route})
    completion = client.chat.completions.create(model="anything", messages=conversation())
    assert "model: upstream-gpt" in (completion.choices[0].message.content or "")


def test_models_lists_the_tenants_routes(gateway: Gateway, upstream: LoopbackUpstream) -> None:
    ids = {model.id for model in openai_client(gateway).models.list()}
    assert {gateway.openai_route, gateway.anthropic_route} <= ids


# --- Anthropic -----------------------------------------------------------------------------------


def test_anthropic_message_carries_the_context_with_the_deployments_key(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    session, user = unique("s"), unique("u")
    client = anthropic_client(gateway, **{"x-session-id": session})
    raw = client.messages.with_raw_response.create(
        model=gateway.anthropic_route,
        max_tokens=200,
        messages=conversation(),
        metadata={"user_id": user},
    )
    message = raw.parse()
    answer = message.content[0].text  # type: ignore[union-attr]
    assert answer.startswith("seen ") and f"question: {QUESTION}" in answer
    assert "model: upstream-claude" in answer
    assert_injected(upstream, "upstream-claude")
    assert upstream.last.path == "/v1/messages"
    assert upstream.last.headers["x-api-key"] == ANTHROPIC_KEY
    assert upstream.last.headers["anthropic-version"]
    assert "authorization" not in upstream.last.headers
    assert message.usage.input_tokens > 0
    resolve_id = raw.headers["x-context-resolve-id"]
    assert_no_secret(raw.http_response.text, json.dumps(gateway.replay(resolve_id)))
    assert text_of(gateway.session(session, user)[-1]["content"]) == answer


def test_anthropic_sync_stream(gateway: Gateway, upstream: LoopbackUpstream) -> None:
    session, user = unique("s"), unique("u")
    client = anthropic_client(gateway, **{"x-session-id": session, "x-user-id": user})
    with client.messages.stream(
        model=gateway.anthropic_route, max_tokens=200, messages=conversation()
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.startswith("seen ") and final.usage.output_tokens > 0
    assert_injected(upstream, "upstream-claude")
    assert text_of(gateway.session(session, user)[-1]["content"]) == text


def test_anthropic_async_message(gateway: Gateway, upstream: LoopbackUpstream) -> None:
    async def scenario() -> str:
        client = anthropic.AsyncAnthropic(
            base_url=gateway.server, api_key=gateway.key, max_retries=0
        )
        message = await client.messages.create(
            model=gateway.anthropic_route, max_tokens=100, messages=conversation()
        )
        await client.close()
        return message.content[0].text  # type: ignore[union-attr]

    assert asyncio.run(scenario()).startswith("seen ")


# --- errors the clients understand ---------------------------------------------------------------


def test_a_route_of_the_other_protocol_is_a_clear_400(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    before = upstream.hits
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(gateway).chat.completions.create(
            model=gateway.anthropic_route, messages=conversation()
        )
    assert "/v1/messages" in refused.value.message and "anthropic" in refused.value.message
    with pytest.raises(anthropic.BadRequestError) as refused_too:
        anthropic_client(gateway).messages.create(
            model=gateway.openai_route, max_tokens=10, messages=conversation()
        )
    assert "/v1/chat/completions" in refused_too.value.message
    assert upstream.hits == before


def test_an_unknown_route_is_not_found(gateway: Gateway, upstream: LoopbackUpstream) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        openai_client(gateway).chat.completions.create(
            model="no-such-route", messages=conversation()
        )
    assert missing.value.response.json()["error"]["code"] == "not_found"
    with pytest.raises(anthropic.NotFoundError):
        anthropic_client(gateway).messages.create(
            model="no-such-route", max_tokens=10, messages=conversation()
        )


def test_a_bad_key_is_an_authentication_error(gateway: Gateway) -> None:
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            base_url=gateway.openai_base_url, api_key="cp_wrong", max_retries=0
        ).chat.completions.create(model=gateway.openai_route, messages=conversation())
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(
            base_url=gateway.server, api_key="cp_wrong", max_retries=0
        ).messages.create(model=gateway.openai_route, max_tokens=10, messages=conversation())


def test_an_upstream_4xx_passes_through(gateway: Gateway, upstream: LoopbackUpstream) -> None:
    upstream.fail(429, {"error": {"message": "slow down", "type": "rate_limit_error"}})
    with pytest.raises(openai.RateLimitError) as limited:
        openai_client(gateway).chat.completions.create(
            model=gateway.openai_route, messages=conversation()
        )
    assert "slow down" in limited.value.message
    assert limited.value.response.headers["x-context-resolve-id"].startswith("rsv_")


def test_an_upstream_5xx_is_a_502(gateway: Gateway, upstream: LoopbackUpstream) -> None:
    upstream.fail(500)
    with pytest.raises(openai.APIStatusError) as failed:
        openai_client(gateway).chat.completions.create(
            model=gateway.openai_route, messages=conversation()
        )
    assert failed.value.status_code == 502
    assert failed.value.response.json()["error"]["code"] == "upstream_error"
    with pytest.raises(anthropic.APIStatusError) as failed_too:
        anthropic_client(gateway).messages.create(
            model=gateway.anthropic_route, max_tokens=10, messages=conversation()
        )
    assert failed_too.value.status_code == 502


def test_a_hanging_upstream_is_a_504(gateway: Gateway, upstream: LoopbackUpstream) -> None:
    upstream.hang()
    for stream in (False, True):
        with pytest.raises(openai.APIStatusError) as timed_out:
            openai_client(gateway).chat.completions.create(
                model=gateway.hanging_route, messages=conversation(), stream=stream
            )
        assert timed_out.value.status_code == 504


def test_a_client_that_disconnects_cancels_the_upstream_call(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    session, user = unique("s"), unique("u")
    upstream.stream_slowly(pieces=400, piece_delay_s=0.05)
    client = openai_client(gateway, **{"x-session-id": session, "x-user-id": user})
    stream = client.chat.completions.create(
        model=gateway.openai_route, messages=conversation(), stream=True
    )
    received = [chunk for _, chunk in zip(range(3), stream, strict=False)]
    assert len(received) == 3
    stream.close()
    assert upstream.disconnected.wait(DISCONNECT_WAIT_S)
    # No answer came back whole: the session holds the question only.
    assert [m["role"] for m in gateway.session(session, user)] == ["user"]


# --- tenants -------------------------------------------------------------------------------------


def test_another_tenant_neither_sees_nor_calls_the_routes(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    globex = openai.OpenAI(
        base_url=gateway.openai_base_url, api_key=TENANT_KEYS["globex"], max_retries=0
    )
    assert gateway.openai_route not in {model.id for model in globex.models.list()}
    before = upstream.hits
    with pytest.raises(openai.NotFoundError):
        globex.chat.completions.create(model=gateway.openai_route, messages=conversation())
    assert upstream.hits == before
