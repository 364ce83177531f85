"""One client stream over several upstream streams, without a server: the loopback upstream's own
event sequences fed through ``StreamRound`` as the gateway feeds them."""

from __future__ import annotations

import json
from typing import Any

from contextplatform.gateway.stream_loop import StreamRound, event_data
from tests.upstream import PREAMBLE, anthropic_events, openai_events, prompt_tokens

BODY = {"model": "m", "messages": [], "stream_options": {"include_usage": True}}
RESERVED = {"vsr_context_retrieve"}
RETRIEVE = [("call_a", "vsr_context_retrieve", json.dumps({"key": "k1"}))]
CLIENT = [("call_b", "get_weather", json.dumps({"city": "Oslo"}))]


def events_of(raw: bytes) -> list[Any]:
    return [event_data(part) for part in raw.split(b"\n\n") if part.strip()]


def fed(loop: StreamRound, frames: Any) -> bytes:
    # Events cut at odd places, as TCP delivers them.
    data = b"".join(frames)
    return b"".join(loop.feed(data[i : i + 7]) for i in range(0, len(data), 7))


def test_openai_text_passes_the_reserved_call_is_held_and_the_end_is_summed() -> None:
    loop = StreamRound("openai", RESERVED)
    loop.begin_round()
    passed = events_of(fed(loop, openai_events(BODY, [], RETRIEVE)))
    texts = [e["choices"][0]["delta"].get("content") for e in passed if e["choices"]]
    assert "".join(t or "" for t in texts) == PREAMBLE
    assert not any(e["choices"][0]["delta"].get("tool_calls") for e in passed if e["choices"])
    (call,) = loop.reserved_calls()
    assert call.arguments == {"key": "k1"}
    assert loop.turn()["choices"][0]["message"]["content"] == PREAMBLE
    loop.begin_round()
    second = events_of(fed(loop, openai_events(BODY, ["The", " answer"])))
    assert not any(e["choices"][0]["delta"].get("role") for e in second if e["choices"])
    assert not loop.reserved_calls()
    end = events_of(loop.finish())
    assert end[-1] == "[DONE]"
    assert end[-3]["choices"][0]["finish_reason"] == "stop"
    assert end[-2]["usage"]["prompt_tokens"] == 2 * prompt_tokens(BODY)  # both rounds


def test_openai_client_calls_are_sent_on_whole_at_the_end() -> None:
    loop = StreamRound("openai", RESERVED, client_wants_usage=False)
    loop.begin_round()
    fed(loop, openai_events(BODY, [], CLIENT))
    assert loop.reserved_calls() == []
    end = events_of(loop.finish())
    call = end[0]["choices"][0]["delta"]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    assert end[1]["choices"][0]["finish_reason"] == "tool_calls"
    assert not any(isinstance(e, dict) and e.get("usage") for e in end)  # not asked for


def test_anthropic_blocks_are_renumbered_across_rounds() -> None:
    loop = StreamRound("anthropic", RESERVED)
    loop.begin_round()
    first = events_of(fed(loop, anthropic_events(BODY, [], RETRIEVE)))
    assert first[0]["type"] == "message_start"
    assert all(e.get("index", 0) == 0 for e in first)  # the tool_use block (index 1) is held
    assert loop.reserved_calls()[0].arguments == {"key": "k1"}
    loop.begin_round()
    second = events_of(fed(loop, anthropic_events(BODY, ["More"], CLIENT)))
    assert "message_start" not in [e["type"] for e in second]
    assert {e["index"] for e in second if "index" in e} == {1}  # the client's second block
    end = events_of(loop.finish())
    assert [e["type"] for e in end] == [
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert end[0]["index"] == 2 and end[0]["content_block"]["name"] == "get_weather"
    assert end[3]["delta"]["stop_reason"] == "tool_use"  # the client's own call is still there
    assert end[3]["usage"]["output_tokens"] == 0 + 1  # each round's message_delta, added up
    assert end[3]["usage"]["input_tokens"] == 2 * prompt_tokens(BODY)


def test_a_turn_of_only_unserved_reserved_calls_ends_with_a_plain_stop() -> None:
    loop = StreamRound("anthropic", RESERVED)
    loop.begin_round()
    frames = [f for f in anthropic_events(BODY, [], RETRIEVE) if b'"text_delta"' not in f]
    fed(loop, frames)
    end = events_of(loop.finish())
    assert end[1]["delta"]["text"]  # the "could not be retrieved" text
    assert end[-2]["delta"]["stop_reason"] == "end_turn"
