"""``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/{id}`` through the live gateway,
driven by the official ``openai`` client: the Responses body runs the chat call's pipeline (context injected,
the loopback upstream asked in Chat Completions) and comes back as a Responses object or stream;
a function call round trip; ``previous_response_id`` expanded by the gateway; stored responses
readable and deletable only by their own user in their own tenant, and kept without content where
the tenant does not capture content."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from django_tenants.utils import get_public_schema_name, schema_context

from tenants.models import Tenant
from tests.conftest import TENANT_KEYS
from tests.gateway.conftest import RULE, Fallbacks, Gateway, refused_base_url
from tests.gateway.test_tool_loops import (  # noqa: F401
    FACT,
    lazy_collection,
    lazy_context,
    route_for,
)
from tests.upstream import LoopbackUpstream

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather of a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
CAPTURE_WAIT_S = 10.0


def client(gateway: Gateway, key: str | None = None, user: str | None = None) -> openai.OpenAI:
    headers = {"x-user-id": user} if user else None
    return openai.OpenAI(
        base_url=gateway.openai_base_url,
        api_key=key or gateway.key,
        default_headers=headers,
        max_retries=0,
    )


def set_capture(gateway: Gateway, django_db_blocker: Any, on: bool) -> None:
    """Turn acme's content capture on or off, and wait until the server sees it (a saved tenant
    drops every process's caches)."""
    with django_db_blocker.unblock(), schema_context(get_public_schema_name()):
        tenant = Tenant.objects.get(schema_name="acme")
        tenant.capture_content = on
        tenant.save()
    deadline = time.monotonic() + CAPTURE_WAIT_S
    with client(gateway) as probe:
        while True:
            answer = probe.responses.create(model=gateway.openai_route, input="probe")
            if answer.store is on or time.monotonic() > deadline:
                assert answer.store is on
                return
            time.sleep(0.2)


@pytest.fixture(scope="module")
def capturing(gateway: Gateway, django_db_blocker: Any) -> Iterator[None]:
    set_capture(gateway, django_db_blocker, True)
    try:
        yield
    finally:
        set_capture(gateway, django_db_blocker, False)


def chat_sent(upstream: LoopbackUpstream) -> dict[str, Any]:
    return dict(upstream.last.body)


def injected(message: dict[str, Any]) -> bool:
    """A message of the context the gateway injected (its tool exchange, its system text)."""
    calls = message.get("tool_calls") or []
    return (
        message["role"] == "system"
        or str(message.get("tool_call_id", "")).startswith("call_vsr_")
        or any(str(call["id"]).startswith("call_vsr_") for call in calls)
    )


def conversation(sent: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages the upstream received, the injected context left out."""
    return [m for m in sent["messages"] if not injected(m)]


def test_create_runs_the_chat_pipeline_and_answers_a_response(
    gateway: Gateway, upstream: LoopbackUpstream, capturing: None
) -> None:
    with client(gateway, user="u-create") as api:
        raw = api.responses.with_raw_response.create(
            model=gateway.openai_route,
            input="hello there",
            instructions="Answer in one line.",
            max_output_tokens=200,
            metadata={"ticket": "42"},
        )
    response = raw.parse()
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status == "completed"
    assert "question: hello there" in response.output_text
    assert response.usage is not None and response.usage.total_tokens > 0
    assert response.metadata == {"ticket": "42"} and response.store is True
    assert raw.headers["x-context-resolve-id"].startswith("rsv_")
    assert raw.headers["x-context-response-stored"] == "true"
    sent = chat_sent(upstream)
    assert upstream.last.path.endswith("/chat/completions")
    assert sent["model"] == "upstream-gpt"
    assert {"role": "user", "content": "hello there"} in sent["messages"]
    assert sent["messages"][0] == {"role": "system", "content": "Answer in one line."}
    assert RULE in json.dumps(sent["messages"])  # the route's context injected
    assert sent["max_completion_tokens"] <= 200


def test_a_stream_is_the_responses_event_stream(
    gateway: Gateway, upstream: LoopbackUpstream, capturing: None
) -> None:
    with (
        client(gateway) as api,
        api.responses.stream(model=gateway.openai_route, input="stream me") as stream,
    ):
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.output_text.delta" in kinds and kinds[-1] == "response.completed"
    assert "question: stream me" in final.output_text
    assert final.usage is not None and final.usage.output_tokens > 0
    # Kept: the stream's response reads back.
    with client(gateway) as api:
        assert api.responses.retrieve(final.id).output_text == final.output_text
    with client(gateway) as api:
        created = api.responses.create(model=gateway.openai_route, input="again", stream=True)
        events = list(created)
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_function_call_round_trip_with_previous_response_id(
    gateway: Gateway, upstream: LoopbackUpstream, capturing: None
) -> None:
    upstream.call_tool("get_weather", {"city": "Oslo"})
    with client(gateway, user="u-tools") as api:
        first = api.responses.create(
            model=gateway.openai_route,
            input="What is the weather in Oslo?",
            tools=[WEATHER],  # type: ignore[list-item]
        )
        calls = [item for item in first.output if item.type == "function_call"]
        assert [(c.name, json.loads(c.arguments)) for c in calls] == [
            ("get_weather", {"city": "Oslo"})
        ]
        assert chat_sent(upstream)["tools"][0]["function"]["name"] == "get_weather"
        second = api.responses.create(
            model=gateway.openai_route,
            previous_response_id=first.id,
            input=[
                {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}
            ],
            tools=[WEATHER],  # type: ignore[list-item]
        )
    assert "tool: 5 chars: sunny" in second.output_text
    assert second.previous_response_id == first.id
    messages = conversation(chat_sent(upstream))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]  # expanded
    assert messages[0]["content"] == "What is the weather in Oslo?"
    assert messages[1]["tool_calls"][0]["id"] == calls[0].call_id
    assert messages[2] == {"role": "tool", "tool_call_id": calls[0].call_id, "content": "sunny"}


def test_previous_response_id_carries_the_conversation(
    gateway: Gateway, upstream: LoopbackUpstream, capturing: None
) -> None:
    with client(gateway, user="u-prev") as api:
        first = api.responses.create(model=gateway.openai_route, input="my name is Ada")
        second = api.responses.create(
            model=gateway.openai_route, input="what is my name?", previous_response_id=first.id
        )
        third = api.responses.create(
            model=gateway.openai_route, input="and again?", previous_response_id=second.id
        )
    assert third.output_text
    messages = conversation(chat_sent(upstream))
    assert [m["role"] for m in messages] == ["user", "assistant"] * 2 + ["user"]
    assert messages[0]["content"] == "my name is Ada"
    assert messages[1]["content"] == first.output_text


def test_a_stored_response_is_read_only_by_its_user_and_tenant(
    gateway: Gateway, upstream: LoopbackUpstream, capturing: None
) -> None:
    with client(gateway, user="alice") as alice:
        made = alice.responses.create(model=gateway.openai_route, input="a secret")
        assert alice.responses.retrieve(made.id).output_text == made.output_text
    with client(gateway, user="bob") as bob:
        with pytest.raises(openai.NotFoundError) as other_user:
            bob.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError) as continued:
            bob.responses.create(
                model=gateway.openai_route, input="tell me", previous_response_id=made.id
            )
    assert other_user.value.code == "not_found" and continued.value.code == "not_found"
    with client(gateway) as nobody, pytest.raises(openai.NotFoundError):
        nobody.responses.retrieve(made.id)  # stored with a user: not the user-less callers'
    globex = client(gateway, key=TENANT_KEYS["globex"], user="alice")
    with globex, pytest.raises(openai.NotFoundError) as other_tenant:
        globex.responses.retrieve(made.id)
    body = other_tenant.value.body
    assert isinstance(body, dict) and "a secret" not in json.dumps(body)
    with client(gateway) as api:
        anonymous = api.responses.create(model=gateway.openai_route, input="open")
        assert api.responses.retrieve(anonymous.id).id == anonymous.id
        with pytest.raises(openai.NotFoundError):
            api.responses.retrieve("resp_unknown")
        not_kept = api.responses.create(model=gateway.openai_route, input="x", store=False)
        assert not_kept.store is False
        with pytest.raises(openai.NotFoundError):
            api.responses.retrieve(not_kept.id)


def test_a_stored_response_is_deleted_only_by_its_user_in_its_tenant(
    gateway: Gateway, upstream: LoopbackUpstream, capturing: None
) -> None:
    with client(gateway, user="alice") as alice:
        made = alice.responses.create(model=gateway.openai_route, input="forget me")
    with client(gateway, user="bob") as bob, pytest.raises(openai.NotFoundError) as other_user:
        bob.responses.delete(made.id)
    globex = client(gateway, key=TENANT_KEYS["globex"], user="alice")
    with globex, pytest.raises(openai.NotFoundError) as other_tenant:
        globex.responses.delete(made.id)
    with client(gateway) as nobody, pytest.raises(openai.NotFoundError):
        nobody.responses.delete(made.id)  # stored with a user: not the user-less callers'
    assert other_user.value.code == "not_found" and other_tenant.value.code == "not_found"
    assert other_user.value.body == {  # as GET answers another user's: nothing told
        "message": f"no response {made.id!r}",
        "type": "invalid_request_error",
        "param": None,
        "code": "not_found",
    }
    with client(gateway, user="alice") as alice:
        assert alice.responses.retrieve(made.id).id == made.id  # the refusals deleted nothing
        raw = alice.responses.with_raw_response.delete(made.id)
        assert raw.status_code == 200
        assert raw.parse() is None  # what the openai client makes of a deletion
        assert json.loads(raw.content) == {"id": made.id, "object": "response", "deleted": True}
        with pytest.raises(openai.NotFoundError) as gone:
            alice.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError) as continued:
            alice.responses.create(
                model=gateway.openai_route, input="again", previous_response_id=made.id
            )
        with pytest.raises(openai.NotFoundError):
            alice.responses.delete(made.id)  # a deletion happens once
        with pytest.raises(openai.NotFoundError):
            alice.responses.delete("resp_unknown")
    assert gone.value.code == "not_found" and continued.value.code == "not_found"
    with client(gateway) as api:
        anonymous = api.responses.create(model=gateway.openai_route, input="open")
        assert api.responses.delete(anonymous.id) is None
        with pytest.raises(openai.NotFoundError):
            api.responses.retrieve(anonymous.id)
    with httpx.Client(base_url=gateway.server, timeout=30) as raw_client:
        unauthenticated = raw_client.delete(f"/v1/responses/{made.id}")
    assert unauthenticated.status_code == 401


def test_without_content_capture_the_response_says_it_was_not_stored(
    gateway: Gateway, upstream: LoopbackUpstream, capturing: None, django_db_blocker: Any
) -> None:
    set_capture(gateway, django_db_blocker, False)
    try:
        not_stored(gateway)
    finally:
        set_capture(gateway, django_db_blocker, True)


def not_stored(gateway: Gateway) -> None:
    with client(gateway) as api:
        made = api.responses.create(model=gateway.openai_route, input="private")
        assert made.store is False
        with pytest.raises(openai.NotFoundError) as refused:
            api.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError):
            api.responses.create(
                model=gateway.openai_route, input="more", previous_response_id=made.id
            )
    assert refused.value.code == "response_not_stored"
    assert f"response {made.id} was not stored" in refused.value.message
    with client(gateway) as api:
        assert api.responses.delete(made.id) is None  # the caller's own, content or not
        with pytest.raises(openai.NotFoundError) as gone:
            api.responses.retrieve(made.id)
    assert gone.value.code == "not_found"


def test_bad_bodies_are_400_in_openais_shape(gateway: Gateway, upstream: LoopbackUpstream) -> None:
    hits = upstream.hits
    with client(gateway) as api:
        with pytest.raises(openai.BadRequestError) as no_input:
            api.responses.create(model=gateway.openai_route)  # type: ignore[call-overload]
        with pytest.raises(openai.BadRequestError) as hosted:
            api.responses.create(
                model=gateway.openai_route,
                input="q",
                tools=[{"type": "web_search"}],
            )
        with pytest.raises(openai.NotFoundError):
            api.responses.create(model="no-such-route", input="q")
    assert no_input.value.code == "invalid_request"
    assert hosted.value.body["param"] == "tools[0].type"  # type: ignore[index]
    assert upstream.hits == hits
    with httpx.Client(base_url=gateway.server, timeout=30) as raw:
        headers = {"Authorization": f"Bearer {gateway.key}"}
        malformed = raw.post("/v1/responses", content=b"{", headers=headers)
        assert malformed.status_code == 400 and "error" in malformed.json()
        unauthenticated = raw.get("/v1/responses/resp_x")
        assert unauthenticated.status_code == 401
        assert unauthenticated.json()["error"]["code"] == "unauthorized"


def test_an_anthropic_route_is_refused_with_a_clear_400(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    with client(gateway) as api, pytest.raises(openai.BadRequestError) as refused:
        api.responses.create(model=gateway.anthropic_route, input="q")
    assert refused.value.code == "protocol_mismatch"
    assert "/v1/messages" in refused.value.message


def test_a_responses_deployment_gets_the_body_as_responses_and_fallbacks_work(
    fallbacks: Fallbacks,
    capturing: None,
) -> None:
    gateway = fallbacks.gateway
    dead = fallbacks.deployment(refused_base_url(), protocol="openai_responses")
    live = fallbacks.deployment(
        fallbacks.second.openai_base_url, protocol="openai_responses", model="resp-model"
    )
    route = fallbacks.route(
        [dead, live], {"sources": [{"type": "skill_guardrails", "name": "rules", "texts": [RULE]}]}
    )
    with client(gateway, user="u-resp") as api:
        raw = api.responses.with_raw_response.create(
            model=route,
            input="hello responses",
            reasoning={"effort": "low"},
            tools=[WEATHER],  # type: ignore[list-item]
        )
        first = raw.parse()
        assert raw.headers["x-context-deployment"] == live
        sent = fallbacks.second.last
        assert sent.path == "/v1/responses"
        assert sent.body["model"] == "resp-model" and sent.body["store"] is False
        assert sent.body["reasoning"] == {"effort": "low"}  # the client's own field, passed on
        assert RULE in json.dumps(sent.body["input"])  # the route's context, as items
        assert sent.body["tools"][0]["name"] == "get_weather"
        assert "question: hello responses" in first.output_text
        with api.responses.stream(
            model=route, input="and streamed", previous_response_id=first.id
        ) as stream:
            text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
            final = stream.get_final_response()
    assert "question: and streamed" in text and final.output_text == text
    streamed = fallbacks.second.last.body
    assert streamed["stream"] is True
    said = [i for i in streamed["input"] if i.get("type") == "message" and i.get("role")]
    assert [item["role"] for item in said] == ["user", "assistant", "user"]
    with httpx.Client(base_url=gateway.server, timeout=30) as raw_client:
        chat = raw_client.post(
            "/v1/chat/completions",
            json={"model": route, "messages": [{"role": "user", "content": "q"}]},
            headers={"Authorization": f"Bearer {gateway.key}"},
        )
    # A chat completions call is served too: sent as Responses, answered as a chat completion.
    assert chat.status_code == 200, chat.text
    assert chat.json()["object"] == "chat.completion"
    assert fallbacks.second.last.path == "/v1/responses"


@pytest.mark.parametrize("stream", [False, True])
def test_a_lazy_source_is_served_in_process_for_a_responses_call(
    gateway: Gateway,
    upstream: LoopbackUpstream,
    route_for: Any,  # noqa: F811
    lazy_collection: str,  # noqa: F811
    stream: bool,
) -> None:
    route = route_for("openai", lazy_context(lazy_collection, lazy=True))
    upstream.call_tool("search_*")
    before = upstream.hits
    question = "How long is the Zephyr-9 warranty?"
    with client(gateway, user="u-lazy") as api:
        if stream:
            with api.responses.stream(model=route, input=question) as events:
                kinds = [event.type for event in events]
                answer = events.get_final_response()
            assert "response.function_call_arguments.delta" not in kinds
        else:
            answer = api.responses.create(model=route, input=question)
    assert "41 months" in answer.output_text  # the model got the fact through its search
    assert [item.type for item in answer.output] == ["message"]  # the search call not shown
    assert upstream.hits == before + 2  # the call and the gateway's follow-up
    follow_up = upstream.last.body
    assert FACT in follow_up["messages"][-1]["content"]
    assert follow_up["messages"][-2]["tool_calls"][0]["function"]["name"] == "search_warranty"
