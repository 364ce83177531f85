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
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync

from contextplatform.resolve.resolver import build_sources
from contextplatform.routes.selectors import loaded_route
from sources import fetch_deadline
from sources.base import ContextRequest, ContextSource, PrewarmSkipped
from sources.fetch import failure_text
from sources.prewarm import fingerprint, generations, store, ttl_seconds

if TYPE_CHECKING:
    from tenants.models import Tenant

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


def prewarm_session(*, tenant: Tenant, route_name: str, user: str, session: str) -> dict[str, Any]:
    """Read the route's prewarmable sources ahead for ``user`` in ``session``; the answer lists
    every enabled source of the route with what became of it."""
    loaded = loaded_route(route_name)
    spec = loaded.spec
    schema = tenant.schema_name
    sources = [s for s in build_sources(spec) if s.settings.enabled] if spec.context.enabled else []
    request = ContextRequest(
        request_id=f"pwm_{secrets.token_hex(12)}",
        tenant=schema,
        route=loaded.route.name,
        user=user,
        session=session,
        query="",
        allowlist=tuple(tenant.outbound_allowlist),
        dry_run=True,  # reading ahead is no turn: nothing is reinforced or recorded
        judge_deployment=spec.model.upstream,
    )
    # Read before the fetch: a write landing while the sources read invalidates what they read.
    read_under = generations(schema, user, session)
    chosen = [s for s in sources if s.prewarmable]
    lines = {id(line.source): line for line in async_to_sync(prewarm_all)(chosen, request)}
    states = {
        fingerprint(line.source): line.state
        for line in lines.values()
        if line.status == "prewarmed"
    }
    if states:
        store(schema=schema, user=user, session=session, read_under=read_under, states=states)
    report = [
        lines[id(s)] if id(s) in lines else Prewarmed(s, "skipped", reason=NOT_PREWARMABLE)
        for s in sources
    ]
    logger.info(
        "context_prewarm",
        extra={
            "request_id": request.request_id,
            "tenant": schema,
            "route": request.route,
            "sources": len(states),
        },
    )
    return {
        "route": request.route,
        "session": session,
        "user": user,
        "ttl_seconds": ttl_seconds(),
        "sources": [line.report() for line in report],
    }
