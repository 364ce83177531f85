"""The HTTP server's protocol and gunicorn worker: uvicorn's (httptools, uvloop), with a cap on the
size of a request's head, the request line and its headers together.

httptools has no limit of its own: it gathers a header's value in memory until the next header
begins, so a 64 MiB header with no key was read in full (seconds, 140 MiB of the worker's memory)
before the application could refuse it. Here the head's bytes are counted as they arrive and the
parser is fed no more than ``API_MAX_HEADER_BYTES`` of them: past that, 431 and the connection is
closed, before any application code runs.

Every way the server is started names these: ``make run``, ``make cluster`` and ``deploy/`` the
worker class (``contextplatform.server.UvicornWorker``), the tests' live uvicorn the protocol
(``--http contextplatform.server:HeadLimitedHttpToolsProtocol``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn_worker import UvicornWorker as BaseUvicornWorker

TOO_LARGE_MESSAGE = b"Request line and headers too large."


class HeadLimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that refuses a request whose head is over the limit.

    The head of a request runs from the end of the previous message (or the connection's start)
    to the end of its headers (the parser's ``on_headers_complete``). A head that begins in the
    middle of a read, behind a pipelined request, is counted from the next read on: one read more
    at worst (uvloop reads up to 256 KiB at a time), still bounded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read here, once the application (and with it Django's settings) is loaded.
        self.max_head_bytes: int = settings.API_MAX_HEADER_BYTES
        self.reading_head = True
        self.head_bytes = 0
        self.heads_begun = 0

    def data_received(self, data: bytes) -> None:
        if not self.reading_head:
            super().data_received(data)
            return
        room = self.max_head_bytes - self.head_bytes
        if len(data) <= room:
            self.head_bytes += len(data)
            super().data_received(data)
            return
        # Only what fits is parsed: if that does not end this head, the rest is never read.
        head = self.heads_begun
        self.head_bytes = self.max_head_bytes
        super().data_received(data[:room])
        if self.transport.is_closing():
            return
        if self.reading_head and self.heads_begun == head:
            self.send_431_response()
            return
        self.data_received(data[room:])

    def on_headers_complete(self) -> None:
        self.reading_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.reading_head = True
        self.head_bytes = 0
        self.heads_begun += 1

    def send_431_response(self) -> None:
        """As uvicorn answers a request it cannot parse (``send_400_response``): the status,
        a plain-text reason, and the connection closed."""
        self.logger.warning("Request line and headers over %d bytes.", self.max_head_bytes)
        content = [STATUS_LINE[431]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: text/plain; charset=utf-8\r\n",
                b"content-length: " + str(len(TOO_LARGE_MESSAGE)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                TOO_LARGE_MESSAGE,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()


class UvicornWorker(BaseUvicornWorker):
    """gunicorn's uvicorn worker on the protocol above (and uvloop, as ``auto`` picks it)."""

    CONFIG_KWARGS = {"loop": "auto", "http": HeadLimitedHttpToolsProtocol}
