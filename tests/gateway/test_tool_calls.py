"""The shapes of served tool calls, per provider, without a server: finding reserved calls,
building the follow-up, taking reserved calls out of an answer, adding up usage."""

from __future__ import annotations

import json
from typing import Any

from contextplatform.gateway.tool_calls import (
    UNSERVED_TEXT,
    ServedCall,
    follow_up_body,
    reserved_calls,
    summed_usage,
    with_usage,
    without_reserved,
)
from tests.upstream import anthropic_message, openai_completion

RESERVED = {"vsr_context_retrieve"}
BODY = {"model": "m", "messages": [{"role": "user", "content": "q"}]}
CALLS = [
    ("call_a", "vsr_context_retrieve", json.dumps({"key": "k1"})),
    ("call_b", "get_weather", json.dumps({"city": "Oslo"})),
]


def test_openai_reserved_calls_and_follow_up() -> None:
    answer = openai_completion(BODY, "", CALLS)
    (call,) = reserved_calls("openai", answer, RESERVED)
    assert (call.id, call.name, call.arguments) == ("call_a", "vsr_context_retrieve", {"key": "k1"})
    follow = follow_up_body("openai", BODY, answer, [ServedCall(call, "the original")])
    assistant, result = follow["messages"][-2:]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_a"]  # only the served call
    assert assistant["content"] == answer["choices"][0]["message"]["content"]
    assert result == {"role": "tool", "tool_call_id": "call_a", "content": "the original"}
    assert BODY["messages"] == [{"role": "user", "content": "q"}]  # the body is not changed


def test_anthropic_reserved_calls_and_follow_up() -> None:
    answer = anthropic_message(BODY, "", CALLS)
    (call,) = reserved_calls("anthropic", answer, RESERVED)
    assert call.arguments == {"key": "k1"}
    follow = follow_up_body("anthropic", BODY, answer, [ServedCall(call, "orig")])
    assistant, user = follow["messages"][-2:]
    assert [b["type"] for b in assistant["content"]] == ["text", "tool_use"]
    assert user["content"] == [{"type": "tool_result", "tool_use_id": "call_a", "content": "orig"}]


def test_malformed_arguments_are_none() -> None:
    answer = openai_completion(BODY, "", [("c", "vsr_context_retrieve", "{not json")])
    assert reserved_calls("openai", answer, RESERVED)[0].arguments is None


def test_reserved_calls_are_taken_out_and_a_bare_answer_says_so() -> None:
    mixed = without_reserved("openai", openai_completion(BODY, "", CALLS), RESERVED)
    choice = mixed["choices"][0]
    assert [c["id"] for c in choice["message"]["tool_calls"]] == ["call_b"]
    assert choice["finish_reason"] == "tool_calls"
    only: dict[str, Any] = openai_completion(BODY, "", CALLS[:1])
    only["choices"][0]["message"]["content"] = None
    bare = without_reserved("openai", only, RESERVED)["choices"][0]
    assert "tool_calls" not in bare["message"] and bare["finish_reason"] == "stop"
    assert bare["message"]["content"] == UNSERVED_TEXT
    anthropic = without_reserved("anthropic", anthropic_message(BODY, "", CALLS[:1]), RESERVED)
    assert [b["type"] for b in anthropic["content"]] == ["text"]
    assert anthropic["stop_reason"] == "end_turn"


def test_usage_of_every_call_is_added_up() -> None:
    first = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    second = {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}
    assert summed_usage("openai", [first, None, second]) == {
        "prompt_tokens": 40,
        "completion_tokens": 7,
        "total_tokens": 47,
    }
    anthropic = summed_usage(
        "anthropic",
        [{"input_tokens": 3, "output_tokens": 1}, {"input_tokens": 4, "output_tokens": 2}],
    )
    assert anthropic == {"input_tokens": 7, "output_tokens": 3}
    assert summed_usage("openai", [None]) is None
    answer = {"usage": second}
    assert with_usage("openai", answer, [second]) is answer  # one call: untouched
    assert with_usage("openai", answer, [first, second])["usage"]["prompt_tokens"] == 40
