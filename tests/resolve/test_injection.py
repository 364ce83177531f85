"""Injection of the kept context (system prompt or tool-role pairs) and chat request parsing."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from contextplatform.core.errors import ApiError
from contextplatform.resolve.chat import (
    ChatFormat,
    detect_format,
    parse_chat_request,
    shape_signal,
)
from contextplatform.resolve.injection import (
    INJECTED_TOOL_DESCRIPTION,
    SourceBlock,
    context_tool_name,
    inject,
    render_context_section,
)

REQUEST_ID = "rsv_test_0001"
ANTHROPIC_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

PROFILE = SourceBlock(name="user_profile", type="user_profile", contents=('{"tier": "premium"}',))
DOCS = SourceBlock(
    name="docs", type="rag", contents=("Refunds within 30 days.", "Shipping is free.")
)
MEMORY = SourceBlock(name="memories", type="memory", contents=("Prefers email.",))
GUARDRAILS = SourceBlock(name="rules", type="skill_guardrails", contents=("Never promise dates.",))


# --- validators -------------------------------------------------------------------------------


def assert_valid_openai_conversation(body: dict[str, Any]) -> None:
    """OpenAI Chat Completions: each ``tool`` message answers a call of the assistant message
    just before its run of tool messages, every call is answered before the next non-tool
    message, and call ids are unique."""
    seen_ids: set[str] = set()
    open_calls: set[str] = set()
    for index, message in enumerate(body["messages"]):
        role = message["role"]
        assert role in {"system", "developer", "user", "assistant", "tool"}, index
        if role == "tool":
            call_id = message.get("tool_call_id")
            assert call_id in open_calls, f"messages[{index}]: tool message without a matching call"
            assert isinstance(message.get("content"), str)
            open_calls.remove(call_id)
            continue
        assert not open_calls, f"messages[{index}]: calls {open_calls} were never answered"
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                assert call["type"] == "function"
                assert call["function"]["name"]
                assert isinstance(json.loads(call["function"]["arguments"]), dict)
                assert call["id"] not in seen_ids, f"duplicate tool call id {call['id']}"
                seen_ids.add(call["id"])
                open_calls.add(call["id"])
    assert not open_calls, f"calls {open_calls} were never answered"


def blocks_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return content if isinstance(content, list) else []


def assert_valid_anthropic_conversation(body: dict[str, Any]) -> None:
    """Anthropic Messages: roles alternate starting with ``user``; every ``tool_result`` answers a
    ``tool_use`` of the immediately preceding assistant message and every ``tool_use`` is answered
    in the next message; tool_use ids are unique; every used tool is declared with an
    ``input_schema``."""
    messages = body["messages"]
    assert messages and messages[0]["role"] == "user"
    declared = {tool["name"]: tool for tool in body.get("tools") or []}
    for tool in declared.values():
        assert ANTHROPIC_TOOL_NAME.match(tool["name"])
        assert tool["input_schema"]["type"] == "object"
    seen_ids: set[str] = set()
    for index, message in enumerate(messages):
        expected_role = "user" if index % 2 == 0 else "assistant"
        assert message["role"] == expected_role, f"messages[{index}]: roles must alternate"
        blocks = blocks_of(message)
        if message["role"] == "assistant":
            assert not any(b["type"] == "tool_result" for b in blocks)
            uses = [b for b in blocks if b["type"] == "tool_use"]
            for use in uses:
                assert use["id"] not in seen_ids, f"duplicate tool_use id {use['id']}"
                seen_ids.add(use["id"])
                assert use["name"] in declared, f"tool {use['name']} is not declared"
                assert isinstance(use["input"], dict)
            if uses:
                assert index + 1 < len(messages), "a tool_use must be answered"
                answered = {
                    b["tool_use_id"]
                    for b in blocks_of(messages[index + 1])
                    if b["type"] == "tool_result"
                }
                assert answered == {use["id"] for use in uses}
        else:
            assert not any(b["type"] == "tool_use" for b in blocks)
            results = [b for b in blocks if b["type"] == "tool_result"]
            if results:
                assert index > 0
                previous = {
                    b["id"] for b in blocks_of(messages[index - 1]) if b["type"] == "tool_use"
                }
                for result in results:
                    assert result["tool_use_id"] in previous, (
                        f"messages[{index}]: unmatched tool_result"
                    )
                # tool_result blocks come first in their message
                types = [b["type"] for b in blocks]
                assert types[: len(results)] == ["tool_result"] * len(results)


# --- conversations ----------------------------------------------------------------------------

OPENAI_PLAIN: dict[str, Any] = {
    "model": "gpt-x",
    "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Can I get a refund?"},
    ],
}

OPENAI_MID_TOOL_LOOP: dict[str, Any] = {
    "model": "gpt-x",
    "tools": [
        {"type": "function", "function": {"name": "lookup_order", "parameters": {"type": "object"}}}
    ],
    "messages": [
        {"role": "user", "content": "Where is order 42?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"id": 42}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"id": 43}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "shipped"},
        {"role": "tool", "tool_call_id": "call_b", "content": "pending"},
    ],
}

OPENAI_NO_SYSTEM: dict[str, Any] = {"messages": [{"role": "user", "content": "Hello"}]}

ANTHROPIC_PLAIN: dict[str, Any] = {
    "model": "claude-x",
    "max_tokens": 512,
    "system": "You are helpful.",
    "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": [{"type": "text", "text": "Can I get a refund?"}]},
    ],
}

ANTHROPIC_MID_TOOL_LOOP: dict[str, Any] = {
    "model": "claude-x",
    "max_tokens": 512,
    "tools": [
        {
            "name": "lookup_order",
            "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}},
        }
    ],
    "messages": [
        {"role": "user", "content": "Where is order 42?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_a", "name": "lookup_order", "input": {"id": 42}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "shipped"}],
        },
    ],
}

ANTHROPIC_PREFILL: dict[str, Any] = {
    "max_tokens": 100,
    "messages": [
        {"role": "user", "content": "Answer in JSON."},
        {"role": "assistant", "content": "{"},
    ],
}

OPENAI_CONVERSATIONS = [OPENAI_PLAIN, OPENAI_MID_TOOL_LOOP, OPENAI_NO_SYSTEM]
ANTHROPIC_CONVERSATIONS = [ANTHROPIC_PLAIN, ANTHROPIC_MID_TOOL_LOOP, ANTHROPIC_PREFILL]
BLOCK_SETS = [[DOCS], [PROFILE, DOCS, MEMORY, GUARDRAILS]]
OPENAI_IDS = ["plain", "mid_tool_loop", "no_system"]
ANTHROPIC_IDS = ["plain", "mid_tool_loop", "prefill"]
BLOCK_SET_IDS = ["one_source", "several_sources"]


def test_the_validators_reject_invalid_conversations() -> None:
    bare_tool = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "tool", "tool_call_id": "x", "content": "r"},
        ]
    }
    with pytest.raises(AssertionError):
        assert_valid_openai_conversation(bare_tool)
    unanswered = copy.deepcopy(OPENAI_MID_TOOL_LOOP)
    del unanswered["messages"][3]
    with pytest.raises(AssertionError):
        assert_valid_openai_conversation(unanswered)
    duplicate = copy.deepcopy(OPENAI_MID_TOOL_LOOP)
    duplicate["messages"][1]["tool_calls"][1]["id"] = "call_a"
    with pytest.raises(AssertionError):
        assert_valid_openai_conversation(duplicate)

    undeclared = copy.deepcopy(ANTHROPIC_MID_TOOL_LOOP)
    undeclared["tools"] = []
    with pytest.raises(AssertionError):
        assert_valid_anthropic_conversation(undeclared)
    same_role_twice = {
        "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    }
    with pytest.raises(AssertionError):
        assert_valid_anthropic_conversation(same_role_twice)
    orphan = copy.deepcopy(ANTHROPIC_MID_TOOL_LOOP)
    orphan["messages"][2]["content"][0]["tool_use_id"] = "toolu_other"
    with pytest.raises(AssertionError):
        assert_valid_anthropic_conversation(orphan)


@pytest.mark.parametrize("body", OPENAI_CONVERSATIONS, ids=OPENAI_IDS)
def test_openai_inputs_are_valid(body: dict[str, Any]) -> None:
    assert_valid_openai_conversation(body)


@pytest.mark.parametrize("body", ANTHROPIC_CONVERSATIONS, ids=ANTHROPIC_IDS)
def test_anthropic_inputs_are_valid(body: dict[str, Any]) -> None:
    assert_valid_anthropic_conversation(body)


# --- tool_role: validity ----------------------------------------------------------------------


@pytest.mark.parametrize("blocks", BLOCK_SETS, ids=BLOCK_SET_IDS)
@pytest.mark.parametrize("body", OPENAI_CONVERSATIONS, ids=OPENAI_IDS)
def test_tool_role_openai_stays_valid(body: dict[str, Any], blocks: list[SourceBlock]) -> None:
    rewritten = inject(body, "openai", blocks, "tool_role", REQUEST_ID)
    assert_valid_openai_conversation(rewritten)
    assert len(rewritten["messages"]) == len(body["messages"]) + 2 * len(blocks)
    # OpenAI needs no declaration; the model is not offered the context tools.
    assert rewritten.get("tools") == body.get("tools")


@pytest.mark.parametrize("blocks", BLOCK_SETS, ids=BLOCK_SET_IDS)
@pytest.mark.parametrize("body", ANTHROPIC_CONVERSATIONS, ids=ANTHROPIC_IDS)
def test_tool_role_anthropic_stays_valid(body: dict[str, Any], blocks: list[SourceBlock]) -> None:
    rewritten = inject(body, "anthropic", blocks, "tool_role", REQUEST_ID)
    assert_valid_anthropic_conversation(rewritten)
    assert len(rewritten["messages"]) == len(body["messages"]) + 2 * len(blocks)
    declared = [tool["name"] for tool in rewritten["tools"]]
    for block in blocks:
        assert context_tool_name(block) in declared
    assert len(declared) == len(set(declared))
    for original in body.get("tools") or []:
        assert original in rewritten["tools"]


def test_tool_role_openai_exchange_shape() -> None:
    rewritten = inject(OPENAI_PLAIN, "openai", [PROFILE, DOCS], "tool_role", REQUEST_ID)
    messages = rewritten["messages"]
    assert messages[:4] == OPENAI_PLAIN["messages"]
    call, result, call2, result2 = messages[4:]
    assert call["role"] == "assistant"
    assert call["content"] is None
    [tool_call] = call["tool_calls"]
    assert tool_call["function"]["name"] == "vsr_user_profile_context"
    assert json.loads(tool_call["function"]["arguments"]) == {"source": "user_profile"}
    assert tool_call["id"].startswith("call_")
    assert result == {
        "role": "tool",
        "tool_call_id": tool_call["id"],
        "content": '{"tier": "premium"}',
    }
    assert call2["tool_calls"][0]["function"]["name"] == "vsr_rag_context"
    assert result2["content"] == "Refunds within 30 days.\n\nShipping is free."
    assert result2["tool_call_id"] == call2["tool_calls"][0]["id"] != tool_call["id"]


def test_tool_role_anthropic_exchange_shape() -> None:
    rewritten = inject(ANTHROPIC_PLAIN, "anthropic", [DOCS], "tool_role", REQUEST_ID)
    use_message, result_message = rewritten["messages"][3:]
    assert use_message["role"] == "assistant"
    [use] = use_message["content"]
    assert use["type"] == "tool_use"
    assert use["name"] == "vsr_rag_context"
    assert use["input"] == {"source": "docs"}
    assert use["id"].startswith("toolu_")
    assert result_message == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": use["id"],
                "content": "Refunds within 30 days.\n\nShipping is free.",
            }
        ],
    }
    [tool] = rewritten["tools"]
    assert tool["name"] == "vsr_rag_context"
    assert tool["description"] == INJECTED_TOOL_DESCRIPTION
    assert tool["input_schema"] == {"type": "object", "properties": {"source": {"type": "string"}}}
    assert rewritten["system"] == ANTHROPIC_PLAIN["system"]


def test_tool_role_anthropic_keeps_existing_tools_first_and_declares_each_name_once() -> None:
    second_rag = SourceBlock(name="faq", type="rag", contents=("FAQ text",))
    rewritten = inject(
        ANTHROPIC_MID_TOOL_LOOP, "anthropic", [DOCS, second_rag, MEMORY], "tool_role", REQUEST_ID
    )
    assert [tool["name"] for tool in rewritten["tools"]] == [
        "lookup_order",
        "vsr_rag_context",
        "vsr_memory_context",
    ]
    assert_valid_anthropic_conversation(rewritten)


def test_tool_role_anthropic_does_not_redeclare_a_declared_context_tool() -> None:
    body = copy.deepcopy(ANTHROPIC_PLAIN)
    body["tools"] = [
        {"name": "vsr_rag_context", "description": "mine", "input_schema": {"type": "object"}}
    ]
    rewritten = inject(body, "anthropic", [DOCS], "tool_role", REQUEST_ID)
    assert rewritten["tools"] == body["tools"]


def test_tool_call_ids_are_unique_and_depend_on_the_request() -> None:
    blocks = [PROFILE, DOCS, MEMORY, GUARDRAILS]
    first = inject(OPENAI_PLAIN, "openai", blocks, "tool_role", "rsv_one")
    again = inject(OPENAI_PLAIN, "openai", blocks, "tool_role", "rsv_one")
    other = inject(OPENAI_PLAIN, "openai", blocks, "tool_role", "rsv_two")

    def ids(body: dict[str, Any]) -> list[str]:
        return [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]

    assert len(set(ids(first))) == 4
    assert ids(first) == ids(again)  # deterministic for one request
    assert not set(ids(first)) & set(ids(other))


# --- tool_role: names and position ------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "name"),
    [
        (SourceBlock(name="docs", type="rag", contents=("x",)), "vsr_rag_context"),
        (SourceBlock(name="kb", type="rag", contents=("x",)), "vsr_rag_context"),
        (SourceBlock(name="memories", type="memory", contents=("x",)), "vsr_memory_context"),
        (
            SourceBlock(name="user_profile", type="user_profile", contents=("x",)),
            "vsr_user_profile_context",
        ),
        (SourceBlock(name="rules", type="skill_guardrails", contents=("x",)), "vsr_rules_context"),
        (
            SourceBlock(name="recent-messages", type="recent_messages", contents=("x",)),
            "vsr_recent_messages_context",
        ),
    ],
)
def test_context_tool_names(block: SourceBlock, name: str) -> None:
    assert context_tool_name(block) == name
    assert ANTHROPIC_TOOL_NAME.match(name)


def test_context_tool_name_is_at_most_64_characters() -> None:
    name = context_tool_name(SourceBlock(name="a" * 100, type="http", contents=("x",)))
    assert len(name) == 64
    assert name.startswith("vsr_aaa")


def test_openai_injection_goes_after_the_last_user_message() -> None:
    rewritten = inject(OPENAI_MID_TOOL_LOOP, "openai", [DOCS], "tool_role", REQUEST_ID)
    roles = [m["role"] for m in rewritten["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "tool"]
    assert rewritten["messages"][1]["tool_calls"][0]["function"]["name"] == "vsr_rag_context"
    assert rewritten["messages"][3:] == OPENAI_MID_TOOL_LOOP["messages"][1:]


def test_openai_injection_after_last_user_not_the_first() -> None:
    rewritten = inject(OPENAI_PLAIN, "openai", [DOCS, MEMORY], "tool_role", REQUEST_ID)
    messages = rewritten["messages"]
    assert messages[3] == {"role": "user", "content": "Can I get a refund?"}
    assert [m["role"] for m in messages[4:]] == ["assistant", "tool", "assistant", "tool"]
    # Sources are injected in the order given.
    assert [m["tool_calls"][0]["function"]["name"] for m in messages[4::2]] == [
        "vsr_rag_context",
        "vsr_memory_context",
    ]


def test_anthropic_injection_goes_after_the_last_user_message() -> None:
    # The tool_result message is the last user message; the context exchange follows it.
    rewritten = inject(ANTHROPIC_MID_TOOL_LOOP, "anthropic", [DOCS], "tool_role", REQUEST_ID)
    messages = rewritten["messages"]
    assert messages[:3] == ANTHROPIC_MID_TOOL_LOOP["messages"]
    assert messages[3]["content"][0]["name"] == "vsr_rag_context"
    assert messages[4]["content"][0]["type"] == "tool_result"


def test_anthropic_injection_before_an_assistant_prefill() -> None:
    rewritten = inject(ANTHROPIC_PREFILL, "anthropic", [DOCS], "tool_role", REQUEST_ID)
    messages = rewritten["messages"]
    assert messages[0] == ANTHROPIC_PREFILL["messages"][0]
    assert messages[-1] == {"role": "assistant", "content": "{"}
    assert messages[1]["content"][0]["type"] == "tool_use"


def test_tool_role_skips_sources_without_kept_items() -> None:
    empty = SourceBlock(name="empty", type="rag", contents=())
    rewritten = inject(OPENAI_PLAIN, "openai", [empty, MEMORY], "tool_role", REQUEST_ID)
    names = [
        m["tool_calls"][0]["function"]["name"] for m in rewritten["messages"] if m.get("tool_calls")
    ]
    assert names == ["vsr_memory_context"]


# --- system_prompt ----------------------------------------------------------------------------

SECTION = (
    "# Context\n\n"
    '<context source="user_profile">\n{"tier": "premium"}\n</context>\n\n'
    '<context source="docs">\nRefunds within 30 days.\n</context>\n\n'
    '<context source="docs">\nShipping is free.\n</context>'
)


def test_render_context_section_has_one_block_per_item() -> None:
    assert render_context_section([PROFILE, DOCS]) == SECTION
    assert render_context_section([PROFILE, DOCS]).count("<context source=") == 3


def test_system_prompt_openai_appends_to_an_existing_system_string() -> None:
    rewritten = inject(OPENAI_PLAIN, "openai", [PROFILE, DOCS], "system_prompt", REQUEST_ID)
    messages = rewritten["messages"]
    assert len(messages) == len(OPENAI_PLAIN["messages"])
    assert messages[0] == {"role": "system", "content": "You are helpful.\n\n" + SECTION}
    assert messages[1:] == OPENAI_PLAIN["messages"][1:]


def test_system_prompt_openai_developer_message_counts_as_system() -> None:
    body = {
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "q"},
        ]
    }
    rewritten = inject(body, "openai", [PROFILE, DOCS], "system_prompt", REQUEST_ID)
    assert rewritten["messages"][0] == {"role": "developer", "content": "Be brief.\n\n" + SECTION}
    assert len(rewritten["messages"]) == 2


def test_system_prompt_openai_array_content_gets_a_text_part() -> None:
    body = {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "You are helpful."}]},
            {"role": "user", "content": "q"},
        ]
    }
    rewritten = inject(body, "openai", [PROFILE, DOCS], "system_prompt", REQUEST_ID)
    assert rewritten["messages"][0]["content"] == [
        {"type": "text", "text": "You are helpful."},
        {"type": "text", "text": SECTION},
    ]


def test_system_prompt_openai_empty_system_content_becomes_the_section() -> None:
    body = {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "q"}]}
    rewritten = inject(body, "openai", [PROFILE, DOCS], "system_prompt", REQUEST_ID)
    assert rewritten["messages"][0] == {"role": "system", "content": SECTION}


def test_system_prompt_openai_without_system_message_inserts_one_at_index_0() -> None:
    rewritten = inject(OPENAI_NO_SYSTEM, "openai", [PROFILE, DOCS], "system_prompt", REQUEST_ID)
    assert rewritten["messages"] == [
        {"role": "system", "content": SECTION},
        {"role": "user", "content": "Hello"},
    ]


def test_system_prompt_anthropic_appends_to_system_string() -> None:
    rewritten = inject(ANTHROPIC_PLAIN, "anthropic", [PROFILE, DOCS], "system_prompt", REQUEST_ID)
    assert rewritten["system"] == "You are helpful.\n\n" + SECTION
    assert rewritten["messages"] == ANTHROPIC_PLAIN["messages"]
    assert "tools" not in rewritten


def test_system_prompt_anthropic_appends_a_block_to_system_blocks() -> None:
    body = copy.deepcopy(ANTHROPIC_PLAIN)
    body["system"] = [
        {"type": "text", "text": "You are helpful.", "cache_control": {"type": "ephemeral"}}
    ]
    rewritten = inject(body, "anthropic", [PROFILE, DOCS], "system_prompt", REQUEST_ID)
    assert rewritten["system"] == [
        {"type": "text", "text": "You are helpful.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": SECTION},
    ]


def test_system_prompt_anthropic_without_system_sets_it() -> None:
    rewritten = inject(ANTHROPIC_PREFILL, "anthropic", [PROFILE, DOCS], "system_prompt", REQUEST_ID)
    assert rewritten["system"] == SECTION
    assert rewritten["messages"] == ANTHROPIC_PREFILL["messages"]


# --- copies -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["tool_role", "system_prompt"])
@pytest.mark.parametrize(
    ("body", "chat_format"),
    [(b, "openai") for b in OPENAI_CONVERSATIONS]
    + [(b, "anthropic") for b in ANTHROPIC_CONVERSATIONS],
)
def test_the_original_body_is_not_mutated(
    body: dict[str, Any], chat_format: ChatFormat, mode: str
) -> None:
    before = copy.deepcopy(body)
    rewritten = inject(body, chat_format, [PROFILE, DOCS, MEMORY], mode, REQUEST_ID)
    assert body == before
    assert rewritten != body
    assert rewritten["messages"] is not body["messages"]


@pytest.mark.parametrize("mode", ["tool_role", "system_prompt"])
def test_no_blocks_gives_an_unchanged_copy(mode: str) -> None:
    cases: list[tuple[dict[str, Any], ChatFormat]] = [
        (OPENAI_PLAIN, "openai"),
        (ANTHROPIC_MID_TOOL_LOOP, "anthropic"),
    ]
    no_blocks: list[list[SourceBlock]] = [[], [SourceBlock(name="docs", type="rag", contents=())]]
    for body, chat_format in cases:
        for blocks in no_blocks:
            rewritten = inject(body, chat_format, blocks, mode, REQUEST_ID)
            assert rewritten == body
            assert rewritten is not body
            rewritten["messages"][0]["content"] = "changed"
            assert body["messages"][0]["content"] != "changed"


# --- detect_format / parse_chat_request -------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"system": "x", "messages": [{"role": "user", "content": "q"}]}, "anthropic"),
        (
            {"anthropic_version": "2023-06-01", "messages": [{"role": "user", "content": "q"}]},
            "anthropic",
        ),
        (ANTHROPIC_MID_TOOL_LOOP, "anthropic"),
        (
            {
                "messages": [
                    {"role": "assistant", "content": [{"type": "thinking", "thinking": "."}]}
                ]
            },
            "anthropic",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "anthropic",
        ),
        (OPENAI_PLAIN, "openai"),
        (OPENAI_MID_TOOL_LOOP, "openai"),
        ({"messages": [{"role": "developer", "content": "x"}]}, "openai"),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}]},
            "openai",
        ),
        ({"messages": [{"role": "assistant", "tool_calls": []}]}, "openai"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}]}, "openai"),
        ({"messages": [{"role": "user", "content": "q"}]}, "openai"),
        ({"messages": ["not a dict"]}, "openai"),
        ({}, "openai"),
    ],
)
def test_detect_format(body: dict[str, Any], expected: str) -> None:
    assert detect_format(body)[0] == expected
    # A body that shows its shape keeps it whatever the route's deployment speaks.
    if shape_signal(body) is not None:
        assert detect_format(body, "anthropic")[0] == expected
        assert detect_format(body, "openai")[0] == expected


PLAIN_MESSAGES = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 256,
    "messages": [
        {"role": "user", "content": "Where is my order?"},
        {"role": "assistant", "content": "Which order?"},
        {"role": "user", "content": "The last one"},
    ],
}


def test_a_body_valid_in_both_shapes_goes_by_the_deployment() -> None:
    # The case: a plain Anthropic Messages body was taken for OpenAI.
    assert shape_signal(PLAIN_MESSAGES) is None
    chat = parse_chat_request(PLAIN_MESSAGES, None, protocol="anthropic")
    assert chat.format == "anthropic"
    assert (
        chat.format_reason
        == "the body is valid in both shapes; the route's deployment speaks anthropic"
    )
    assert parse_chat_request(PLAIN_MESSAGES, None, protocol="openai").format == "openai"
    default = parse_chat_request(PLAIN_MESSAGES, None)
    assert default.format == "openai"
    assert "names no deployment" in default.format_reason
    # The caller's own word wins over the deployment's protocol.
    named = parse_chat_request(PLAIN_MESSAGES, "openai", protocol="anthropic")
    assert (named.format, named.format_reason) == ("openai", "the request names format 'openai'")
    shown = parse_chat_request({**PLAIN_MESSAGES, "stop": ["x"]}, None, protocol="anthropic")
    assert shown.format == "openai"
    assert shown.format_reason == "the body has 'stop', which only OpenAI Chat Completions has"


def test_parse_detects_the_shape() -> None:
    assert parse_chat_request(ANTHROPIC_MID_TOOL_LOOP, None).format == "anthropic"
    assert parse_chat_request(OPENAI_PLAIN, None).format == "openai"


def test_parse_explicit_format_wins_over_detection() -> None:
    body = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 100}
    chat = parse_chat_request(body, "anthropic")
    assert chat.format == "anthropic"
    assert chat.max_tokens == 100
    # An explicit anthropic format validates against Anthropic's roles.
    with pytest.raises(ApiError) as caught:
        parse_chat_request(OPENAI_PLAIN, "anthropic")
    assert caught.value.param == "request.messages[0].role"


def test_parse_query_is_the_latest_user_text() -> None:
    chat = parse_chat_request(OPENAI_PLAIN, None)
    assert chat.query == "Can I get a refund?"
    assert [turn.role for turn in chat.turns] == ["system", "user", "assistant", "user"]
    assert chat.body is OPENAI_PLAIN


def test_parse_query_reads_text_parts_and_skips_empty_user_messages() -> None:
    body = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "part"}],
            },
            {"role": "assistant", "content": "answer"},
            {"role": "user", "content": "   "},
        ]
    }
    assert parse_chat_request(body, None).query == "first\npart"
    assert parse_chat_request({"messages": [{"role": "system", "content": "s"}]}, None).query == ""


def test_parse_anthropic_query_and_max_tokens() -> None:
    chat = parse_chat_request(ANTHROPIC_PLAIN, None)
    assert chat.query == "Can I get a refund?"
    assert chat.max_tokens == 512


def test_parse_openai_max_completion_tokens_wins_over_max_tokens() -> None:
    body = {
        "messages": [{"role": "user", "content": "q"}],
        "max_tokens": 100,
        "max_completion_tokens": 300,
    }
    assert parse_chat_request(body, None).max_tokens == 300
    assert (
        parse_chat_request(
            {"messages": [{"role": "user", "content": "q"}], "max_tokens": 100}, None
        ).max_tokens
        == 100
    )
    assert (
        parse_chat_request({"messages": [{"role": "user", "content": "q"}]}, None).max_tokens
        is None
    )


def test_parse_invalid_role_names_the_field() -> None:
    body = {"messages": [{"role": "user", "content": "hi"}, {"role": "robot", "content": "beep"}]}
    with pytest.raises(ApiError) as caught:
        parse_chat_request(body, None)
    assert caught.value.code == "invalid_request"
    assert caught.value.status == 400
    assert caught.value.param == "request.messages[1].role"
    assert caught.value.message.startswith("request.messages[1].role: ")


def test_parse_anthropic_invalid_role_names_the_field() -> None:
    body = {
        "system": "s",
        "messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x"}],
    }
    with pytest.raises(ApiError) as caught:
        parse_chat_request(body, None)
    assert caught.value.param == "request.messages[1].role"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "request.messages"),
        ({}, "request.messages"),
        ({"messages": [{"role": "user", "content": "q"}], "max_tokens": 0}, "request.max_tokens"),
        ({"messages": [{"content": "q"}]}, "request.messages[0].role"),
        ("not an object", "request"),
        (["a", "list"], "request"),
    ],
)
def test_parse_rejects_bad_bodies(body: Any, param: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_chat_request(body, None)
    assert caught.value.code == "invalid_request"
    assert caught.value.param == param


def test_parse_custom_prefix() -> None:
    with pytest.raises(ApiError) as caught:
        parse_chat_request({"messages": [{"role": "x"}]}, "openai", prefix="body")
    assert caught.value.param == "body.messages[0].role"
