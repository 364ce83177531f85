"""What a reservation counts beyond the request's text, and the output limit it forwards: the
overheads providers publish (``provider_input``), the limit fields (``output_limits``) and the
margin a deployment's reports teach (``reservation_margins``). Pure: no server needed."""

from __future__ import annotations

import pytest

from contextplatform.gateway import reservation_margins
from contextplatform.gateway.output_limits import client_output_limit, with_output_limit
from contextplatform.gateway.provider_input import published_overhead
from contextplatform.gateway.reservation_margins import MarginBook, Report

TOOL = {"name": "lookup", "input_schema": {"type": "object"}}
MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


@pytest.mark.parametrize(
    ("model", "choice", "tokens"),
    [
        ("claude-sonnet-4-5", None, 346),
        ("claude-opus-4-1-20250805", {"type": "auto"}, 346),
        ("claude-haiku-4-5", {"type": "none"}, 346),
        ("claude-3-7-sonnet-20250219", {"type": "any"}, 313),
        ("claude-sonnet-4-20250514", {"type": "tool", "name": "lookup"}, 313),
        ("claude-3-5-haiku-latest", {"type": "any"}, 340),
        ("claude-3-opus-20240229", None, 530),
        ("anthropic/claude-opus-4", None, 346),
        ("my-proxy-alias", None, 530),  # unknown: the largest published count
        ("my-proxy-alias", {"type": "any"}, 340),
    ],
)
def test_anthropic_tool_use_system_prompt_is_counted_per_model_and_choice(
    model: str, choice: dict[str, str] | None, tokens: int
) -> None:
    body = {"messages": MESSAGES, "tools": [TOOL], **({"tool_choice": choice} if choice else {})}
    assert published_overhead("anthropic", model, body) == tokens


def test_anthropic_without_tools_adds_nothing() -> None:
    assert published_overhead("anthropic", "claude-sonnet-4-5", {"messages": MESSAGES}) == 0
    body = {"messages": MESSAGES, "tools": [], "tool_choice": {"type": "none"}}
    assert published_overhead("anthropic", "claude-sonnet-4-5", body) == 0


def test_openai_frames_every_message_and_the_reply() -> None:
    assert published_overhead("openai", "gpt-4o", {"messages": MESSAGES}) == 2 * 3 + 3


def test_every_named_output_limit_is_lowered_never_raised() -> None:
    body = {"max_tokens": 500, "max_completion_tokens": 80, "messages": MESSAGES}
    assert client_output_limit(body) == 80
    limited = with_output_limit("openai", "gpt-4o", body, 100)
    assert limited["max_tokens"] == 100 and limited["max_completion_tokens"] == 80
    assert with_output_limit("openai", "gpt-4o", body, 1000) is body
    responses = with_output_limit("openai", "gpt-4o", {"max_output_tokens": 900}, 64)
    assert responses == {"max_output_tokens": 64}


@pytest.mark.parametrize(
    ("protocol", "model", "field"),
    [
        ("anthropic", "claude-sonnet-4-5", "max_tokens"),
        ("openai", "gpt-4o-mini", "max_tokens"),
        ("openai", "o3-mini", "max_completion_tokens"),
        ("openai", "gpt-5", "max_completion_tokens"),
        ("openai", "llama-3.1-8b", "max_tokens"),
    ],
)
def test_a_body_without_a_limit_gets_the_field_its_provider_reads(
    protocol: str, model: str, field: str
) -> None:
    assert with_output_limit(protocol, model, {"messages": MESSAGES}, 42) == {
        "messages": MESSAGES,
        field: 42,
    }


def test_a_margin_widens_to_what_a_report_missed_is_bounded_and_fades(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(reservation_margins.time, "monotonic", lambda: now[0])
    book = MarginBook()
    key = ("acme", "deployment")
    assert book.tokens(key) == 0
    book.observe(key, Report(expected=100, reported=90))  # within: nothing to learn
    assert book.tokens(key) == 0
    book.observe(key, Report(expected=100, reported=400))
    assert book.tokens(key) == 330  # what it missed, plus 10 %
    book.observe(key, Report(expected=100, reported=200))  # a smaller miss never narrows it
    assert book.tokens(key) == 330
    book.observe(key, Report(expected=100, reported=10**9))
    assert book.tokens(key) == reservation_margins.MAX_MARGIN_TOKENS
    now[0] += reservation_margins.HALF_LIFE_S
    assert book.tokens(key) == reservation_margins.MAX_MARGIN_TOKENS // 2
    assert book.tokens(("acme", "another")) == 0
