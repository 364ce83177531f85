"""Tool exchanges kept in the session through the REST hand-back: the assistant's tool calls from
``POST /resolve/{id}/response``, the tool results the next resolve carries, listed by
``GET /sessions/{s}/messages`` and shown by a later resolve's history, never cut in two."""

from __future__ import annotations

import json

from tests.conftest import ApiClient
from tests.resolve.api.test_resolve import RULES, chat, items_of, make_route, resolved

CALL = {
    "id": "call_w1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
}
QUESTION = {"role": "user", "content": "What's the weather in Oslo?"}


def test_tool_calls_and_results_are_stored_listed_and_replayed(acme_api: ApiClient) -> None:
    make_route(acme_api, "tools", [RULES, {"type": "recent_messages", "name": "history"}])
    first = resolved(acme_api, "tools", {"messages": [QUESTION]}, user="u_1", session="s_t")
    calling = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [CALL]},
                "finish_reason": "tool_calls",
            }
        ],
    }
    handed = acme_api.post(f"/api/v1/resolve/{first['id']}/response", {"response": calling})
    assert handed.status_code == 202, handed.content
    result = {"role": "tool", "tool_call_id": "call_w1", "content": "12 degrees and rain"}
    follow = {
        "messages": [QUESTION, {"role": "assistant", "content": None, "tool_calls": [CALL]}, result]
    }
    second = resolved(acme_api, "tools", follow, user="u_1", session="s_t")
    # The request carries the exchange itself: the history does not repeat it.
    assert "[tool result]" not in json.dumps(items_of(second, "history"))
    answer = {
        "id": "chatcmpl-2",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Take a coat."}}],
    }
    acme_api.post(f"/api/v1/resolve/{second['id']}/response", {"response": answer})
    stored = acme_api.get("/api/v1/sessions/s_t/messages", {"user": "u_1"}).json()["data"]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1]["tool_calls"] == [CALL] and stored[1]["content"] == ""
    assert stored[2]["tool_call_id"] == "call_w1"
    assert stored[2]["content"] == "12 degrees and rain"
    later = resolved(acme_api, "tools", chat("An umbrella too?"), user="u_1", session="s_t")
    sent = json.dumps(later["request"])
    assert '[tool call] get_weather {\\"city\\": \\"Oslo\\"}' in sent
    assert "[tool result] 12 degrees and rain" in sent
    # A listing posted back to another session keeps the exchange.
    listing = acme_api.get("/api/v1/sessions/s_t/messages", {"user": "u_1"}).json()
    copied = acme_api.post("/api/v1/sessions/s_copy/messages", listing)
    assert copied.status_code in (200, 201), copied.content
    again = acme_api.get("/api/v1/sessions/s_copy/messages", {"user": "u_1"}).json()["data"]
    assert again[1]["tool_calls"] == [CALL] and again[2]["tool_call_id"] == "call_w1"


def test_the_history_never_starts_with_a_result_whose_call_it_cut(acme_api: ApiClient) -> None:
    acme_api.post(
        "/api/v1/sessions/s_cut/messages",
        {
            "user": "u_1",
            "messages": [
                QUESTION,
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_w1", "content": "12 degrees"},
                {"role": "assistant", "content": "Take a coat."},
            ],
        },
    )
    history = {"type": "recent_messages", "name": "history", "last_n_turns": 2}
    make_route(acme_api, "cut", [RULES, history])
    report = resolved(acme_api, "cut", chat("And tomorrow?"), user="u_1", session="s_cut")
    recent = [i for i in items_of(report, "history") if i["priority"] == 60]
    assert len(recent) == 1
    sent = json.dumps(report["request"])
    # The last two turns would start with the result: it goes to the digest with its call.
    assert "assistant: Take a coat." in sent
    assert "- tool: [tool result] 12 degrees" in sent
    assert "\\ntool: [tool result]" not in sent
