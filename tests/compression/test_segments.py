"""Reading requests of both providers as blocks: kinds, queries, indexes and protection."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compression.engine import Provenance
from compression.rewrite import read_at
from compression.segments import (
    Block,
    UnsupportedShape,
    looks_like_json,
    parse_segments,
)
from contextplatform.resolve.injection import SourceBlock, inject, tool_call_id

IMAGE_URL = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
ANTHROPIC_IMAGE = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
}


def by_kind(blocks: list[Block]) -> dict[str, list[Block]]:
    grouped: dict[str, list[Block]] = {}
    for block in blocks:
        grouped.setdefault(block.kind, []).append(block)
    return grouped


def openai_agent() -> dict[str, Any]:
    return {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are a support agent."},
            {"role": "developer", "content": "Answer in English."},
            {"role": "user", "content": "My order 991 has not arrived."},
            {
                "role": "assistant",
                "content": "Let me look it up.",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": '{"order": 991}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "order 991: shipped on May 2"},
            {"role": "assistant", "content": "It shipped on May 2."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Where is it now?"}, IMAGE_URL],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "track", "arguments": '{"order": 991}'},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_b",
                "content": [
                    {"type": "text", "text": "scan 1: depot"},
                    IMAGE_URL,
                    {"type": "text", "text": "scan 2: van"},
                ],
            },
        ],
    }


def anthropic_agent() -> dict[str, Any]:
    return {
        "model": "claude",
        "system": "You are a support agent.",
        "max_tokens": 256,
        "messages": [
            {"role": "user", "content": "My order 991 has not arrived."},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_a",
                        "name": "lookup_order",
                        "input": {"order": 991},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "shipped May 2"}
                ],
            },
            {"role": "assistant", "content": "It shipped on May 2."},
            {"role": "user", "content": "And where is it now?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Tracking it."},
                    {"type": "tool_use", "id": "toolu_b", "name": "track", "input": {"order": 991}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_b",
                        "is_error": False,
                        "cache_control": {"type": "ephemeral"},
                        "content": [
                            {"type": "text", "text": "scan 1: depot"},
                            ANTHROPIC_IMAGE,
                            {"type": "text", "text": "scan 2: van"},
                        ],
                    }
                ],
            },
        ],
    }


# --- OpenAI ------------------------------------------------------------------------------------


def test_openai_tool_outputs_are_blocks_about_their_calls_and_the_latest_user_text() -> None:
    segments = parse_segments(openai_agent(), "openai")
    tools = by_kind(segments.blocks)["tool_output"]
    assert [(b.message_index, b.block_index, b.text) for b in tools] == [
        (4, 0, "order 991: shipped on May 2"),
        (8, 0, "scan 1: depot"),
        (8, 2, "scan 2: van"),
    ]
    # The call says where to look, the latest user text what the user wants to find there.
    assert tools[0].query == 'lookup_order {"order": 991} Where is it now?'
    assert tools[1].query == tools[2].query == 'track {"order": 991} Where is it now?'
    assert tools[0].path == ("messages", 4, "content")
    assert tools[1].path == ("messages", 8, "content", 0, "text")
    assert [b.call_id for b in tools] == ["call_a", "call_b", "call_b"]


def test_openai_history_is_unprotected_user_and_assistant_text() -> None:
    segments = parse_segments(openai_agent(), "openai")
    history = by_kind(segments.blocks)["history"]
    # 0/1 system and developer, 6 the latest user, 7 the latest assistant: never history.
    assert [(b.message_index, b.text) for b in history] == [
        (2, "My order 991 has not arrived."),
        (3, "Let me look it up."),
        (5, "It shipped on May 2."),
    ]
    assert all(b.query == "Where is it now?" for b in history)
    assert segments.latest_user_index == 6
    assert segments.latest_assistant_index == 7
    assert {0, 1, 6, 7, 8} <= segments.protected_messages


def test_openai_latest_user_with_an_image_is_not_truncatable() -> None:
    segments = parse_segments(openai_agent(), "openai")
    assert "current_user" not in by_kind(segments.blocks)
    assert segments.last_user_text == "Where is it now?"


def test_openai_plain_latest_user_is_current_user() -> None:
    body = openai_agent()
    body["messages"][6]["content"] = "Where is it now?"
    segments = parse_segments(body, "openai")
    [current] = by_kind(segments.blocks)["current_user"]
    assert (current.message_index, current.path) == (6, ("messages", 6, "content"))


def test_openai_text_parts_of_the_latest_user_are_current_user_blocks() -> None:
    body = openai_agent()
    body["messages"][6]["content"] = [
        {"type": "text", "text": "first"},
        {"type": "input_text", "text": "second"},
    ]
    current = by_kind(parse_segments(body, "openai").blocks)["current_user"]
    assert [(b.block_index, b.text) for b in current] == [(0, "first"), (1, "second")]


def test_json_user_payloads_are_never_blocks() -> None:
    body = openai_agent()
    body["messages"][2]["content"] = '{"order": 991, "note": "not arrived"}'
    body["messages"][6]["content"] = '["where", "is", "it"]'
    segments = parse_segments(body, "openai")
    kinds = by_kind(segments.blocks)
    assert 2 not in {b.message_index for b in kinds["history"]}
    assert "current_user" not in kinds


def test_cited_parts_are_never_blocks() -> None:
    body = openai_agent()
    body["messages"][5]["content"] = [
        {"type": "text", "text": "It shipped.", "annotations": [{"type": "url_citation"}]}
    ]
    history = by_kind(parse_segments(body, "openai").blocks)["history"]
    assert 5 not in {b.message_index for b in history}


def test_protection_spreads_over_a_tool_exchange_but_tool_outputs_stay_blocks() -> None:
    segments = parse_segments(openai_agent(), "openai")
    assert 8 in segments.protected_messages  # the latest assistant's call_b pulls its result in
    assert {b.message_index for b in by_kind(segments.blocks)["tool_output"]} == {4, 8}


def test_protection_spreads_from_a_result_to_its_call() -> None:
    body = anthropic_agent()
    body["messages"].append({"role": "assistant", "content": "It is in the van."})
    segments = parse_segments(body, "anthropic")
    # 6 (the latest user message, a tool_result carrier) protects 5, the assistant that called.
    assert segments.latest_assistant_index == 7
    assert {5, 6, 7} <= segments.protected_messages
    history = by_kind(segments.blocks)["history"]
    assert 5 not in {b.message_index for b in history}


def test_legacy_function_role_takes_its_function_call_into_the_query() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "weather", "arguments": '{"city": "Paris"}'},
            },
            {"role": "function", "name": "weather", "content": "sunny, 21C"},
        ]
    }
    tools = by_kind(parse_segments(body, "openai").blocks)["tool_output"]
    assert [(b.text, b.query) for b in tools] == [
        ("sunny, 21C", 'weather {"city": "Paris"} weather in Paris?')
    ]


def test_a_result_without_a_call_is_about_the_latest_user_text() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "summarise the log"},
            {"role": "tool", "tool_call_id": "orphan", "content": "log lines"},
        ]
    }
    [block] = by_kind(parse_segments(body, "openai").blocks)["tool_output"]
    assert block.query == "summarise the log"


def test_unsupported_shape() -> None:
    with pytest.raises(UnsupportedShape):
        parse_segments({"prompt": "hi"}, "openai")


# --- Anthropic ---------------------------------------------------------------------------------


def test_anthropic_tool_results_and_nested_text_items() -> None:
    segments = parse_segments(anthropic_agent(), "anthropic")
    tools = by_kind(segments.blocks)["tool_output"]
    assert [(b.message_index, b.block_index, b.text) for b in tools] == [
        (2, 0, "shipped May 2"),
        (6, 0, "scan 1: depot"),
        (6, 2, "scan 2: van"),
    ]
    assert tools[0].path == ("messages", 2, "content", 0, "content")
    assert tools[2].path == ("messages", 6, "content", 0, "content", 2, "text")
    assert tools[0].query == 'lookup_order {"order":991} And where is it now?'
    assert tools[1].query == 'track {"order":991} And where is it now?'


def test_anthropic_nested_block_index_is_outer_times_1000_plus_inner() -> None:
    body = anthropic_agent()
    result = body["messages"][6]["content"][0]
    body["messages"][6]["content"] = [{"type": "text", "text": "here:"}, result]
    tools = by_kind(parse_segments(body, "anthropic").blocks)["tool_output"]
    assert [b.block_index for b in tools if b.message_index == 6] == [1000, 1002]


def test_anthropic_latest_user_is_the_latest_typed_turn() -> None:
    segments = parse_segments(anthropic_agent(), "anthropic")
    assert segments.latest_user_index == 4
    assert segments.last_user_text == "And where is it now?"
    [current] = by_kind(segments.blocks)["current_user"]
    assert current.message_index == 4
    # The tool_result carrier (6) is the latest user message too: its exchange (5) is protected.
    assert {4, 5, 6} <= segments.protected_messages
    history = by_kind(segments.blocks)["history"]
    assert [(b.message_index, b.text) for b in history] == [
        (0, "My order 991 has not arrived."),
        (1, "Checking."),
        (3, "It shipped on May 2."),
    ]


def test_anthropic_thinking_messages_are_kept_whole() -> None:
    body = anthropic_agent()
    body["messages"][3] = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "It shipped on May 2."},
        ],
    }
    history = by_kind(parse_segments(body, "anthropic").blocks)["history"]
    assert 3 not in {b.message_index for b in history}


def test_paths_point_at_the_block_text() -> None:
    for body, chat_format in ((openai_agent(), "openai"), (anthropic_agent(), "anthropic")):
        for block in parse_segments(body, chat_format).blocks:
            assert read_at(body, block.path) == block.text


# --- injected context --------------------------------------------------------------------------


@pytest.mark.parametrize("chat_format", ["openai", "anthropic"])
def test_injected_rag_and_memory_are_found_by_name(chat_format: str) -> None:
    base = openai_agent() if chat_format == "openai" else anthropic_agent()
    base["messages"] = base["messages"][:7] if chat_format == "openai" else base["messages"][:5]
    if chat_format == "openai":
        base["messages"][6]["content"] = "Where is it now?"
    blocks = [
        SourceBlock("docs", "rag", ("refund policy text", "shipping policy text")),
        SourceBlock("mem", "memory", ("user prefers email",)),
        SourceBlock("rules", "skill_guardrails", ("never promise dates",)),
    ]
    body = inject(base, chat_format, blocks, "tool_role", "rsv_1")  # type: ignore[arg-type]
    segments = parse_segments(body, chat_format)
    kinds = by_kind(segments.blocks)
    assert [b.text for b in kinds["rag"]] == ["refund policy text\n\nshipping policy text"]
    assert [b.text for b in kinds["memory"]] == ["user prefers email"]
    texts = {b.text for b in segments.blocks}
    assert "never promise dates" not in texts  # other injected context is never compressed
    last_user = segments.latest_user_index
    assert (
        kinds["rag"][0].query
        == segments.last_user_text
        == ("Where is it now?" if chat_format == "openai" else "And where is it now?")
    )
    # The platform's own exchange is not "the latest assistant turn".
    assert segments.latest_assistant_index is not None
    assert segments.latest_assistant_index < last_user  # type: ignore[operator]
    assert kinds["rag"][0].call_id == tool_call_id(chat_format, "rsv_1", 0)  # type: ignore[arg-type]


def test_injected_ids_from_provenance() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "refunds?"},
            {"role": "tool", "tool_call_id": "rag_1", "content": "policy"},
            {"role": "tool", "tool_call_id": "m_1", "content": "likes email"},
        ]
    }
    provenance = Provenance(rag_call_ids=frozenset({"rag_1"}), memory_call_ids=frozenset({"m_1"}))
    kinds = by_kind(parse_segments(body, "openai", provenance).blocks)
    assert [b.text for b in kinds["rag"]] == ["policy"]
    assert [b.text for b in kinds["memory"]] == ["likes email"]
    assert "tool_output" not in kinds


def test_system_prompt_injection_is_never_a_block() -> None:
    base = openai_agent()
    body = inject(base, "openai", [SourceBlock("docs", "rag", ("policy",))], "system_prompt", "r")
    assert all("policy" not in b.text for b in parse_segments(body, "openai").blocks)
    anthropic = inject(
        anthropic_agent(),
        "anthropic",
        [SourceBlock("docs", "rag", ("policy",))],
        "system_prompt",
        "r",
    )
    assert all("policy" not in b.text for b in parse_segments(anthropic, "anthropic").blocks)


def test_looks_like_json() -> None:
    assert looks_like_json(' {"a": 1}')
    assert looks_like_json("[1, 2")  # malformed but JSON-like: never treated as prose
    assert looks_like_json(json.dumps("a quoted log"))
    assert not looks_like_json('"unterminated')
    assert not looks_like_json("plain text")
