"""The text of a stream followed as it passes, in each provider's event format."""

from __future__ import annotations

from contextplatform.gateway.streams import StreamTranscript
from tests.upstream import anthropic_events, openai_events

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
PIECES = ["Hello", " wide", " wörld"]


def fed_in_small_pieces(transcript: StreamTranscript, events: list[bytes]) -> None:
    stream = b"".join(events)
    for start in range(0, len(stream), 7):  # events split anywhere, even inside a character
        transcript.feed(stream[start : start + 7])


def test_openai_deltas() -> None:
    transcript = StreamTranscript("openai")
    fed_in_small_pieces(transcript, list(openai_events(BODY, PIECES)))
    assert transcript.text == "Hello wide wörld" and transcript.finished
    assert transcript.response()["choices"][0]["message"]["content"] == "Hello wide wörld"


def test_anthropic_text_deltas() -> None:
    transcript = StreamTranscript("anthropic")
    fed_in_small_pieces(transcript, list(anthropic_events(BODY, PIECES)))
    assert transcript.text == "Hello wide wörld" and transcript.finished
    assert transcript.response()["content"] == [{"type": "text", "text": "Hello wide wörld"}]


def test_a_broken_stream_is_not_finished() -> None:
    transcript = StreamTranscript("openai")
    transcript.feed(b"data: {not json}\n\ndata: ")
    assert transcript.text == "" and not transcript.finished
