"""Bodies the provider would refuse are refused by the gateway, in the provider's error shape and
naming the field, before anything is resolved, held or sent: a wrong type or range of a field the
gateway reads or sends on (``"stream": "true"``, ``"temperature": "hot"``), a field the provider
requires (Anthropic's ``max_tokens``). Each row of the tables went to the upstream before; the
official clients' own bodies still pass (``test_views.py``, ``test_error_codes.py``)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.gateway.conftest import Gateway
from tests.upstream import LoopbackUpstream

MISSING = object()  # the field left out of the body
MESSAGES = [{"role": "user", "content": "hi"}]

# (field, value, the field the refusal names)
OPENAI_BAD: list[tuple[str, Any, str]] = [
    ("stream", "true", "stream"),
    ("temperature", "hot", "temperature"),
    ("temperature", 3, "temperature"),
    ("top_p", 1.5, "top_p"),
    ("frequency_penalty", -3, "frequency_penalty"),
    ("presence_penalty", "high", "presence_penalty"),
    ("n", 0, "n"),
    ("stop", 5, "stop"),
    ("stop", ["END", 1], "stop[1]"),
    ("tool_choice", "sometimes", "tool_choice"),
    ("tool_choice", 5, "tool_choice"),
    ("response_format", "json", "response_format"),
    ("seed", 1.5, "seed"),
    ("logit_bias", [1], "logit_bias"),
    ("logit_bias", {"50256": 200}, "logit_bias.50256"),
    ("parallel_tool_calls", "yes", "parallel_tool_calls"),
    ("metadata", {"tier": 1}, "metadata.tier"),
    ("stream_options", {"include_usage": "yes"}, "stream_options.include_usage"),
    ("stream_options", {"include_usage": True}, "stream_options"),  # without "stream": true
    ("logprobs", "yes", "logprobs"),
    ("top_logprobs", 21, "top_logprobs"),
    ("store", "no", "store"),
]
ANTHROPIC_BAD: list[tuple[str, Any, str]] = [
    ("max_tokens", MISSING, "max_tokens"),
    ("stream", "true", "stream"),
    ("temperature", "hot", "temperature"),
    ("temperature", 1.5, "temperature"),
    ("top_p", -0.1, "top_p"),
    ("top_k", 1.5, "top_k"),
    ("top_k", -1, "top_k"),
    ("stop_sequences", "END", "stop_sequences"),
    ("stop_sequences", ["END", 1], "stop_sequences[1]"),
    ("tool_choice", "auto", "tool_choice"),
    ("tool_choice", {"type": "sometimes"}, "tool_choice.type"),
    ("tool_choice", {"type": "tool", "name": 5}, "tool_choice.name"),
    (
        "tool_choice",
        {"type": "any", "disable_parallel_tool_use": "no"},
        "tool_choice.disable_parallel_tool_use",
    ),
    ("thinking", "on", "thinking"),
    ("thinking", {"type": "enabled", "budget_tokens": "many"}, "thinking.budget_tokens"),
]


def with_field(body: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    changed = dict(body)
    if value is MISSING:
        changed.pop(field)
    else:
        changed[field] = value
    return changed


def row_id(row: tuple[str, Any, str]) -> str:
    field, value, _ = row
    return f"{field}={'missing' if value is MISSING else repr(value)}"


def post_chat_completions(gateway: Gateway, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{gateway.openai_base_url}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {gateway.key}"},
        timeout=30,
    )


def post_messages(gateway: Gateway, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{gateway.server}/v1/messages",
        json=body,
        headers={"x-api-key": gateway.key, "anthropic-version": "2023-06-01"},
        timeout=30,
    )


@pytest.mark.parametrize("row", OPENAI_BAD, ids=row_id)
def test_a_chat_completions_body_openai_would_refuse_is_a_400_in_its_shape(
    gateway: Gateway, upstream: LoopbackUpstream, row: tuple[str, Any, str]
) -> None:
    field, value, named = row
    body = with_field({"model": gateway.openai_route, "messages": MESSAGES}, field, value)
    before = upstream.hits
    response = post_chat_completions(gateway, body)
    assert (response.status_code, upstream.hits - before) == (400, 0), response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "invalid_request"
    assert error["param"] == named
    assert error["message"].startswith(f"{named}: "), error["message"]


@pytest.mark.parametrize("row", ANTHROPIC_BAD, ids=row_id)
def test_a_messages_body_anthropic_would_refuse_is_a_400_in_its_shape(
    gateway: Gateway, upstream: LoopbackUpstream, row: tuple[str, Any, str]
) -> None:
    field, value, named = row
    plain = {"model": gateway.anthropic_route, "max_tokens": 64, "messages": MESSAGES}
    body = with_field(plain, field, value)
    before = upstream.hits
    response = post_messages(gateway, body)
    assert (response.status_code, upstream.hits - before) == (400, 0), response.text
    answer = response.json()
    assert answer["type"] == "error"
    assert answer["error"]["type"] == "invalid_request_error"
    assert answer["error"]["message"].startswith(f"{named}: "), answer["error"]["message"]


def test_the_same_fields_well_typed_are_forwarded(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    """Every field of the tables, with a value its provider takes, reaches the upstream."""
    openai_body = {
        "model": gateway.openai_route,
        "messages": MESSAGES,
        "temperature": 2,
        "top_p": 0.5,
        "frequency_penalty": -2,
        "presence_penalty": 1.5,
        "n": 1,
        "stop": ["END"],
        "tool_choice": "none",
        "response_format": {"type": "text"},
        "seed": 7,
        "logit_bias": {"50256": -100},
        "parallel_tool_calls": False,
        "metadata": {"tier": "gold"},
        "logprobs": False,
        "top_logprobs": 0,
        "store": False,
        "stream": None,
    }
    anthropic_body = {
        "model": gateway.anthropic_route,
        "max_tokens": 64,
        "messages": MESSAGES,
        "temperature": 1,
        "top_p": 0.9,
        "top_k": 40,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u-shapes"},
        "stream": False,
    }
    before = upstream.hits
    openai_answer = post_chat_completions(gateway, openai_body)
    assert openai_answer.status_code == 200, openai_answer.text
    assert upstream.last.body["temperature"] == 2
    anthropic_answer = post_messages(gateway, anthropic_body)
    assert anthropic_answer.status_code == 200, anthropic_answer.text
    assert upstream.last.body["top_k"] == 40
    assert upstream.hits - before == 2
