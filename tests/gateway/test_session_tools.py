"""Tool exchanges kept in the session, live through the gateway: the assistant's tool calls
(OpenAI ``tool_calls``, Anthropic ``tool_use`` blocks) and the client's tool results are stored
with the turn, listed by ``GET /sessions/{s}/messages``, and a later request's history holds them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.gateway.conftest import Gateway, unique
from tests.gateway.test_tool_loops import WEATHER_TOOL, anthropic_client, openai_client
from tests.upstream import LoopbackUpstream

HISTORY = {"sources": [{"type": "recent_messages", "name": "history", "last_n_turns": 20}]}


@pytest.fixture
def history_route(gateway: Gateway) -> Any:
    created: list[str] = []

    def create(protocol: str) -> str:
        template = gateway.openai_route if protocol == "openai" else gateway.anthropic_route
        name = unique(f"hist-{protocol}")
        body = {
            "name": name,
            "model": {"upstream": gateway.upstream_of(template), "context_window": 16000},
            "context": HISTORY,
        }
        with gateway.api() as api:
            response = api.post("/api/v1/routes", json=body)
        assert response.status_code == 201, response.text
        created.append(name)
        return name

    yield create
    with gateway.api() as api:
        for name in created:
            api.delete(f"/api/v1/routes/{name}")


def test_openai_tool_calls_and_results_are_kept_and_replayed(
    gateway: Gateway, upstream: LoopbackUpstream, history_route: Any
) -> None:
    route, session, user = history_route("openai"), unique("s-tools"), "u-tools"
    headers = {"x-session-id": session, "x-user-id": user}
    client = openai_client(gateway)
    question = {"role": "user", "content": "What's the weather in Oslo?"}
    upstream.call_tool("get_weather", {"city": "Oslo"})
    first = client.chat.completions.create(
        model=route, messages=[question], tools=[WEATHER_TOOL], extra_headers=headers
    )  # type: ignore[call-overload]
    (call,) = first.choices[0].message.tool_calls
    upstream.behave()
    follow = [
        question,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "12 degrees and rain"},
    ]
    client.chat.completions.create(
        model=route, messages=follow, tools=[WEATHER_TOOL], extra_headers=headers
    )  # type: ignore[call-overload]
    stored = gateway.session(session, user)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1]["tool_calls"][0]["id"] == call.id
    assert stored[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert stored[2]["tool_call_id"] == call.id and stored[2]["content"] == "12 degrees and rain"
    # A later request of the session, carrying only its new question: the history holds both.
    client.chat.completions.create(
        model=route,
        messages=[{"role": "user", "content": "Should I take an umbrella?"}],
        extra_headers=headers,
    )
    sent = json.dumps(upstream.last.body)
    assert '[tool call] get_weather {\\"city\\": \\"Oslo\\"}' in sent
    assert "[tool result] 12 degrees and rain" in sent


def test_anthropic_tool_use_and_tool_result_are_kept_and_replayed(
    gateway: Gateway, upstream: LoopbackUpstream, history_route: Any
) -> None:
    route, session, user = history_route("anthropic"), unique("s-tools-a"), "u-tools"
    headers = {"x-session-id": session, "x-user-id": user}
    client = anthropic_client(gateway)
    tools = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}]
    question = {"role": "user", "content": "What's the weather in Oslo?"}
    upstream.call_tool("get_weather", {"city": "Oslo"})
    first = client.messages.create(
        model=route, max_tokens=200, messages=[question], tools=tools, extra_headers=headers
    )  # type: ignore[arg-type]
    use = next(block for block in first.content if block.type == "tool_use")
    upstream.behave()
    follow = [
        question,
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "12 degrees"}],
        },
    ]
    client.messages.create(
        model=route, max_tokens=200, messages=follow, tools=tools, extra_headers=headers
    )  # type: ignore[arg-type]
    stored = gateway.session(session, user)
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert any(b.get("type") == "tool_use" and b["id"] == use.id for b in stored[1]["content"])
    assert stored[2]["content"][0]["tool_use_id"] == use.id
    client.messages.create(
        model=route,
        max_tokens=200,
        messages=[{"role": "user", "content": "Should I take an umbrella?"}],
        extra_headers=headers,
    )
    sent = json.dumps(upstream.last.body)
    assert "[tool call] get_weather" in sent and "[tool result] 12 degrees" in sent


def test_a_streamed_answers_tool_calls_are_kept_too(
    gateway: Gateway, upstream: LoopbackUpstream, history_route: Any
) -> None:
    for protocol in ("openai", "anthropic"):
        route, session, user = history_route(protocol), unique("s-stream"), "u-tools"
        headers = {"x-session-id": session, "x-user-id": user}
        question = {"role": "user", "content": "What's the weather in Oslo?"}
        upstream.call_tool("get_weather", {"city": "Oslo"})
        if protocol == "openai":
            stream = openai_client(gateway).chat.completions.create(
                model=route,
                messages=[question],
                tools=[WEATHER_TOOL],
                stream=True,
                extra_headers=headers,
            )  # type: ignore[call-overload]
        else:
            stream = anthropic_client(gateway).messages.create(
                model=route,
                max_tokens=200,
                messages=[question],
                tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
                stream=True,
                extra_headers=headers,
            )  # type: ignore[arg-type]
        for _ in stream:
            pass
        stored = gateway.session(session, user)
        assert [m["role"] for m in stored] == ["user", "assistant"], (protocol, stored)
        if protocol == "openai":
            [call] = stored[1]["tool_calls"]
            assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
            assert call["id"]
        else:
            [use] = [b for b in stored[1]["content"] if b["type"] == "tool_use"]
            assert (use["name"], use["input"]) == ("get_weather", {"city": "Oslo"}) and use["id"]
    upstream.behave()
