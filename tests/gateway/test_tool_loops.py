"""The gateway serves its own tools in process, live: ``vsr_context_retrieve`` from the recovery
store and lazy sources' ``search_<source>`` tools, non-streaming and in streams, with the official
clients; the client never sees the reserved tools and the usage of every call is added up."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from django_tenants.utils import schema_context

from compression.rewrite import RETRIEVE_TOOL_NAME
from contextplatform.gateway.served_tools import MAX_ROUNDS
from tests.compression.conversations import LOG, conversation
from tests.gateway.conftest import Gateway, unique
from tests.upstream import PREAMBLE, LoopbackUpstream, prompt_tokens

RECOVERABLE = {
    "compress": {
        "targets": {
            "tool_outputs": {"mode": "recoverable", "min_tokens": 2000, "target_tokens": 800}
        }
    }
}
# What the answer says when the model read the whole original (the upstream echoes its length).
ORIGINAL_START = f"tool: {len(LOG)} chars"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture
def route_for(gateway: Gateway) -> Iterator[Any]:
    """Creates routes on the package's deployments; removes them after the test."""
    created: list[str] = []

    def create(protocol: str, context: dict[str, Any], window: int = 16000) -> str:
        context = {"sources": [], **context}
        template = gateway.openai_route if protocol == "openai" else gateway.anthropic_route
        name = unique(f"tools-{protocol}")
        body = {
            "name": name,
            "model": {"upstream": gateway.upstream_of(template), "context_window": window},
            "context": context,
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


def openai_client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.openai_base_url, api_key=gateway.key, max_retries=0)


def anthropic_client(gateway: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.server, api_key=gateway.key, max_retries=0)


def anthropic_conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Which service answered 500?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "read_logs", "input": {"s": 500}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": LOG},
                {"type": "text", "text": "Which service answered 500, and when?"},
            ],
        },
    ]


def anthropic_tools() -> list[dict[str, Any]]:
    return [{"name": "read_logs", "input_schema": {"type": "object", "properties": {}}}]


def upstream_bodies(upstream: LoopbackUpstream, since: int) -> list[dict[str, Any]]:
    with upstream.lock:
        return [seen.body for seen in upstream.requests[since:]]


def offered_tools(body: dict[str, Any]) -> list[str]:
    return [
        (tool.get("function") or {}).get("name") or tool.get("name")
        for tool in body.get("tools") or []
    ]


def test_openai_retrieve_call_is_served_and_followed_up(
    gateway: Gateway, upstream: LoopbackUpstream, route_for: Any
) -> None:
    route = route_for("openai", RECOVERABLE)
    upstream.call_tool(RETRIEVE_TOOL_NAME)
    before = upstream.hits
    raw = openai_client(gateway).chat.completions.with_raw_response.create(
        model=route,
        messages=conversation()["messages"],
        max_tokens=200,
        user="u-tools",
        tools=[conversation_tool()],
    )
    completion = raw.parse()
    message = completion.choices[0].message
    assert ORIGINAL_START in (message.content or "")  # the follow-up saw the original
    assert message.tool_calls is None and completion.choices[0].finish_reason == "stop"
    first, follow_up = upstream_bodies(upstream, before)
    assert RETRIEVE_TOOL_NAME in offered_tools(first)
    assert LOG not in json.dumps(first)  # compressed in the first call
    tool_message = follow_up["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["content"] == LOG
    assert follow_up["messages"][-2]["tool_calls"][0]["function"]["name"] == RETRIEVE_TOOL_NAME
    # Usage: both calls added up.
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == prompt_tokens(first) + prompt_tokens(follow_up)
    record = gateway.replay(raw.headers["x-context-resolve-id"])
    assert [(c["tool"], c["status"]) for c in record["tool_calls"]] == [
        (RETRIEVE_TOOL_NAME, "served")
    ]
    assert record["tool_calls"][0]["bytes"] == len(LOG.encode())
    assert record["tokens"]["provider"]["input"] == completion.usage.prompt_tokens
    # The record's usage columns sum both calls too (what spend adds up).
    assert record["usage"]["input_tokens"] == completion.usage.prompt_tokens
    assert record["usage"]["output_tokens"] == completion.usage.completion_tokens


def conversation_tool() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": "read_logs", "parameters": {"type": "object", "properties": {}}},
    }


def test_openai_stream_holds_the_reserved_call_and_continues(
    gateway: Gateway, upstream: LoopbackUpstream, route_for: Any
) -> None:
    route = route_for("openai", RECOVERABLE)
    upstream.call_tool(RETRIEVE_TOOL_NAME)
    before = upstream.hits
    stream = openai_client(gateway).chat.completions.create(
        model=route,
        messages=conversation()["messages"],
        max_tokens=200,
        user="u-tools",
        tools=[conversation_tool()],
        stream=True,
        stream_options={"include_usage": True},
    )
    texts, finishes, usage = [], [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            assert not choice.delta.tool_calls  # the reserved call never reaches the client
            texts.append(choice.delta.content or "")
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
    text = "".join(texts)
    assert text.startswith(PREAMBLE) and ORIGINAL_START in text
    assert finishes == ["stop"]
    first, follow_up = upstream_bodies(upstream, before)
    assert first["stream"] is True and follow_up["stream"] is True
    assert follow_up["messages"][-1]["content"] == LOG
    assert usage is not None
    assert usage.prompt_tokens == prompt_tokens(first) + prompt_tokens(follow_up)


def test_anthropic_retrieve_call_is_served_and_followed_up(
    gateway: Gateway, upstream: LoopbackUpstream, route_for: Any
) -> None:
    route = route_for("anthropic", RECOVERABLE)
    upstream.call_tool(RETRIEVE_TOOL_NAME)
    before = upstream.hits
    message = anthropic_client(gateway).messages.create(
        model=route,
        max_tokens=200,
        messages=anthropic_conversation(),  # type: ignore[arg-type]
        tools=anthropic_tools(),  # type: ignore[arg-type]
        metadata={"user_id": "u-tools"},
    )
    assert all(block.type == "text" for block in message.content)
    assert ORIGINAL_START in message.content[0].text  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    first, follow_up = upstream_bodies(upstream, before)
    assert LOG not in json.dumps(first)
    result = follow_up["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["content"] == LOG
    assert message.usage.input_tokens == prompt_tokens(first) + prompt_tokens(follow_up)


def test_anthropic_stream_holds_the_reserved_call_and_continues(
    gateway: Gateway, upstream: LoopbackUpstream, route_for: Any
) -> None:
    route = route_for("anthropic", RECOVERABLE)
    upstream.call_tool(RETRIEVE_TOOL_NAME)
    before = upstream.hits
    with anthropic_client(gateway).messages.stream(
        model=route,
        max_tokens=200,
        messages=anthropic_conversation(),  # type: ignore[arg-type]
        tools=anthropic_tools(),  # type: ignore[arg-type]
        metadata={"user_id": "u-tools"},
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.startswith(PREAMBLE) and ORIGINAL_START in text
    assert [block.type for block in final.content] == ["text", "text"]
    assert final.stop_reason == "end_turn"
    first, follow_up = upstream_bodies(upstream, before)
    assert follow_up["messages"][-1]["content"][0]["content"] == LOG
    assert final.usage.input_tokens == prompt_tokens(first) + prompt_tokens(follow_up)


def test_the_clients_own_tool_calls_pass_through_in_both_modes(
    gateway: Gateway, upstream: LoopbackUpstream, route_for: Any
) -> None:
    route = route_for("openai", RECOVERABLE)
    upstream.call_tool("get_weather", {"city": "Oslo"})
    client = openai_client(gateway)
    arguments = {"model": route, "messages": conversation()["messages"], "max_tokens": 200}
    tools = [conversation_tool(), WEATHER_TOOL]
    completion = client.chat.completions.create(**arguments, tools=tools)  # type: ignore[call-overload]
    calls = completion.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather"]
    assert completion.choices[0].finish_reason == "tool_calls"
    streamed: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in client.chat.completions.create(**arguments, tools=tools, stream=True):  # type: ignore[call-overload]
        for choice in chunk.choices:
            for part in choice.delta.tool_calls or []:
                entry = streamed.setdefault(part.index, {"name": "", "arguments": ""})
                entry["name"] += part.function.name or ""
                entry["arguments"] += part.function.arguments or ""
            finish = choice.finish_reason or finish
    assert streamed == {0: {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    assert finish == "tool_calls"


def test_a_model_that_keeps_calling_gets_its_reserved_calls_taken_out(
    gateway: Gateway, upstream: LoopbackUpstream, route_for: Any
) -> None:
    route = route_for("openai", RECOVERABLE)
    upstream.call_tool(RETRIEVE_TOOL_NAME, always=True)
    before = upstream.hits
    raw = openai_client(gateway).chat.completions.with_raw_response.create(
        model=route, messages=conversation()["messages"], max_tokens=200, user="u-tools"
    )
    completion = raw.parse()
    assert upstream.hits - before == 1 + MAX_ROUNDS
    choice = completion.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    assert choice.message.content == PREAMBLE
    statuses = [
        c["status"] for c in gateway.replay(raw.headers["x-context-resolve-id"])["tool_calls"]
    ]
    assert statuses[-1] == "rounds_exhausted" and statuses.count("served") == MAX_ROUNDS


def test_a_retrieve_for_another_users_key_is_refused_to_the_model(
    gateway: Gateway, upstream: LoopbackUpstream, route_for: Any
) -> None:
    route = route_for("openai", RECOVERABLE)
    upstream.call_tool(RETRIEVE_TOOL_NAME, {"key": "0" * 24})
    before = upstream.hits
    completion = openai_client(gateway).chat.completions.create(
        model=route, messages=conversation()["messages"], max_tokens=200, user="u-tools"
    )
    follow_up = upstream_bodies(upstream, before)[-1]
    assert follow_up["messages"][-1]["content"].startswith("error: no such recovery key")
    assert "error: no such recovery key" in (completion.choices[0].message.content or "")


# --------------------------------------------------------------------------------------------
# Lazy retrieval.

FACT = "The Zephyr-9 warranty lasts exactly 41 months from the day of delivery."


@pytest.fixture(scope="module")
def lazy_collection(gateway: Gateway, django_db_blocker: Any) -> Iterator[str]:
    """A collection with the fact, ingested in this process (Celery runs eagerly in tests) and
    committed, so the live server reads it."""
    from sources.embedding import get_embedder
    from sources.ingestion import (
        DocumentInput,
        create_collection,
        run_ingestion_job,
        submit_documents,
    )
    from sources.models import Collection

    name = unique("lazy-docs")
    with django_db_blocker.unblock(), schema_context("acme"):
        collection = create_collection(name=name, description="warranty terms")
        documents = [
            DocumentInput(id="warranty", title="Warranty", text=FACT),
            DocumentInput(id="shipping", title="Shipping", text="Parcels ship within two days."),
        ]
        job = submit_documents(collection=collection, documents=documents)
        job = run_ingestion_job(job.id, get_embedder())
        assert job.status == "done", job.error
    yield name
    with django_db_blocker.unblock(), schema_context("acme"):
        Collection.objects.filter(name=name).delete()


def lazy_context(collection: str, lazy: bool) -> dict[str, Any]:
    return {
        "sources": [
            {
                "type": "rag",
                "name": "warranty",
                "lazy": lazy,
                "timeout_ms": 60_000,  # the live server loads its embedder on the first search
                "backend": "vectorstore",
                "backend_config": {"collection": collection},
                "match": {"recall": {"top_k": 2, "min_similarity": 0.0}},
            }
        ]
    }


@pytest.mark.parametrize("stream", [False, True])
def test_a_lazy_source_is_a_search_tool_served_in_process(
    gateway: Gateway,
    upstream: LoopbackUpstream,
    route_for: Any,
    lazy_collection: str,
    stream: bool,
) -> None:
    route = route_for("openai", lazy_context(lazy_collection, lazy=True))
    upstream.call_tool("search_*")
    before = upstream.hits
    messages = [{"role": "user", "content": "How long is the Zephyr-9 warranty?"}]
    client = openai_client(gateway)
    if stream:
        chunks = client.chat.completions.create(
            model=route, messages=messages, user="u-lazy", stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        text = client.chat.completions.create(model=route, messages=messages, user="u-lazy")
        text = text.choices[0].message.content or ""
    assert "41 months" in text  # the model got the fact through its search
    first, follow_up = upstream_bodies(upstream, before)
    assert "search_warranty" in offered_tools(first)
    assert FACT not in json.dumps(first)  # nothing pre-loaded
    assert FACT in follow_up["messages"][-1]["content"]
    assert follow_up["messages"][-2]["tool_calls"][0]["function"]["name"] == "search_warranty"


def test_a_lazy_source_is_recorded_and_saves_context(
    gateway: Gateway, upstream: LoopbackUpstream, route_for: Any, lazy_collection: str
) -> None:
    lazy_route = route_for("openai", lazy_context(lazy_collection, lazy=True))
    eager_route = route_for("openai", lazy_context(lazy_collection, lazy=False))
    messages = [{"role": "user", "content": "What colour is the sky?"}]
    client = openai_client(gateway)
    lazy = client.chat.completions.with_raw_response.create(model=lazy_route, messages=messages)
    eager = client.chat.completions.with_raw_response.create(model=eager_route, messages=messages)
    lazy_record = gateway.replay(lazy.headers["x-context-resolve-id"])
    eager_record = gateway.replay(eager.headers["x-context-resolve-id"])
    (source,) = lazy_record["sources"]
    assert source["status"] == "skipped"
    assert source["notes"] == {"lazy": True, "tool": "search_warranty"}
    assert lazy_record["tool_calls"] == []  # the model did not search: nothing was fetched
    assert eager_record["sources"][0]["status"] == "ok"
    assert lazy_record["tokens"]["after"] < eager_record["tokens"]["after"]

    upstream.call_tool("search_*")
    searched = client.chat.completions.with_raw_response.create(
        model=lazy_route, messages=[{"role": "user", "content": "Zephyr-9 warranty?"}]
    )
    (call,) = gateway.replay(searched.headers["x-context-resolve-id"])["tool_calls"]
    assert call["tool"] == "search_warranty" and call["source"] == "warranty"
    assert call["status"] == "ok" and call["items"] >= 1 and call["tokens"] > 0


def test_a_resolve_for_an_application_fetches_a_lazy_source(
    gateway: Gateway, route_for: Any, lazy_collection: str
) -> None:
    route = route_for("openai", lazy_context(lazy_collection, lazy=True))
    body = {"messages": [{"role": "user", "content": "How long is the Zephyr-9 warranty?"}]}
    with gateway.api() as api:
        response = api.post("/api/v1/resolve", json={"route": route, "request": body})
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["sources"][0]["status"] == "ok"
    assert FACT in json.dumps(report["request"])
    assert "search_warranty" not in json.dumps(report["request"])


def test_a_follow_up_the_session_budget_cannot_hold_is_not_made(
    gateway: Gateway, upstream: LoopbackUpstream, route_for: Any, spend: Any
) -> None:
    limit = 30_000  # the compressed first call fits; a follow-up with the whole log does not
    tight = route_for("openai", {**RECOVERABLE, "budget": {"session_max_tokens": limit}})
    upstream.call_tool(RETRIEVE_TOOL_NAME)
    before = upstream.hits
    session = unique("s-tight")
    raw = openai_client(gateway).chat.completions.with_raw_response.create(
        model=tight,
        messages=conversation()["messages"],
        max_tokens=200,
        user="u-tools",
        extra_headers={"x-session-id": session},
    )
    completion = raw.parse()
    assert upstream.hits - before == 1  # no follow-up
    assert completion.choices[0].message.tool_calls is None
    assert completion.choices[0].message.content == PREAMBLE
    record = gateway.replay(raw.headers["x-context-resolve-id"])
    assert [c["status"] for c in record["tool_calls"]] == ["served", "budget_exceeded"]
    spent, reserved = spend(session, "u-tools")
    assert reserved == 0 and 0 < spent <= limit

    roomy = route_for("openai", {**RECOVERABLE, "budget": {"session_max_tokens": 400_000}})
    session = unique("s-roomy")
    completion = openai_client(gateway).chat.completions.create(
        model=roomy,
        messages=conversation()["messages"],
        max_tokens=200,
        user="u-tools",
        extra_headers={"x-session-id": session},
    )
    assert ORIGINAL_START in (completion.choices[0].message.content or "")
    assert completion.usage is not None
    usage = completion.usage
    assert spend(session, "u-tools") == (usage.prompt_tokens + usage.completion_tokens, 0)
