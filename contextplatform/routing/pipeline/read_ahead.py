"""Sources read ahead on the request's thread: a kind whose fetch is one read of the tenant's
database (``reads_ahead``: the user's profile, the session's turns) is read here, synchronously,
before the other sources are fetched, and its fetch is served from what was read.

From the event loop the same read was a trip to the request's thread (its connection carries the
tenant's schema) and back, which under load cost more CPU than the read itself: two such sources
made the demo route's resolve a quarter dearer. These reads ran one after another on that thread
before as well; what changes is that the other sources start after them (a fraction of a
millisecond for reads that answer at once). The source's report is the fetch's: its time starts
at the read, a read that fails fails the source as its fetch would, and one that ends past the
source's deadline is reported timed out, as a fetch cut there is.
"""

from __future__ import annotations

import builtins
import time
from typing import Any

from contextplatform.routing.pipeline.prewarmed import PrewarmedSource, wrapper_of_kind
from sources.base import ContextRequest, ContextSource, SourceResult
from sources.fetch import DeadlinePassed


class ReadAheadSource(PrewarmedSource):
    """A source served from its read on the request's thread (or failed with that read)."""

    def __init__(
        self,
        inner: ContextSource,
        read: Any,
        error: Exception | None,
        started_at: float,
        took: float,
    ):
        super().__init__(inner, read)
        self.error = error
        self.read_started_at = started_at
        self.took = took

    async def fetch(self, request: ContextRequest) -> SourceResult:
        if self.took >= self.timeout_seconds:
            raise DeadlinePassed
        if self.error is not None:
            raise self.error
        return await super().fetch(request)


def read_ahead(sources: list[ContextSource], request: ContextRequest) -> list[ContextSource]:
    """``sources`` with those whose kind reads ahead read now, in order, and served from it."""
    return [
        _read(source, request) if source.reads_ahead and source.settings.enabled else source
        for source in sources
    ]


def _read(source: ContextSource, request: ContextRequest) -> ContextSource:
    read: Any = None
    error: Exception | None = None
    started_at = time.perf_counter()
    try:
        read = source.read_ahead(request)
    except Exception as failure:  # reported by the fetch, as the fetch's own failure would be
        error = failure
    took = time.perf_counter() - started_at
    wrapper = wrapper_of_kind(ReadAheadSource, builtins.type(source))
    return wrapper(source, read, error, started_at, took)
