"""The one SSE reader against the HTML standard's event-stream cases, each fed whole, byte by
byte, and split in two at every position: the events, and the bytes kept beside them, are the
same however the stream arrives."""

from __future__ import annotations

import itertools

import pytest

from contextplatform.protocols.sse import SSEBlock, SSEReader, sse


def read(stream: bytes, cuts: list[int] | None = None, **options: int) -> list[SSEBlock]:
    reader = SSEReader(**options)
    blocks: list[SSEBlock] = []
    edges = [0, *(cuts or []), len(stream)]
    for start, end in itertools.pairwise(edges):
        blocks += reader.feed(stream[start:end])
    rest = reader.flush()
    return [*blocks, *([rest] if rest else [])]


def events(blocks: list[SSEBlock]) -> list[tuple[str, str, str | None]]:
    return [(b.event, b.data, b.id) for b in blocks if b.data is not None]


def every_split(stream: bytes) -> list[list[SSEBlock]]:
    ways = [read(stream), read(stream, list(range(1, len(stream))))]
    ways += [read(stream, [cut]) for cut in range(1, len(stream))]
    return ways


CASES: list[tuple[bytes, list[tuple[str, str, str | None]]]] = [
    # The standard's examples.
    (b"data: YHOO\ndata: +2\ndata: 10\n\n", [("message", "YHOO\n+2\n10", None)]),
    (
        b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n",
        [
            ("message", "first event", "1"),
            ("message", "second event", ""),
            ("message", " third event", ""),
        ],
    ),
    (b"data\n\ndata\ndata\n\ndata:", [("message", "", None), ("message", "\n", None)]),
    (b"data:test\n\ndata: test\n\n", [("message", "test", None), ("message", "test", None)]),
    # Line ends: CRLF, CR, LF, mixed.
    (
        b"event: a\r\ndata: 1\r\n\r\ndata: 2\r\rdata: 3\n\n",
        [("a", "1", None), ("message", "2", None), ("message", "3", None)],
    ),
    (b"data: x\r\n\r\n", [("message", "x", None)]),
    (b"data: x\r\r", [("message", "x", None)]),
    # Comments and unknown fields are ignored; an event without data is not dispatched.
    (b": ping\n\nevent: nothing\n\nfoo: bar\ndata: y\n\n", [("message", "y", None)]),
    # A leading BOM is dropped once; ids with NUL are ignored; retry takes digits only.
    (b"\xef\xbb\xbfdata: bom\n\n", [("message", "bom", None)]),
    (b"id: a\x00b\ndata: z\n\n", [("message", "z", None)]),
    # An unfinished event at the end is not dispatched.
    (b"data: whole\n\ndata: cut", [("message", "whole", None)]),
    # The providers' shapes.
    (
        b'event: message_start\ndata: {"type":"message_start"}\n\nevent: ping\ndata: {"type": "ping"}\n\n',
        [("message_start", '{"type":"message_start"}', None), ("ping", '{"type": "ping"}', None)],
    ),
    (
        b'data: {"choices":[]}\n\ndata: [DONE]\n\n',
        [("message", '{"choices":[]}', None), ("message", "[DONE]", None)],
    ),
    # Non-ASCII text split inside a character.
    ("data: héllo → wörld\n\n".encode(), [("message", "héllo → wörld", None)]),
]


@pytest.mark.parametrize(("stream", "expected"), CASES)
def test_every_split_reads_the_same(
    stream: bytes, expected: list[tuple[str, str, str | None]]
) -> None:
    for blocks in every_split(stream):
        assert events(blocks) == expected
        assert b"".join(b.raw for b in blocks) == stream  # nothing lost, nothing added


def test_retry_and_last_event_id_carry_over() -> None:
    blocks = read(b"retry: 1500\nid: 7\ndata: a\n\nretry: x\ndata: b\n\n")
    dispatched = [b for b in blocks if b.dispatched]
    assert [(b.retry, b.id) for b in dispatched] == [(1500, "7"), (None, "7")]


def test_a_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    reader = SSEReader()
    assert reader.feed(b"data: a\r") == []
    assert reader.feed(b"\n") == []
    (block,) = reader.feed(b"\r\n")
    assert block.data == "a"
    assert reader.feed(b"\ndata: b\n\n")[-1].data == "b"  # a lone LF after CRLF CRLF: a blank line


def test_blocks_without_events_keep_their_bytes() -> None:
    blocks = read(b": keep-alive\n\ndata: 1\n\n")
    assert [(b.raw, b.data) for b in blocks] == [(b": keep-alive\n\n", None), (b"data: 1\n\n", "1")]


def test_json_of_the_data() -> None:
    (first, done, bad) = [b for b in read(b'data: {"a": 1}\n\ndata: [DONE]\n\ndata: {\n\n')]
    assert first.json() == {"a": 1}
    assert done.json() == "[DONE]"
    assert bad.json() is None


def test_an_oversized_block_is_passed_on_unread() -> None:
    stream = b"data: " + b"x" * 100 + b"\n\ndata: small\n\n"
    for cuts in ([], [7], [7, 50], list(range(1, len(stream)))):
        blocks = read(stream, cuts, max_block_bytes=32)
        assert b"".join(b.raw for b in blocks) == stream
        assert events(blocks) == [("message", "small", None)]
        assert any(b.overflow for b in blocks)


def test_sse_writes_what_the_reader_reads() -> None:
    written = sse({"type": "ping"}, "ping") + sse({"a": [1, 2]})
    assert [(b.event, b.json()) for b in read(written)] == [
        ("ping", {"type": "ping"}),
        ("message", {"a": [1, 2]}),
    ]
