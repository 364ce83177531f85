"""Pre-warm on session open (Relay-E: "fetch profile & recent messages while the user is typing").

``prewarm_session`` fetches the route's prewarmable sources now, for one user and session, each
under its own deadline, and keeps what they read in the session's pre-warm cache
(``sources.prewarm``) for ``CONTEXT_PREWARM_TTL_SECONDS``; the next resolve of that session and
user serves them from it (``pipeline/prewarmed.py``). A kind is prewarmable when its fetch reads
what the user or the session holds rather than what the turn asks (``ContextSource.prewarmable``):
``user_profile``, ``recent_messages``, ``memory`` (the user's memories, ranked by the turn's query
at the resolve: ``memory/prewarm.py``). A source that fails or times out here is simply fetched
at the resolve, where its ``on_failure`` applies.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sources import fetch_deadline
from sources.base import ContextRequest, ContextSource, PrewarmSkipped
from sources.fetch import failure_text

if TYPE_CHECKING:
    pass

logger = logging.getLogger("contextplatform.sources")

NOT_PREWARMABLE = "its fetch reads the turn's query; fetched at the resolve"


@dataclass
class Prewarmed:
    """One source's line in the pre-warm's answer."""

    source: ContextSource
    status: str  # prewarmed | skipped | failed | timeout
    ms: float = 0.0
    reason: str | None = None
    state: Any = None

    def report(self) -> dict[str, Any]:
        return {
            "name": self.source.name,
            "type": self.source.type,
            "status": self.status,
            "ms": round(self.ms, 2),
            **({"reason": self.reason} if self.reason else {}),
        }


async def prewarm_one(source: ContextSource, request: ContextRequest) -> Prewarmed:
    started = time.perf_counter()
    seconds = source.timeout_seconds
    with fetch_deadline.running(seconds):
        reading = asyncio.ensure_future(source.prewarm(request))
    try:
        state = await asyncio.wait_for(reading, timeout=seconds)
        line = Prewarmed(source, "prewarmed", state=state)
    except PrewarmSkipped as skipped:
        line = Prewarmed(source, "skipped", reason=str(skipped))
    except TimeoutError:
        line = Prewarmed(source, "timeout", reason=f"timed out after {seconds * 1000:.0f} ms")
    except asyncio.CancelledError:
        raise
    except Exception as error:  # fetched at the resolve instead, where on_failure decides
        line = Prewarmed(source, "failed", reason=failure_text(error))
    line.ms = (time.perf_counter() - started) * 1000
    return line


async def prewarm_all(sources: list[ContextSource], request: ContextRequest) -> list[Prewarmed]:
    return list(await asyncio.gather(*(prewarm_one(s, request) for s in sources)))
