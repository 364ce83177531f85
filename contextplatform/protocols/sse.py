"""Server-Sent Events, read incrementally as the HTML standard's event-stream parser reads them
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
lines end at CRLF, LF or CR (a CR that ends one chunk and an LF that starts the next are one line
end); ``:`` starts a comment; a field's value loses one leading space; ``data`` lines join with
LF; a blank line dispatches the event; an event without data is not dispatched; a leading BOM is
dropped; an unknown field is ignored.

Both providers stream this way, and every reader of a stream (the gateway's transcript, its usage
filter, its tool rounds) reads it through ``SSEReader``, so a chunk boundary anywhere, in a line
end too, reads the same. Beside each event the reader keeps the bytes it was read from
(``SSEBlock.raw``), so that a caller can pass the stream on byte for byte, or leave out one event.
Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

LINE_END = re.compile(rb"\r\n|\r|\n")
BOM = b"\xef\xbb\xbf"
DONE = "[DONE]"  # OpenAI's last event's data (not JSON)


@dataclass(frozen=True)
class SSEBlock:
    """What the stream said up to one blank line (or up to an overflow): its bytes as they came,
    and the event it dispatches, if any (``data`` None: comments or fields without data, or an
    oversized block passed on unread)."""

    raw: bytes
    data: str | None = None
    event: str = "message"
    id: str | None = None  # the last event id, as the spec keeps it across events
    retry: int | None = None
    overflow: bool = False

    @property
    def dispatched(self) -> bool:
        return self.data is not None

    def json(self) -> Any:
        """The data as JSON, ``"[DONE]"`` as it is, None when there is none or it is not JSON."""
        if self.data is None:
            return None
        if self.data == DONE:
            return DONE
        try:
            return json.loads(self.data)
        except ValueError:
            return None


class SSEReader:
    """Feed it the stream's bytes in whatever chunks they arrive; it returns the blocks each chunk
    completed. ``max_block_bytes``: a block that grows past it is returned unread as it stands
    (``overflow``), and the rest of that block up to its blank line is returned unread too, so a
    caller can pass on what it cannot hold."""

    def __init__(self, max_block_bytes: int | None = None) -> None:
        self.max_block_bytes = max_block_bytes
        self._line = bytearray()  # the current line, not yet ended
        self._raw = bytearray()  # the current block's bytes, line ends included
        self._data: list[str] = []
        self._event = ""
        self._retry: int | None = None
        self.last_event_id: str | None = None
        self._after_cr = False  # the last byte seen ended a line with CR: an LF next is its end
        self._started = False  # the BOM is looked for once, at the stream's start
        self._head = b""  # the stream's first bytes while they may be a BOM
        self._line_lost = False  # the current line's start was passed on unread (an overflow)
        self._skipping = False  # the rest of an overflowed block: passed on unread

    def feed(self, chunk: bytes) -> list[SSEBlock]:
        if not self._started:
            head = self._head + chunk
            if len(head) < len(BOM) and BOM.startswith(head):
                self._head = head  # perhaps a BOM, split: wait for the rest of it
                return []
            self._started, self._head = True, b""
            if head.startswith(BOM):
                self._raw += BOM  # passed on, not read as part of the first line
                head = head[len(BOM) :]
            chunk = head
        blocks: list[SSEBlock] = []
        if not chunk:
            return blocks
        start = 0
        if self._after_cr and chunk[:1] == b"\n":
            self._append_raw(blocks, b"\n")
            start = 1
        self._after_cr = False
        for match in LINE_END.finditer(chunk, start):
            line = bytes(self._line) + chunk[start : match.start()]
            if self._line_lost and not line:
                line = b":"  # the line's start went out unread: not a blank line
            self._line.clear()
            self._line_lost = False
            self._append_raw(blocks, chunk[start : match.end()])
            if match.group() == b"\r" and match.end() == len(chunk):
                self._after_cr = True  # perhaps a CRLF split after its CR: skip an LF next
            self._read_line(line, blocks)
            start = match.end()
        rest = chunk[start:]
        if rest:
            if self._skipping:
                self._line_lost = True  # unread anyway: not held
            else:
                self._line += rest
            self._append_raw(blocks, rest)
        return blocks

    def _append_raw(self, blocks: list[SSEBlock], data: bytes) -> None:
        self._raw += data
        limit = self.max_block_bytes
        if limit is not None and len(self._raw) > limit:
            blocks.append(SSEBlock(raw=bytes(self._raw), overflow=True))
            self._raw.clear()
            self._line_lost = self._line_lost or bool(self._line)
            self._line.clear()
            self._reset_event()
            self._skipping = True

    def _read_line(self, line: bytes, blocks: list[SSEBlock]) -> None:
        if not line:
            blocks.append(self._dispatch())
            return
        if self._skipping:
            return
        if line.startswith(b":"):
            return  # a comment
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        field = name.decode("utf-8", "replace")
        text = value.decode("utf-8", "replace")
        if field == "data":
            self._data.append(text)
        elif field == "event":
            self._event = text
        elif field == "id":
            if "\0" not in text:
                self.last_event_id = text
        elif field == "retry" and text.isascii() and text.isdigit():
            self._retry = int(text)

    def _dispatch(self) -> SSEBlock:
        raw = bytes(self._raw)
        self._raw.clear()
        if self._skipping:
            self._skipping = False
            self._reset_event()
            return SSEBlock(raw=raw, overflow=True)
        block = SSEBlock(
            raw=raw,
            data="\n".join(self._data) if self._data else None,
            event=self._event or "message",
            id=self.last_event_id,
            retry=self._retry,
        )
        self._reset_event()
        return block

    def _reset_event(self) -> None:
        self._data, self._event, self._retry = [], "", None

    def flush(self) -> SSEBlock | None:
        """What is left when the stream ends: its bytes, unread (an event is dispatched only at
        its blank line; the spec drops an unfinished one), or None when nothing is."""
        raw = self._head + bytes(self._raw)
        self._head = b""
        self._raw.clear()
        self._line.clear()
        self._reset_event()
        self._skipping = False
        return SSEBlock(raw=raw) if raw else None

    @property
    def pending(self) -> bytes:
        """The bytes of the block not yet ended."""
        return bytes(self._raw)


def sse(data: Any, event: str | None = None) -> bytes:
    """One event as the providers write it: ``event:`` when named, then one ``data:`` line of
    compact JSON, then the blank line."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


__all__ = ["DONE", "SSEBlock", "SSEReader", "sse"]
