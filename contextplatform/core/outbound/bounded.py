"""The one bounded read of an outbound answer, over any HTTP library's body as an async iterator
of byte chunks: a declared length past the limit is refused before anything is read, and every
chunk counts against the limit as it arrives (the chunks the library hands over, decoded: the
limit holds after decompression). The same count serves as a budget over several answers
(``ByteBudget``) where one operation makes many calls (an MCP session)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping

from contextplatform.core.outbound.policy import OutboundError

DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024


class ResponseTooLarge(OutboundError):
    """The answer is larger than the caller accepts."""


class InvalidResponse(OutboundError):
    """The answer is not one the caller can use (not JSON, not 2xx, compressed where refused)."""


def _said(where: str, text: str) -> str:
    return f"{where} {text}" if where else text


class ByteBudget:
    """What may still be received: over one answer, or (``shared``) over all the answers of one
    operation, whose messages then speak of what it allowed."""

    def __init__(self, max_bytes: int, *, shared: bool = False) -> None:
        self.max_bytes = max_bytes
        self.received = 0
        self.limit = f"the {max_bytes} bytes allowed" if shared else f"{max_bytes} bytes"

    def check_declared(self, declared: int | None, where: str = "") -> None:
        if declared is not None and self.received + declared > self.max_bytes:
            raise ResponseTooLarge(
                _said(where, f"announced {declared} bytes, more than {self.limit}")
            )

    def spend(self, count: int, where: str = "") -> None:
        self.received += count
        if self.received > self.max_bytes:
            raise ResponseTooLarge(_said(where, f"answered more than {self.limit}"))


def declared_length(headers: Mapping[str, str]) -> int | None:
    """The answer's Content-Length, or None when it has none that is a number."""
    try:
        return int(headers["content-length"])
    except (KeyError, ValueError):
        return None


def refuse_compressed(headers: Mapping[str, str], where: str) -> None:
    """InvalidResponse for a compressed answer, where the bytes counted must be the bytes the
    caller decodes (a client that hands its body on undecoded)."""
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise InvalidResponse(f"{where} answered {encoding}-compressed content, refused")


async def counted(
    chunks: AsyncIterable[bytes], budget: ByteBudget, where: str = ""
) -> AsyncIterator[bytes]:
    """The chunks as they come, each spent from ``budget`` first (ResponseTooLarge past it)."""
    async for chunk in chunks:
        budget.spend(len(chunk), where)
        yield chunk


async def read_bounded(
    chunks: AsyncIterable[bytes],
    max_bytes: int,
    *,
    headers: Mapping[str, str] | None = None,
    where: str = "",
) -> bytes:
    """The whole body, at most ``max_bytes`` of it; ResponseTooLarge (naming ``where``) when the
    ``headers`` announce more or more arrives."""
    budget = ByteBudget(max_bytes)
    budget.check_declared(declared_length(headers or {}), where)
    body = bytearray()
    async for chunk in counted(chunks, budget, where):
        body.extend(chunk)
    return bytes(body)
