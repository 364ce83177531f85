"""A route's fallback deployments through the live gateway: a call moves to the next deployment
after a 503, a 429 (whose Retry-After keeps the next calls away from it), a refused connection or
a timeout, and a stream does so only before its first byte; a 400 is the caller's and passes
through. The replay record names every attempt; the route's list reads back as written and is
validated (names of the tenant, no duplicates, at most eight, one provider's protocols: OpenAI's
Chat Completions and Responses deployments mix, a call failing over from either to the other).

Each test makes deployments of its own (cool-downs are kept per deployment in the server's
process) on two loopback upstreams of its own (the ``fallbacks`` fixture, tests/gateway/conftest.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import openai
import pytest

from contextplatform.gateway.fallback import retry_after_s
from tests.gateway.conftest import (
    DEPLOYMENT_HEADER,
    RULE,
    Fallbacks,
    Gateway,
    outcomes,
    refused_base_url,
    unique,
)

SHORT_TIMEOUT_MS = 500


def test_a_503_moves_the_call_to_the_next_deployment(fallbacks: Fallbacks) -> None:
    route, one, two = fallbacks.pair()
    fallbacks.first.fail(503)

    response = fallbacks.chat(route)

    assert response.status_code == 200, response.text
    assert response.headers[DEPLOYMENT_HEADER] == two
    assert response.json()["model"] == f"model-{two}"
    assert fallbacks.second.last.body["model"] == f"model-{two}"
    attempts = fallbacks.attempts(response)
    assert outcomes(attempts) == [(one, "status", 503), (two, "answered", None)]
    assert all(isinstance(a["ms"], int) and a["ms"] >= 0 for a in attempts)
    record = fallbacks.gateway.replay(response.headers["x-context-resolve-id"])
    assert record["tokens"]["answered_by"] == two


def test_a_429_with_retry_after_leaves_its_deployment_out_of_the_next_call(
    fallbacks: Fallbacks,
) -> None:
    route, one, two = fallbacks.pair()
    fallbacks.first.fail(429, retry_after="120")

    first_call = fallbacks.chat(route)
    assert first_call.status_code == 200, first_call.text
    assert outcomes(fallbacks.attempts(first_call)) == [
        (one, "status", 429),
        (two, "answered", None),
    ]

    fallbacks.first.behave()  # answering again, but still cooling down for two minutes
    second_call = fallbacks.chat(route)

    assert second_call.status_code == 200, second_call.text
    assert second_call.headers[DEPLOYMENT_HEADER] == two
    assert fallbacks.first.hits == 1
    assert outcomes(fallbacks.attempts(second_call)) == [(two, "answered", None)]


def test_when_every_deployment_cools_the_one_cooling_shortest_is_tried(
    fallbacks: Fallbacks,
) -> None:
    route, one, two = fallbacks.pair()
    fallbacks.first.fail(429, retry_after="60")
    fallbacks.second.fail(429, retry_after="600")
    refused = fallbacks.chat(route)
    assert refused.status_code == 429  # the last deployment's own answer, passed on
    assert outcomes(fallbacks.attempts(refused)) == [(one, "status", 429), (two, "status", 429)]

    fallbacks.first.behave()
    fallbacks.second.behave()
    response = fallbacks.chat(route)

    assert response.status_code == 200, response.text
    assert response.headers[DEPLOYMENT_HEADER] == one


def test_a_refused_connection_moves_the_call_on(fallbacks: Fallbacks) -> None:
    dead = fallbacks.deployment(refused_base_url())
    two = fallbacks.deployment(fallbacks.second.openai_base_url)
    route = fallbacks.route([dead, two])

    response = fallbacks.chat(route)

    assert response.status_code == 200, response.text
    assert response.headers[DEPLOYMENT_HEADER] == two
    assert outcomes(fallbacks.attempts(response)) == [
        (dead, "connection", None),
        (two, "answered", None),
    ]


def test_a_timeout_moves_the_call_on(fallbacks: Fallbacks) -> None:
    route, one, two = fallbacks.pair(first_timeout_ms=SHORT_TIMEOUT_MS)
    fallbacks.first.hang()

    response = fallbacks.chat(route)

    assert response.status_code == 200, response.text
    assert response.headers[DEPLOYMENT_HEADER] == two
    assert outcomes(fallbacks.attempts(response)) == [
        (one, "timeout", None),
        (two, "answered", None),
    ]


def test_a_400_is_the_callers_and_passes_through(fallbacks: Fallbacks) -> None:
    route, one, _ = fallbacks.pair()
    fallbacks.first.fail(400, {"error": {"message": "bad temperature", "type": "invalid"}})

    response = fallbacks.chat(route)

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "bad temperature"
    assert fallbacks.second.hits == 0
    assert outcomes(fallbacks.attempts(response)) == [(one, "rejected", 400)]


def test_every_deployment_failing_answers_502(fallbacks: Fallbacks) -> None:
    route, one, two = fallbacks.pair()
    fallbacks.first.fail(503)
    fallbacks.second.fail(500)

    response = fallbacks.chat(route)

    assert response.status_code == 502
    assert "answered HTTP 500" in response.json()["error"]["message"]
    assert outcomes(fallbacks.attempts(response)) == [(one, "status", 503), (two, "status", 500)]
    assert (
        fallbacks.gateway.replay(response.headers["x-context-resolve-id"])["tokens"]["answered_by"]
        is None
    )


def streamed_text(response: httpx.Response) -> str:
    text = ""
    for line in response.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[6:]).get("choices", []):
                text += choice.get("delta", {}).get("content") or ""
    return text


def test_a_stream_that_fails_before_its_first_byte_moves_on(fallbacks: Fallbacks) -> None:
    route, one, two = fallbacks.pair()
    fallbacks.first.cut_stream(after_events=0)

    response = fallbacks.chat(route, stream=True)

    assert response.status_code == 200, response.text
    assert response.headers[DEPLOYMENT_HEADER] == two
    assert "data: [DONE]" in response.text
    assert f"model: model-{two}" in streamed_text(response)
    assert outcomes(fallbacks.attempts(response)) == [
        (one, "connection", None),
        (two, "answered", None),
    ]


def test_a_stream_that_fails_after_its_first_byte_does_not(fallbacks: Fallbacks) -> None:
    route, one, _ = fallbacks.pair()
    fallbacks.first.cut_stream(after_events=2)

    response = fallbacks.chat(route, stream=True)

    assert response.status_code == 200
    assert response.headers[DEPLOYMENT_HEADER] == one
    assert "data: [DONE]" not in response.text
    assert streamed_text(response)  # the events before the cut were passed on
    assert fallbacks.second.hits == 0
    assert outcomes(fallbacks.attempts(response)) == [(one, "answered", None)]


def test_a_stream_answered_503_moves_on(fallbacks: Fallbacks) -> None:
    route, _, two = fallbacks.pair()
    fallbacks.first.fail(503, retry_after="5")

    response = fallbacks.chat(route, stream=True)

    assert response.status_code == 200, response.text
    assert response.headers[DEPLOYMENT_HEADER] == two
    assert "data: [DONE]" in response.text


def test_a_session_budget_reserves_for_the_costliest_deployment(fallbacks: Fallbacks) -> None:
    """Anthropic bills a tool-use system prompt whose size it publishes per model: a route that
    may fall back to a model with a larger one holds that much more input."""
    cheap = fallbacks.deployment(
        fallbacks.first.anthropic_base_url, protocol="anthropic", model="claude-3-sonnet"
    )
    dear = fallbacks.deployment(
        fallbacks.second.anthropic_base_url, protocol="anthropic", model="claude-3-opus"
    )
    budget = {"sources": [], "budget": {"session_max_tokens": 100_000}}
    route = fallbacks.route([cheap, dear], context=budget)
    tool = {"name": "lookup", "description": "find", "input_schema": {"type": "object"}}

    def reserved(answering: str) -> int:
        body = {
            "model": route,
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "hello"}],
            "tools": [tool],
        }
        with fallbacks.gateway.api() as api:
            response = api.post(
                "/v1/messages",
                json=body,
                headers={"x-session-id": unique("fb-session")},
            )
        assert response.status_code == 200, response.text
        assert response.headers[DEPLOYMENT_HEADER] == answering
        record = fallbacks.gateway.replay(response.headers["x-context-resolve-id"])
        return int(record["tokens"]["session_budget"]["reserved"])

    # claude-3-opus's tool prompt is 530 tokens, claude-3-sonnet's 159 (tool choice auto).
    listed = reserved(cheap)
    # The same model on a deployment of its own: the answer above moved the first one's token
    # calibration, which would change the count.
    also_cheap = fallbacks.deployment(
        fallbacks.first.anthropic_base_url, protocol="anthropic", model="claude-3-sonnet"
    )
    with fallbacks.gateway.api() as api:
        alone = api.patch(f"/api/v1/routes/{route}", json={"model": {"upstream": also_cheap}})
    assert alone.status_code == 200, alone.text

    assert listed - reserved(also_cheap) == 530 - 159


# ---------------------------------------------------------------- OpenAI's two protocols mixed


def openai_client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.openai_base_url, api_key=gateway.key, max_retries=0)


def test_a_responses_deployment_answering_503_fails_over_to_a_chat_one(
    fallbacks: Fallbacks,
) -> None:
    responses = fallbacks.deployment(fallbacks.first.openai_base_url, protocol="openai_responses")
    chat = fallbacks.deployment(fallbacks.second.openai_base_url)
    route = fallbacks.route([responses, chat])
    fallbacks.first.fail(503)
    with openai_client(fallbacks.gateway) as api:
        raw = api.chat.completions.with_raw_response.create(
            model=route, messages=[{"role": "user", "content": "hello mixed"}]
        )
        answer = raw.parse()
        assert raw.headers[DEPLOYMENT_HEADER] == chat
        assert fallbacks.first.last.path == "/v1/responses"  # asked as it speaks, then left
        assert fallbacks.second.last.path == "/v1/chat/completions"
        assert "question: hello mixed" in (answer.choices[0].message.content or "")
        assert outcomes(fallbacks.attempts(raw)) == [
            (responses, "status", 503),
            (chat, "answered", None),
        ]
        # The Responses endpoint's call moves on the same way (translated to chat for the second).
        fallbacks.first.fail(503)
        asked = fallbacks.first.hits
        response = api.responses.with_raw_response.create(model=route, input="responses too")
    assert response.headers[DEPLOYMENT_HEADER] == chat
    assert "question: responses too" in response.parse().output_text
    # The first is cooling down after its 503: this call went straight to the second.
    assert fallbacks.first.hits == asked


def test_a_chat_deployment_answering_503_fails_over_to_a_responses_one(
    fallbacks: Fallbacks,
) -> None:
    chat = fallbacks.deployment(fallbacks.first.openai_base_url)
    responses = fallbacks.deployment(
        fallbacks.second.openai_base_url, protocol="openai_responses", model="resp-model"
    )
    route = fallbacks.route(
        [chat, responses], {"sources": [{"type": "skill_guardrails", "name": "r", "texts": [RULE]}]}
    )
    fallbacks.first.fail(503)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    with openai_client(fallbacks.gateway) as api:
        raw = api.chat.completions.with_raw_response.create(
            model=route,
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hello chat"},
            ],
            max_tokens=300,
            reasoning_effort="low",
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "place", "schema": schema, "strict": True},
            },
        )
        answer = raw.parse()
        assert raw.headers[DEPLOYMENT_HEADER] == responses
        sent = fallbacks.second.last
        assert sent.path == "/v1/responses"
        assert sent.body["model"] == "resp-model" and sent.body["store"] is False
        assert sent.body["max_output_tokens"] <= 300
        assert sent.body["instructions"].startswith("Be brief.")
        assert RULE in json.dumps(sent.body)  # the route's context went along
        # The chat client's own fields, as Responses spells them.
        assert sent.body["reasoning"] == {"effort": "low"}
        assert sent.body["text"] == {
            "format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}
        }
        assert not {"messages", "max_tokens", "response_format"} & set(sent.body)
        # A chat completion as the client expects it, usage included.
        assert answer.object == "chat.completion"
        assert "question: hello chat" in (answer.choices[0].message.content or "")
        assert answer.usage is not None and answer.usage.completion_tokens > 0
        assert outcomes(fallbacks.attempts(raw)) == [
            (chat, "status", 503),
            (responses, "answered", None),
        ]
        stream = api.chat.completions.create(
            model=route, messages=[{"role": "user", "content": "and streamed"}], stream=True
        )
        chunks = list(stream)
    assert fallbacks.second.last.body["stream"] is True
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "question: and streamed" in text
    assert all(c.usage is None for c in chunks)  # the client asked for no usage chunk


def test_a_chat_call_asking_what_responses_cannot_do_skips_responses_deployments(
    fallbacks: Fallbacks,
) -> None:
    responses = fallbacks.deployment(fallbacks.first.openai_base_url, protocol="openai_responses")
    chat = fallbacks.deployment(fallbacks.second.openai_base_url)
    mixed = fallbacks.route([responses, chat])
    only_responses = fallbacks.route(responses)
    with openai_client(fallbacks.gateway) as api:
        raw = api.chat.completions.with_raw_response.create(
            model=mixed, messages=[{"role": "user", "content": "q"}], stop=["\n\n"]
        )
        assert raw.headers[DEPLOYMENT_HEADER] == chat
        assert fallbacks.first.hits == 0  # Responses has no stop: never asked
        assert fallbacks.second.last.body["stop"] == ["\n\n"]
        with pytest.raises(openai.BadRequestError) as refused:
            api.chat.completions.create(
                model=only_responses, messages=[{"role": "user", "content": "q"}], seed=7
            )
        # Without the field the same route serves the call.
        served = api.chat.completions.with_raw_response.create(
            model=only_responses, messages=[{"role": "user", "content": "q"}]
        )
    assert refused.value.code == "protocol_mismatch"
    assert refused.value.param == "seed"
    assert "has no seed" in refused.value.message and "/v1/responses" in refused.value.message
    assert served.headers[DEPLOYMENT_HEADER] == responses


# ---------------------------------------------------------------- the route's list


def test_the_list_reads_back_as_written_and_posts_back(fallbacks: Fallbacks) -> None:
    one = fallbacks.deployment(fallbacks.first.openai_base_url)
    two = fallbacks.deployment(fallbacks.second.openai_base_url)
    route = fallbacks.route([one, two])
    with fallbacks.gateway.api() as api:
        read = api.get(f"/api/v1/routes/{route}").json()
        assert read["model"]["upstream"] == [one, two]
        put = api.put(f"/api/v1/routes/{route}", json=read)
        assert put.status_code == 200, put.text
        assert api.get(f"/api/v1/routes/{route}").json()["model"]["upstream"] == [one, two]
        single = api.patch(f"/api/v1/routes/{route}", json={"model": {"upstream": two}})
        assert single.status_code == 200, single.text
        assert api.get(f"/api/v1/routes/{route}").json()["model"]["upstream"] == two


@pytest.mark.parametrize(
    ("upstream", "param", "words"),
    [
        (["{one}", "fb-nowhere-{one}"], "model.upstream[1]", "no deployment named"),
        (["{one}", "{one}"], "model.upstream", "twice"),
        (["{one}"] * 9, "model.upstream", "at most 8"),
        ([], "model.upstream", "at least one"),
        (["{one}", "{anthropic}"], "model.upstream[1]", "one provider's protocol"),
        (["{responses}", "{anthropic}"], "model.upstream[1]", "one provider's protocol"),
        (["{anthropic}", "{responses}"], "model.upstream[1]", "one provider's protocol"),
    ],
)
def test_a_bad_list_is_refused(
    fallbacks: Fallbacks, upstream: list[str], param: str, words: str
) -> None:
    one = fallbacks.deployment(fallbacks.first.openai_base_url)
    anthropic = fallbacks.deployment(fallbacks.first.anthropic_base_url, protocol="anthropic")
    responses = fallbacks.deployment(fallbacks.first.openai_base_url, protocol="openai_responses")
    names = [name.format(one=one, anthropic=anthropic, responses=responses) for name in upstream]
    with fallbacks.gateway.api() as api:
        response = api.post(
            "/api/v1/routes", json={"name": unique("gw-fb-bad"), "model": {"upstream": names}}
        )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert (error.get("param") or "").startswith(param), error
    assert words in error["message"], error


def test_a_listed_deployment_cannot_be_deleted(fallbacks: Fallbacks) -> None:
    one = fallbacks.deployment(fallbacks.first.openai_base_url)
    two = fallbacks.deployment(fallbacks.second.openai_base_url)
    route = fallbacks.route([one, two])
    with fallbacks.gateway.api() as api:
        response = api.delete(f"/api/v1/deployments/{two}")
    assert response.status_code == 409, response.text
    assert route in response.text


# ---------------------------------------------------------------- Retry-After


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert retry_after_s("30") == 30.0
    assert retry_after_s(format_datetime(now + timedelta(seconds=90), usegmt=True), now) == 90.0
    assert retry_after_s(format_datetime(now - timedelta(seconds=5), usegmt=True), now) == 0.0
    assert retry_after_s("soon") is None
    assert retry_after_s(None) is None
