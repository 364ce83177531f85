"""``POST /api/v1/resolve`` end to end through real routes: sources, failures, packing, injection,
the hand-back, replay and the OpenAPI schema."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

import pytest
import yaml
from django.db import connection

from tests.conftest import ApiClient, TenantFixture
from tests.resolve import source_kinds_for_tests

QUESTION = "Where is my parcel?"


def chat(text: str = QUESTION, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}], **extra}


def make_route(api: ApiClient, name: str, sources: list[dict[str, Any]], **context: Any) -> None:
    body = {"name": name, "context": {"sources": sources, **context}}
    response = api.post("/api/v1/routes", body)
    assert response.status_code == 201, response.content


def resolve(api: ApiClient, route: str, request: dict[str, Any] | None = None, **extra: Any) -> Any:
    return api.post("/api/v1/resolve", {"route": route, "request": request or chat(), **extra})


def resolved(
    api: ApiClient, route: str, request: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    response = resolve(api, route, request, **extra)
    assert response.status_code == 200, response.content
    return response.json()


def source(report: dict[str, Any], name: str) -> dict[str, Any]:
    matches = [s for s in report["sources"] if s["name"] == name]
    assert len(matches) == 1, report["sources"]
    return matches[0]


def items_of(report: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [item for item in report["items"] if item["source"] == name]


RULES = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}


# --- the response shape ---------------------------------------------------------------------


def test_resolve_report_shape(acme_api: ApiClient) -> None:
    make_route(acme_api, "support", [RULES])
    report = resolved(acme_api, "support")
    assert report["id"].startswith("rsv_")
    assert set(report["budget"]) >= {
        "context_window",
        "reserved_output",
        "max_input",
        "context",
        "used",
    }
    assert report["budget"]["context_window"] == 128_000
    assert report["budget"]["used"] == report["items"][0]["tokens"] > 0
    assert report["sources"] == [
        {
            **source(report, "rules"),
            "name": "rules",
            "type": "skill_guardrails",
            "status": "ok",
            "items": 1,
            "kept": 1,
        }
    ]
    item = report["items"][0]
    assert item["source"] == "rules"
    assert item["priority"] == 100
    assert item["kept"] is True
    assert item["reason"] == "kept"
    assert item["estimator"]
    assert set(report["compression"]) >= {"applied", "tokens_before", "tokens_after", "skip_reason"}
    assert report["tokens"]["after"] > report["tokens"]["before"] > 0
    assert report["tokens"]["estimator"]


# --- concurrency, timeouts and failures -----------------------------------------------------


def test_sources_are_fetched_concurrently(acme_api: ApiClient) -> None:
    # Each barrier source returns only when all three are in flight at once; fetched one after
    # another, the first would wait until its timeout.
    barriers = [
        {"type": "test_barrier", "name": f"b{i}", "parties": 3, "timeout_ms": 5000}
        for i in range(3)
    ]
    make_route(acme_api, "parallel", barriers)
    report = resolved(acme_api, "parallel")
    assert [s["status"] for s in report["sources"]] == ["ok", "ok", "ok"]
    assert source_kinds_for_tests.MAX_IN_FLIGHT[report["id"]] == 3
    intervals = source_kinds_for_tests.INTERVALS[report["id"]].values()
    assert max(start for start, _ in intervals) < min(end for _, end in intervals)


def test_hanging_source_times_out_and_the_request_succeeds(acme_api: ApiClient) -> None:
    make_route(
        acme_api, "hangs", [RULES, {"type": "test_hang", "name": "stuck", "timeout_ms": 100}]
    )
    report = resolved(acme_api, "hangs")
    stuck = source(report, "stuck")
    assert stuck["status"] == "timeout"
    assert stuck["items"] == 0
    assert "timed out" in stuck["error"]
    assert source(report, "rules")["status"] == "ok"
    assert items_of(report, "rules")[0]["kept"] is True
    assert "vsr_stuck_context" not in json.dumps(report["request"])
    assert "Be kind." in json.dumps(report["request"])

    record = acme_api.get(f"/api/v1/replay/{report['id']}").json()
    assert record["status"] == "partial"
    assert next(s for s in record["sources"] if s["name"] == "stuck")["status"] == "timeout"


def test_failing_source_is_skipped_by_default(acme_api: ApiClient) -> None:
    make_route(
        acme_api,
        "flaky",
        [RULES, {"type": "test_sleep", "name": "broken", "fail": True, "items": ["never seen"]}],
    )
    report = resolved(acme_api, "flaky")
    broken = source(report, "broken")
    assert broken["status"] == "failed"
    assert broken["on_failure"] == "skip"
    assert "RuntimeError" in broken["error"]
    assert "never seen" not in json.dumps(report["request"])
    assert acme_api.get(f"/api/v1/replay/{report['id']}").json()["status"] == "partial"


def test_empty_and_disabled_sources(acme_api: ApiClient) -> None:
    make_route(
        acme_api,
        "quiet",
        [
            RULES,
            {"type": "test_sleep", "name": "nothing"},
            {"type": "test_sleep", "name": "off", "enabled": False, "items": ["hidden"]},
        ],
    )
    report = resolved(acme_api, "quiet")
    assert source(report, "nothing")["status"] == "empty"
    assert source(report, "off")["status"] == "skipped"
    assert "hidden" not in json.dumps(report)
    assert acme_api.get(f"/api/v1/replay/{report['id']}").json()["status"] == "ok"


@pytest.mark.parametrize(
    ("failing", "status_word"),
    [
        ({"type": "test_sleep", "name": "gate", "fail": True, "on_failure": "block"}, "failed"),
        (
            {"type": "test_hang", "name": "gate", "timeout_ms": 100, "on_failure": "block"},
            "timed out",
        ),
    ],
)
def test_block_gives_503_and_a_refused_replay(
    acme_api: ApiClient, failing: dict[str, Any], status_word: str
) -> None:
    make_route(acme_api, "strict", [RULES, failing])
    response = resolve(acme_api, "strict", user="u_1", session="s_blocked")
    assert response.status_code == 503, response.content
    error = response.json()["error"]
    assert error["code"] == "source_failed"
    assert error["param"] == "sources.gate"
    assert status_word in error["message"]

    refused = acme_api.get("/api/v1/replay", {"status": "refused"}).json()["data"]
    assert len(refused) == 1
    record = refused[0]
    assert record["route"] == "strict"
    assert record["id"] in error["message"]
    assert record["error"]["code"] == "source_failed"
    detail = acme_api.get(f"/api/v1/replay/{record['id']}").json()
    assert detail["status"] == "refused"
    assert next(s for s in detail["sources"] if s["name"] == "gate")["on_failure"] == "block"

    # A refused resolve writes no turn and cannot be completed.
    messages = acme_api.get("/api/v1/sessions/s_blocked/messages", {"user": "u_1"}).json()["data"]
    assert messages == []
    answer = {"choices": [{"message": {"role": "assistant", "content": "x"}}]}
    assert (
        acme_api.post(f"/api/v1/resolve/{record['id']}/response", {"response": answer}).status_code
        == 409
    )


def test_warn_logs_a_warning_with_request_tenant_and_source(
    acme: TenantFixture, acme_api: ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    make_route(
        acme_api,
        "warned",
        [RULES, {"type": "test_sleep", "name": "wobbly", "fail": True, "on_failure": "warn"}],
    )
    caplog.set_level(logging.DEBUG, logger="contextplatform.sources")
    report = resolved(acme_api, "warned")
    assert source(report, "wobbly")["status"] == "failed"

    failed = [r for r in caplog.records if r.getMessage() == "context_source_failed"]
    assert len(failed) == 1
    record = failed[0]
    assert record.name == "contextplatform.sources"
    assert record.levelno == logging.WARNING
    assert record.request_id == report["id"]  # type: ignore[attr-defined]
    assert record.tenant == acme.schema  # type: ignore[attr-defined]
    assert record.source == "wobbly"  # type: ignore[attr-defined]
    assert record.status == "failed"  # type: ignore[attr-defined]
    assert "RuntimeError" in record.err  # type: ignore[attr-defined]

    ok = [r for r in caplog.records if r.getMessage() == "context_source_ok"]
    assert [(r.source, r.items, r.request_id) for r in ok] == [("rules", 1, report["id"])]  # type: ignore[attr-defined]
    assert ok[0].levelno == logging.DEBUG  # a success is in the replay record and the metrics


def test_skip_failure_is_not_a_warning(
    acme_api: ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    make_route(acme_api, "skipped", [{"type": "test_sleep", "name": "quietly", "fail": True}])
    caplog.set_level(logging.INFO, logger="contextplatform.sources")
    report = resolved(acme_api, "skipped")
    failed = [r for r in caplog.records if r.getMessage() == "context_source_failed"]
    assert len(failed) == 1
    assert failed[0].levelno < logging.WARNING
    assert failed[0].request_id == report["id"]  # type: ignore[attr-defined]


# --- packing --------------------------------------------------------------------------------


def test_oversized_item_is_skipped_and_smaller_later_ones_kept(acme_api: ApiClient) -> None:
    huge = "x" * 1000  # ~250 tokens, over the 60-token context budget on its own
    make_route(
        acme_api,
        "packed",
        [
            {"type": "test_sleep", "name": "big", "priority": 90, "items": [huge]},
            {
                "type": "test_sleep",
                "name": "small",
                "priority": 50,
                "items": ["short one", "short two"],
            },
        ],
        budget={"context_tokens": 60},
        injection={"mode": "system_prompt"},
    )
    report = resolved(acme_api, "packed")
    assert report["budget"]["context"] == 60

    big = items_of(report, "big")
    assert len(big) == 1
    assert big[0]["tokens"] > 60
    assert big[0]["kept"] is False
    assert big[0]["reason"] == "over_budget"

    small = items_of(report, "small")
    assert [(i["kept"], i["reason"]) for i in small] == [(True, "kept"), (True, "kept")]
    # Packed by priority, highest first.
    assert [i["source"] for i in report["items"]] == ["big", "small", "small"]
    assert report["budget"]["used"] == sum(i["tokens"] for i in small) <= 60

    assert (source(report, "big")["items"], source(report, "big")["kept"]) == (1, 0)
    assert (source(report, "small")["items"], source(report, "small")["kept"]) == (2, 2)
    system = report["request"]["messages"][0]["content"]
    assert huge not in system
    assert "short one" in system and "short two" in system
    assert '<context source="big">' not in system

    detail = acme_api.get(f"/api/v1/replay/{report['id']}").json()
    assert [(i["source"], i["kept"], i["reason"]) for i in detail["items"]] == [
        ("big", False, "over_budget"),
        ("small", True, "kept"),
        ("small", True, "kept"),
    ]


# --- injection ------------------------------------------------------------------------------

PROFILE = {"type": "user_profile", "name": "profile"}


def test_system_prompt_openai_creates_a_system_message(acme_api: ApiClient) -> None:
    make_route(acme_api, "sys", [RULES], injection={"mode": "system_prompt"})
    request = chat()
    report = resolved(acme_api, "sys", request)
    assert report["format"] == "openai"
    messages = report["request"]["messages"]
    assert messages[0]["role"] == "system"
    assert messages[0]["content"].startswith("# Context")
    assert '<context source="rules">\nBe kind.\n</context>' in messages[0]["content"]
    assert messages[1:] == request["messages"]
    assert report["request"]["model"] == "gpt-4o-mini"


def test_system_prompt_openai_extends_an_existing_system_message(acme_api: ApiClient) -> None:
    make_route(acme_api, "sys", [RULES], injection={"mode": "system_prompt"})
    request = {
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": QUESTION},
        ]
    }
    messages = resolved(acme_api, "sys", request)["request"]["messages"]
    assert len(messages) == 2
    assert messages[0]["role"] == "system"
    assert messages[0]["content"].startswith("You are helpful.")
    assert "# Context" in messages[0]["content"]
    assert '<context source="rules">' in messages[0]["content"]
    assert messages[1] == request["messages"][1]


def test_system_prompt_anthropic_detected_by_shape(acme_api: ApiClient) -> None:
    make_route(acme_api, "sys", [RULES], injection={"mode": "system_prompt"})
    request = {
        "model": "claude-sonnet",
        "max_tokens": 256,
        "system": "You are helpful.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
    }
    report = resolved(acme_api, "sys", request)
    assert report["format"] == "anthropic"
    rewritten = report["request"]
    assert rewritten["system"].startswith("You are helpful.")
    assert '<context source="rules">\nBe kind.\n</context>' in rewritten["system"]
    assert rewritten["messages"] == request["messages"]
    assert all(m["role"] != "system" for m in rewritten["messages"])
    assert report["budget"]["reserved_output"] == 256


def test_system_prompt_anthropic_by_explicit_format(acme_api: ApiClient) -> None:
    make_route(acme_api, "sys", [RULES], injection={"mode": "system_prompt"})
    request = {"max_tokens": 256, "messages": [{"role": "user", "content": QUESTION}]}

    # The same body without "format" reads as OpenAI (a system message is added) ...
    as_openai = resolved(acme_api, "sys", request)
    assert as_openai["format"] == "openai"
    assert as_openai["request"]["messages"][0]["role"] == "system"
    assert "system" not in as_openai["request"]

    # ... and with "format": "anthropic" the context goes into the system field.
    report = resolved(acme_api, "sys", request, format="anthropic")
    assert report["format"] == "anthropic"
    assert report["request"]["system"].startswith("# Context")
    assert "Be kind." in report["request"]["system"]
    assert report["request"]["messages"] == request["messages"]


def test_resolve_checks_the_fields_types_but_not_what_only_a_call_needs(
    acme_api: ApiClient,
) -> None:
    """The resolve rewrites a body its caller sends on: an Anthropic body without ``max_tokens``
    is resolved (the caller adds it), a field of the wrong type is a 400 naming it, as on the
    gateway."""
    make_route(acme_api, "typed", [RULES], injection={"mode": "system_prompt"})
    messages = [{"role": "user", "content": QUESTION}]
    report = resolved(acme_api, "typed", {"messages": messages}, format="anthropic")
    assert report["format"] == "anthropic"
    for request, param in (
        ({"messages": messages, "stream": "true"}, "request.stream"),
        ({"messages": messages, "temperature": "hot"}, "request.temperature"),
        ({"messages": messages, "max_tokens": 64, "top_k": 1.5, "system": "s"}, "request.top_k"),
    ):
        response = resolve(acme_api, "typed", request)
        assert response.status_code == 400, response.content
        assert response.json()["error"]["param"] == param


def assert_valid_openai_tool_conversation(messages: list[dict[str, Any]]) -> None:
    """Every tool message answers a tool call of the assistant message just before the run."""
    index = 0
    while index < len(messages):
        message = messages[index]
        assert message["role"] != "tool", f"tool message without a tool call at {index}"
        if message["role"] == "assistant" and message.get("tool_calls"):
            expected = {call["id"] for call in message["tool_calls"]}
            for call in message["tool_calls"]:
                assert call["type"] == "function"
                json.loads(call["function"]["arguments"])
            answered: set[str] = set()
            index += 1
            while index < len(messages) and messages[index]["role"] == "tool":
                answered.add(messages[index]["tool_call_id"])
                index += 1
            assert answered == expected
            continue
        index += 1


def assert_valid_anthropic_tool_conversation(body: dict[str, Any]) -> None:
    """Each tool_use is answered by a tool_result in the very next (user) message; tools declared."""
    messages = body["messages"]
    declared = {tool["name"] for tool in body.get("tools", [])}
    assert messages[0]["role"] == "user"
    for index, message in enumerate(messages):
        assert message["role"] in {"user", "assistant"}
        blocks = message["content"] if isinstance(message["content"], list) else []
        uses = [b for b in blocks if b.get("type") == "tool_use"]
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if results:
            previous = messages[index - 1]
            previous_ids = {b["id"] for b in previous["content"] if b.get("type") == "tool_use"}
            assert {b["tool_use_id"] for b in results} <= previous_ids
        if uses:
            assert message["role"] == "assistant"
            assert {u["name"] for u in uses} <= declared
            following = messages[index + 1]
            assert following["role"] == "user"
            answered = {
                b["tool_use_id"] for b in following["content"] if b.get("type") == "tool_result"
            }
            assert answered == {u["id"] for u in uses}


def test_tool_role_openai(acme_api: ApiClient) -> None:
    make_route(acme_api, "tools", [RULES, PROFILE])
    acme_api.put("/api/v1/users/u_1/profile", {"attributes": {"plan": "gold"}})
    request = {
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": QUESTION},
        ],
        "tools": [{"type": "function", "function": {"name": "lookup_order", "parameters": {}}}],
    }
    report = resolved(acme_api, "tools", request, user="u_1")
    rewritten = report["request"]
    messages = rewritten["messages"]
    assert messages[:2] == request["messages"]
    injected = messages[2:]
    assert [m["role"] for m in injected] == ["assistant", "tool", "assistant", "tool"]
    names = [m["tool_calls"][0]["function"]["name"] for m in injected if m["role"] == "assistant"]
    assert names == ["vsr_rules_context", "vsr_profile_context"]
    assert injected[1]["content"] == "Be kind."
    assert '"plan": "gold"' in injected[3]["content"]
    assert_valid_openai_tool_conversation(messages)
    # OpenAI needs no declaration of the injected tools; the caller's own tools are unchanged.
    assert rewritten["tools"] == request["tools"]


def test_tool_role_openai_inserts_after_the_last_user_message(acme_api: ApiClient) -> None:
    make_route(acme_api, "tools", [RULES])
    request = {
        "messages": [
            {"role": "user", "content": QUESTION},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "in transit"},
        ]
    }
    messages = resolved(acme_api, "tools", request)["request"]["messages"]
    assert messages[0] == request["messages"][0]
    assert messages[1]["tool_calls"][0]["function"]["name"] == "vsr_rules_context"
    assert messages[2]["role"] == "tool"
    assert messages[3:] == request["messages"][1:]
    assert_valid_openai_tool_conversation(messages)


def test_tool_role_anthropic(acme_api: ApiClient) -> None:
    make_route(acme_api, "tools", [RULES, PROFILE])
    acme_api.put("/api/v1/users/u_1/profile", {"attributes": {"plan": "gold"}})
    request = {
        "model": "claude-sonnet",
        "max_tokens": 300,
        "system": "You are helpful.",
        "tools": [{"name": "lookup_order", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": QUESTION}],
    }
    report = resolved(acme_api, "tools", request, user="u_1")
    assert report["format"] == "anthropic"
    rewritten = report["request"]
    assert rewritten["system"] == "You are helpful."
    messages = rewritten["messages"]
    assert messages[0] == request["messages"][0]
    assert [m["role"] for m in messages[1:]] == ["assistant", "user", "assistant", "user"]
    uses = [m["content"][0] for m in messages[1:] if m["role"] == "assistant"]
    assert [u["name"] for u in uses] == ["vsr_rules_context", "vsr_profile_context"]
    assert all(u["type"] == "tool_use" and u["id"].startswith("toolu_") for u in uses)
    assert messages[2]["content"][0]["content"] == "Be kind."
    declared = [t["name"] for t in rewritten["tools"]]
    assert declared == ["lookup_order", "vsr_rules_context", "vsr_profile_context"]
    assert_valid_anthropic_tool_conversation(rewritten)


def test_tool_role_anthropic_by_explicit_format(acme_api: ApiClient) -> None:
    make_route(acme_api, "tools", [RULES])
    request = {"max_tokens": 300, "messages": [{"role": "user", "content": QUESTION}]}
    report = resolved(acme_api, "tools", request, format="anthropic")
    rewritten = report["request"]
    assert rewritten["messages"][1]["content"][0]["type"] == "tool_use"
    assert rewritten["messages"][2]["content"][0]["type"] == "tool_result"
    assert [t["name"] for t in rewritten["tools"]] == ["vsr_rules_context"]
    assert_valid_anthropic_tool_conversation(rewritten)


def test_plain_messages_body_goes_by_the_routes_anthropic_deployment(acme_api: ApiClient) -> None:
    # A plain Messages body (model, max_tokens, string contents) is valid in both shapes: it was
    # taken for OpenAI and got ``tool`` messages, which Anthropic's API refuses.
    deployment = {
        "name": "claude",
        "protocol": "anthropic",
        "base_url": "https://api.anthropic.com",
        "model": "claude-sonnet-4-5",
    }
    created = acme_api.post("/api/v1/deployments", deployment)
    assert created.status_code == 201, created.content
    body = {"name": "tools", "model": {"upstream": "claude"}, "context": {"sources": [RULES]}}
    assert acme_api.post("/api/v1/routes", body).status_code == 201
    request = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 300,
        "messages": [{"role": "user", "content": QUESTION}],
    }
    report = resolved(acme_api, "tools", request)
    assert report["format"] == "anthropic"
    assert report["format_reason"] == (
        "the body is valid in both shapes; the route's deployment speaks anthropic"
    )
    rewritten = report["request"]
    assert all(m["role"] in ("user", "assistant") for m in rewritten["messages"])
    assert rewritten["messages"][1]["content"][0]["type"] == "tool_use"
    assert_valid_anthropic_tool_conversation(rewritten)
    # The caller's explicit format still wins over the deployment's.
    named = resolved(acme_api, "tools", request, format="openai")
    assert (named["format"], named["format_reason"]) == (
        "openai",
        "the request names format 'openai'",
    )


def test_original_request_is_not_modified_when_nothing_is_kept(acme_api: ApiClient) -> None:
    make_route(acme_api, "none", [{"type": "test_sleep", "name": "nothing"}])
    request = chat()
    report = resolved(acme_api, "none", request)
    assert report["request"] == request


# --- user profiles and sessions -------------------------------------------------------------


def test_user_profile_is_injected(acme_api: ApiClient) -> None:
    put = acme_api.put(
        "/api/v1/users/u_7/profile", {"attributes": {"plan": "gold", "language": "fr"}}
    )
    assert put.status_code == 200
    assert put.json()["attributes"] == {"plan": "gold", "language": "fr"}
    assert acme_api.get("/api/v1/users/u_7/profile").json()["attributes"] == {
        "plan": "gold",
        "language": "fr",
    }
    make_route(
        acme_api,
        "profiled",
        [
            {"type": "user_profile"},
            {"type": "user_profile", "name": "plan_only", "fields": ["plan"]},
        ],
        injection={"mode": "system_prompt"},
    )
    report = resolved(acme_api, "profiled", user="u_7")
    assert source(report, "user_profile")["status"] == "ok"
    assert items_of(report, "user_profile")[0]["priority"] == 80
    system = report["request"]["messages"][0]["content"]
    full = system.split('<context source="user_profile">\n')[1].split("\n</context>")[0]
    assert json.loads(full) == {"user_id": "u_7", "plan": "gold", "language": "fr"}
    only = system.split('<context source="plan_only">\n')[1].split("\n</context>")[0]
    assert json.loads(only) == {"user_id": "u_7", "plan": "gold"}

    # PUT replaces the attributes; the next resolve sees the new ones.
    acme_api.put("/api/v1/users/u_7/profile", {"attributes": {"plan": "silver"}})
    system = resolved(acme_api, "profiled", user="u_7")["request"]["messages"][0]["content"]
    assert "silver" in system and "gold" not in system and "language" not in system

    # Another user, or no user, gets nothing.
    assert source(resolved(acme_api, "profiled", user="u_8"), "user_profile")["status"] == "empty"
    assert source(resolved(acme_api, "profiled"), "user_profile")["status"] == "empty"


def test_profile_body_validation(acme_api: ApiClient) -> None:
    response = acme_api.put("/api/v1/users/u_7/profile", {"attributes": ["not", "an", "object"]})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "attributes"
    assert acme_api.get("/api/v1/users/u_7/profile").status_code == 404


CONVERSATION = [
    ("user", "First question. With a tail that the digest drops."),
    ("assistant", "First answer. Also trimmed."),
    ("user", "Second question. Tail."),
    ("assistant", "Second answer. Tail."),
    ("user", "Third question here."),
    ("assistant", "Third answer here."),
]


def test_recent_messages_with_digest_of_older_turns(acme_api: ApiClient) -> None:
    posted = acme_api.post(
        "/api/v1/sessions/s_1/messages",
        {"user": "u_1", "messages": [{"role": r, "content": c} for r, c in CONVERSATION]},
    )
    assert posted.status_code == 201
    assert [m["seq"] for m in posted.json()["data"]] == [1, 2, 3, 4, 5, 6]
    listed = acme_api.get("/api/v1/sessions/s_1/messages", {"user": "u_1"}).json()["data"]
    assert [(m["role"], m["content"]) for m in listed] == CONVERSATION

    make_route(
        acme_api,
        "recent",
        [{"type": "recent_messages", "last_n_turns": 2}],
        injection={"mode": "system_prompt"},
    )
    report = resolved(acme_api, "recent", chat("Fourth question?"), user="u_1", session="s_1")
    recent = items_of(report, "recent_messages")
    assert len(recent) == 2
    assert [i["priority"] for i in recent] == [60, 59]
    assert all(i["kept"] for i in recent)

    system = report["request"]["messages"][0]["content"]
    blocks = [
        b.split("\n</context>")[0] for b in system.split('<context source="recent_messages">\n')[1:]
    ]
    assert len(blocks) == 2
    verbatim, digest = blocks
    assert verbatim == "user: Third question here.\nassistant: Third answer here."
    assert digest.startswith("Earlier in this session (4 older messages, compacted):")
    assert "- user: First question." in digest
    assert "- assistant: Second answer." in digest
    assert "tail" not in digest.lower()
    assert "Third" not in digest

    # The digest is deterministic.
    again = resolved(acme_api, "recent", chat("Fourth question?"), user="u_1", session="s_1")
    assert again["request"]["messages"][0]["content"] == system


def test_recent_messages_without_digest_when_few_turns(acme_api: ApiClient) -> None:
    acme_api.post(
        "/api/v1/sessions/s_2/messages",
        {
            "user": "u_1",
            "messages": [
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": "Hi"},
            ],
        },
    )
    make_route(acme_api, "recent", [{"type": "recent_messages", "last_n_turns": 6}])
    report = resolved(acme_api, "recent", chat("Next?"), user="u_1", session="s_2")
    recent = items_of(report, "recent_messages")
    assert len(recent) == 1
    # Sessions are per user: another user's session of the same key is empty.
    other = resolved(acme_api, "recent", chat("Next?"), user="u_2", session="s_2")
    assert source(other, "recent_messages")["status"] == "empty"


def test_session_message_validation(acme_api: ApiClient) -> None:
    bad = {
        "user": "u_1",
        "messages": [{"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}],
    }
    response = acme_api.post("/api/v1/sessions/s_1/messages", bad)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages[1].role"
    empty = acme_api.post("/api/v1/sessions/s_1/messages", {"user": "u_1", "messages": []})
    assert empty.status_code == 400
    assert acme_api.get("/api/v1/sessions/s_1/messages", {"user": "u_1"}).json()["data"] == []


# --- the hand-back --------------------------------------------------------------------------


def test_response_hand_back_appends_to_session_once(acme_api: ApiClient) -> None:
    make_route(acme_api, "support", [RULES, {"type": "recent_messages"}])
    report = resolved(
        acme_api, "support", chat("What is the refund window?"), user="u_1", session="s_9"
    )
    after_resolve = acme_api.get("/api/v1/sessions/s_9/messages", {"user": "u_1"}).json()["data"]
    assert [(m["role"], m["content"]) for m in after_resolve] == [
        ("user", "What is the refund window?")
    ]

    answer = {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Thirty days."}}],
    }
    first = acme_api.post(f"/api/v1/resolve/{report['id']}/response", {"response": answer})
    assert first.status_code == 202, first.content
    assert first.json()["duplicate"] is False
    assert first.json()["messages_written"] == 1
    messages = acme_api.get("/api/v1/sessions/s_9/messages", {"user": "u_1"}).json()["data"]
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "What is the refund window?"),
        ("assistant", "Thirty days."),
    ]

    second = acme_api.post(f"/api/v1/resolve/{report['id']}/response", {"response": answer})
    assert second.status_code == 202
    assert second.json()["duplicate"] is True
    assert second.json()["messages_written"] == 0
    assert len(acme_api.get("/api/v1/sessions/s_9/messages", {"user": "u_1"}).json()["data"]) == 2

    # The next turn sees the answered exchange through recent_messages.
    follow = resolved(acme_api, "support", chat("And for sale items?"), user="u_1", session="s_9")
    assert "assistant: Thirty days." in json.dumps(follow["request"])
    detail = acme_api.get(f"/api/v1/replay/{report['id']}").json()
    assert detail["response_received_at"] is not None


def test_response_hand_back_anthropic_shape(acme_api: ApiClient) -> None:
    make_route(acme_api, "support", [RULES])
    request = {
        "max_tokens": 100,
        "system": "s",
        "messages": [{"role": "user", "content": "Hi there"}],
    }
    report = resolved(acme_api, "support", request, user="u_1", session="s_a")
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": "Hello!"}],
    }
    assert (
        acme_api.post(f"/api/v1/resolve/{report['id']}/response", {"response": answer}).status_code
        == 202
    )
    messages = acme_api.get("/api/v1/sessions/s_a/messages", {"user": "u_1"}).json()["data"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["content"] == [{"type": "text", "text": "Hello!"}]


def test_response_hand_back_errors(acme_api: ApiClient) -> None:
    unknown = acme_api.post(
        "/api/v1/resolve/rsv_doesnotexist/response", {"response": {"content": "x"}}
    )
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"

    make_route(acme_api, "support", [RULES])
    report = resolved(acme_api, "support", user="u_1", session="s_e")
    missing = acme_api.post(f"/api/v1/resolve/{report['id']}/response", {})
    assert missing.status_code == 400
    assert missing.json()["error"]["param"] == "response"
    garbage = acme_api.post(f"/api/v1/resolve/{report['id']}/response", {"response": {"foo": 1}})
    assert garbage.status_code == 400
    assert garbage.json()["error"]["code"] == "invalid_request"
    # Neither bad call consumed the hand-back.
    ok = acme_api.post(
        f"/api/v1/resolve/{report['id']}/response",
        {"response": {"choices": [{"message": {"role": "assistant", "content": "fine"}}]}},
    )
    assert ok.status_code == 202
    assert ok.json()["duplicate"] is False


def test_response_without_session_writes_nothing(acme_api: ApiClient) -> None:
    make_route(acme_api, "support", [RULES])
    report = resolved(acme_api, "support", user="u_1")
    answer = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
    response = acme_api.post(f"/api/v1/resolve/{report['id']}/response", {"response": answer})
    assert response.status_code == 202
    assert response.json()["messages_written"] == 0


# --- replay ---------------------------------------------------------------------------------


def make_replay_history(api: ApiClient) -> dict[str, str]:
    """Four records: alpha/u1 ok, alpha/u2 ok, beta/u1 partial, gamma/u2 refused."""
    make_route(api, "alpha", [RULES])
    make_route(api, "beta", [RULES, {"type": "test_sleep", "name": "bad", "fail": True}])
    make_route(
        api, "gamma", [{"type": "test_sleep", "name": "gate", "fail": True, "on_failure": "block"}]
    )
    ids = {
        "alpha_u1": resolved(api, "alpha", user="u1")["id"],
        "alpha_u2": resolved(api, "alpha", user="u2")["id"],
        "beta_u1": resolved(api, "beta", user="u1")["id"],
    }
    assert resolve(api, "gamma", user="u2").status_code == 503
    refused = api.get("/api/v1/replay", {"route": "gamma"}).json()["data"]
    ids["gamma_u2"] = refused[0]["id"]
    return ids


def replay_ids(api: ApiClient, **params: Any) -> set[str]:
    response = api.get("/api/v1/replay", params)
    assert response.status_code == 200, response.content
    return {record["id"] for record in response.json()["data"]}


def test_replay_filters(acme_api: ApiClient) -> None:
    ids = make_replay_history(acme_api)
    assert replay_ids(acme_api) == set(ids.values())
    assert replay_ids(acme_api, route="alpha") == {ids["alpha_u1"], ids["alpha_u2"]}
    assert replay_ids(acme_api, user="u1") == {ids["alpha_u1"], ids["beta_u1"]}
    assert replay_ids(acme_api, status="ok") == {ids["alpha_u1"], ids["alpha_u2"]}
    assert replay_ids(acme_api, status="partial") == {ids["beta_u1"]}
    assert replay_ids(acme_api, status="refused") == {ids["gamma_u2"]}
    assert replay_ids(acme_api, route="alpha", user="u2") == {ids["alpha_u2"]}
    assert replay_ids(acme_api, route="nope") == set()

    records = acme_api.get("/api/v1/replay").json()["data"]
    created = {r["id"]: datetime.fromisoformat(r["created_at"]) for r in records}
    # Newest first.
    assert [created[r["id"]] for r in records] == sorted(created.values(), reverse=True)
    pivot = created[ids["alpha_u2"]]
    stamp = pivot.isoformat()
    assert replay_ids(acme_api, since=stamp) == {i for i, t in created.items() if t >= pivot}
    assert replay_ids(acme_api, until=stamp) == {i for i, t in created.items() if t < pivot}
    assert ids["alpha_u2"] in replay_ids(acme_api, since=stamp)
    assert ids["alpha_u1"] in replay_ids(acme_api, until=stamp)
    zulu = pivot.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert replay_ids(acme_api, since=zulu) == replay_ids(acme_api, since=stamp)
    assert replay_ids(acme_api, since="2000-01-01T00:00:00Z", until="2000-01-02T00:00:00Z") == set()


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"status": "weird"}, "status"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-01-01T00:00:00"}, "until"),
        ({"limit": "zero"}, "limit"),
        ({"limit": "0"}, "limit"),
        ({"cursor": "!!not-a-cursor!!"}, "cursor"),
    ],
)
def test_replay_bad_query(acme_api: ApiClient, params: dict[str, str], param: str) -> None:
    response = acme_api.get("/api/v1/replay", params)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "invalid_request",
        "message": response.json()["error"]["message"],
        "param": param,
    }


def test_replay_cursor_pagination_walks_every_record_once(acme_api: ApiClient) -> None:
    make_route(acme_api, "alpha", [RULES])
    make_route(acme_api, "beta", [RULES])
    for index in range(5):
        resolved(acme_api, "alpha", user=f"u{index}")
    resolved(acme_api, "beta")
    everything = [r["id"] for r in acme_api.get("/api/v1/replay").json()["data"]]
    assert len(everything) == 6

    def walk(**filters: Any) -> tuple[list[str], list[int]]:
        seen: list[str] = []
        sizes: list[int] = []
        cursor: str | None = None
        for _ in range(10):
            params = {"limit": 2, **filters, **({"cursor": cursor} if cursor else {})}
            page = acme_api.get("/api/v1/replay", params).json()
            seen += [r["id"] for r in page["data"]]
            sizes.append(len(page["data"]))
            cursor = page["next_cursor"]
            if cursor is None:
                break
        return seen, sizes

    seen, sizes = walk()
    assert sizes == [2, 2, 2]
    assert seen == everything
    assert len(set(seen)) == len(seen)

    alpha, alpha_sizes = walk(route="alpha")
    assert alpha_sizes == [2, 2, 1]
    assert alpha == [i for i in everything if i in replay_ids(acme_api, route="alpha")]
    assert len(set(alpha)) == 5


def test_replay_detail(acme_api: ApiClient) -> None:
    make_route(
        acme_api,
        "detailed",
        [RULES, {"type": "test_sleep", "name": "big", "priority": 10, "items": ["y" * 800]}],
        budget={"context_tokens": 50},
    )
    report = resolved(acme_api, "detailed", user="u_1", session="s_1")
    response = acme_api.get(f"/api/v1/replay/{report['id']}")
    assert response.status_code == 200
    detail = response.json()
    assert detail["id"] == report["id"]
    assert detail["route"] == "detailed"
    assert detail["user"] == "u_1"
    assert detail["session"] == "s_1"
    assert detail["status"] == "ok"
    assert detail["format"] == "openai"
    assert detail["budget"] == report["budget"]
    assert detail["budget"]["context"] == 50
    assert [(i["source"], i["kept"], i["reason"]) for i in detail["items"]] == [
        ("rules", True, "kept"),
        ("big", False, "over_budget"),
    ]
    assert all(isinstance(i["tokens"], int) and i["tokens"] > 0 for i in detail["items"])
    assert [(s["name"], s["status"], s["items"], s["kept"]) for s in detail["sources"]] == [
        ("rules", "ok", 1, 1),
        ("big", "ok", 1, 0),
    ]
    assert detail["tokens"] == report["tokens"]

    missing = acme_api.get("/api/v1/replay/rsv_nope")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


SECRET_QUESTION = "my card number is 4111-1111-1111-1111"


def test_raw_content_not_stored_unless_capture_is_on(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    make_route(
        acme_api, "private", [{"type": "skill_guardrails", "name": "rules", "texts": ["RULE-TEXT"]}]
    )
    answer = {"choices": [{"message": {"role": "assistant", "content": "ANSWER-TEXT"}}]}

    report = resolved(acme_api, "private", chat(SECRET_QUESTION), user="u_1")
    acme_api.post(f"/api/v1/resolve/{report['id']}/response", {"response": answer})
    detail = acme_api.get(f"/api/v1/replay/{report['id']}").json()
    assert detail["request"] is None
    assert detail["rewritten_request"] is None
    assert detail["response"] is None
    assert detail["response_received_at"] is not None
    dumped = json.dumps(detail)
    for text in (SECRET_QUESTION, "RULE-TEXT", "ANSWER-TEXT"):
        assert text not in dumped
    summary = acme_api.get("/api/v1/replay").json()
    assert SECRET_QUESTION not in json.dumps(summary)

    connection.set_schema_to_public()
    tenant = acme.tenant
    tenant.capture_content = True
    tenant.save()
    try:
        captured = resolved(acme_api, "private", chat(SECRET_QUESTION), user="u_1")
        acme_api.post(f"/api/v1/resolve/{captured['id']}/response", {"response": answer})
        detail = acme_api.get(f"/api/v1/replay/{captured['id']}").json()
        assert detail["request"] == chat(SECRET_QUESTION)
        assert detail["rewritten_request"] == captured["request"]
        assert "RULE-TEXT" in json.dumps(detail["rewritten_request"])
        assert detail["response"] == answer
    finally:
        connection.set_schema_to_public()
        tenant.capture_content = False
        tenant.save()

    # Off again: the next record holds no content.
    later = resolved(acme_api, "private", chat(SECRET_QUESTION), user="u_1")
    assert acme_api.get(f"/api/v1/replay/{later['id']}").json()["request"] is None


# --- OpenAPI --------------------------------------------------------------------------------


def test_openapi_schema_describes_resolve(anonymous_api: ApiClient) -> None:
    response = anonymous_api.get("/api/schema/")
    assert response.status_code == 200
    document = yaml.safe_load(response.content)
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    assert "/api/v1/resolve" in paths
    assert "post" in paths["/api/v1/resolve"]
    assert "/api/v1/resolve/{resolve_id}/response" in paths
    assert "/api/v1/routes/{name}" in paths
    assert "/api/v1/replay" in paths

    as_json = anonymous_api.get("/api/schema/", {"format": "json"})
    assert as_json.status_code == 200
    assert "/api/v1/resolve" in as_json.json()["paths"]


# --- the provider's prompt cache ---------------------------------------------------------------


def cached_route(api: ApiClient, name: str, sources: list[dict[str, Any]], **context: Any) -> None:
    body = {
        "name": name,
        "model": {"prompt_cache": True},
        "context": {"sources": sources, **context},
    }
    response = api.post("/api/v1/routes", body)
    assert response.status_code == 201, response.content
    assert response.json()["model"]["prompt_cache"] is True


def anthropic_turn(history: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": "claude-sonnet",
        "max_tokens": 300,
        "system": "You are helpful.",
        "tools": [{"name": "lookup_order", "input_schema": {"type": "object"}}],
        "messages": history,
    }


def test_prompt_cache_marks_the_stable_prefix_and_injects_after_it(acme_api: ApiClient) -> None:
    cached_route(acme_api, "cached", [RULES, PROFILE])
    history = [{"role": "user", "content": QUESTION}]
    rewritten = resolved(acme_api, "cached", anthropic_turn(history), user="u_1")["request"]
    # The caller's last tool, its system prompt and its last user message carry the marks ...
    assert rewritten["tools"][0]["cache_control"] == {"type": "ephemeral"}
    assert rewritten["system"] == [
        {"type": "text", "text": "You are helpful.", "cache_control": {"type": "ephemeral"}}
    ]
    assert rewritten["messages"][0]["content"] == [
        {"type": "text", "text": QUESTION, "cache_control": {"type": "ephemeral"}}
    ]
    # ... and the context comes after them: its tools after the caller's (declared even for a
    # source that brought nothing this turn: the profile of a user without one), its exchange
    # after the last user message.
    assert [t["name"] for t in rewritten["tools"]] == [
        "lookup_order",
        "vsr_rules_context",
        "vsr_profile_context",
    ]
    assert all("cache_control" not in t for t in rewritten["tools"][1:])
    assert rewritten["messages"][1]["content"][0]["name"] == "vsr_rules_context"
    assert_valid_anthropic_tool_conversation(rewritten)


def test_prompt_cache_keeps_the_callers_own_marks_and_the_providers_limit(
    acme_api: ApiClient,
) -> None:
    cached_route(acme_api, "cached-own", [RULES])
    mark = {"type": "ephemeral"}
    request = anthropic_turn(
        [
            {"role": "user", "content": [{"type": "text", "text": "a", "cache_control": mark}]},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "b", "cache_control": mark}],
            },
            {"role": "user", "content": [{"type": "text", "text": "c", "cache_control": mark}]},
        ]
    )
    request["system"] = [{"type": "text", "text": "You are helpful.", "cache_control": mark}]
    rewritten = resolved(acme_api, "cached-own", request)["request"]
    # Four marks were set by the caller: the provider allows no more, so none is added.
    assert "cache_control" not in rewritten["tools"][0]
    dumped = json.dumps(rewritten)
    assert dumped.count('"cache_control"') == 4


def test_without_prompt_cache_nothing_is_marked(acme_api: ApiClient) -> None:
    make_route(acme_api, "uncached", [RULES])
    rewritten = resolved(acme_api, "uncached", anthropic_turn([{"role": "user", "content": "x"}]))
    assert "cache_control" not in json.dumps(rewritten["request"])
