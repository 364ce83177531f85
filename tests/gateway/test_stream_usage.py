"""OpenAI streams: the usage the gateway asks for, and the usage chunk hidden from a client that
did not ask for it, whatever the chunk boundaries."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextplatform.gateway.stream_usage import UsageChunkFilter, with_stream_usage


def event(data: dict[str, Any], end: str = "\n\n") -> bytes:
    return f"data: {json.dumps(data)}{end}".encode()


def stream(end: str = "\n\n") -> tuple[bytes, bytes]:
    """A whole stream, and the same without its usage chunk."""
    text = event({"choices": [{"delta": {"content": "hi"}}], "usage": None}, end)
    stop = event({"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": None}, end)
    usage = event({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1}}, end)
    done = f"data: [DONE]{end}".encode()
    return text + stop + usage + done, text + stop + done


def test_usage_is_asked_for_when_the_client_did_not() -> None:
    body, hide = with_stream_usage("openai", {"stream": True, "stream_options": {"x": 1}})
    assert body["stream_options"] == {"x": 1, "include_usage": True} and hide
    asked = {"stream": True, "stream_options": {"include_usage": True}}
    assert with_stream_usage("openai", asked) == (asked, False)
    assert with_stream_usage("anthropic", {"stream": True}) == ({"stream": True}, False)


@pytest.mark.parametrize("end", ["\n\n", "\r\n\r\n"])
@pytest.mark.parametrize("size", [1, 7, 64, 100_000])
def test_the_usage_chunk_is_left_out(end: str, size: int) -> None:
    whole, expected = stream(end)
    usage_filter = UsageChunkFilter()
    passed = b"".join(
        usage_filter.feed(whole[start : start + size]) for start in range(0, len(whole), size)
    )
    assert passed + usage_filter.flush() == expected


def test_an_unfinished_last_event_is_passed_at_the_end() -> None:
    usage_filter = UsageChunkFilter()
    assert usage_filter.feed(b"data: [DONE]") == b""
    assert usage_filter.flush() == b"data: [DONE]"
