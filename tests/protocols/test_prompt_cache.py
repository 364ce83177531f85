"""Prompt-cache marks on a Messages body, without a database."""

from __future__ import annotations

import copy
import json
from typing import Any

from contextplatform.protocols.prompt_cache import (
    MAX_BREAKPOINTS,
    common_prefix_share,
    marks_in,
    with_cache_markers,
)

MARK = {"type": "ephemeral"}


def body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4",
        "max_tokens": 100,
        "system": "Be brief.",
        "tools": [{"name": "a", "input_schema": {}}, {"name": "b", "input_schema": {}}],
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": [{"type": "text", "text": "where is it?"}]},
        ],
        **extra,
    }


def test_marks_the_last_tool_the_system_and_the_last_user_block() -> None:
    original = body()
    kept = copy.deepcopy(original)
    marked = with_cache_markers(original)
    assert original == kept  # the body given is never modified
    assert "cache_control" not in marked["tools"][0]
    assert marked["tools"][1]["cache_control"] == MARK
    assert marked["system"] == [{"type": "text", "text": "Be brief.", "cache_control": MARK}]
    assert marked["messages"][2]["content"][-1]["cache_control"] == MARK
    assert "cache_control" not in json.dumps(marked["messages"][:2])
    assert (
        marks_in(marked["tools"]) + marks_in(marked["system"]) + marks_in(marked["messages"]) == 3
    )


def test_a_part_the_caller_marked_gets_no_mark_of_ours() -> None:
    request = body(system=[{"type": "text", "text": "Be brief.", "cache_control": MARK}])
    marked = with_cache_markers(request)
    assert marked["system"] == request["system"]
    assert marked["tools"][1]["cache_control"] == MARK
    assert marked["messages"][2]["content"][-1]["cache_control"] == MARK


def test_never_more_marks_than_the_provider_allows() -> None:
    request = body()
    request["messages"] = [
        {"role": "user", "content": [{"type": "text", "text": str(n), "cache_control": MARK}]}
        for n in range(MAX_BREAKPOINTS - 1)
    ]
    marked = with_cache_markers(request)
    total = sum(marks_in(marked.get(part)) for part in ("tools", "system", "messages"))
    assert total == MAX_BREAKPOINTS
    assert marked["tools"][1]["cache_control"] == MARK  # the one left goes to the first part
    assert "cache_control" not in json.dumps(marked["system"])


def test_nothing_to_mark_is_left_alone() -> None:
    request = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": ""}]}
    assert with_cache_markers(request) == request
    thinking = {
        "model": "m",
        "max_tokens": 5,
        "system": [],
        "messages": [{"role": "user", "content": [{"type": "thinking", "thinking": "x"}]}],
    }
    assert with_cache_markers(thinking) == thinking


def test_common_prefix_share() -> None:
    assert common_prefix_share("abcdef", "abcxyz") == 0.5
    assert common_prefix_share("", "abcd") == 0.0
    assert common_prefix_share("abcd", "abcd") == 1.0
    assert common_prefix_share("x", "") == 1.0
