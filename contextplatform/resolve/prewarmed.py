"""The resolve's side of pre-warm: sources a session pre-warmed are served from what was read.

Before the fetch, one cache read (``sources.prewarm.lookup``) finds the session's entry, when the
resolve names a user and a session and the route has a prewarmable source; each source whose
kind and settings were pre-warmed is fetched through ``fetch_prewarmed`` with what its
``prewarm`` read, under its own deadline, logged and counted like any fetch. The report and the
replay record say ``prewarmed: true`` in that source's entry. Previews never use them (they show
what the sources return now).
"""

from __future__ import annotations

import builtins
import functools
from typing import Any

from sources.base import ContextRequest, ContextSource, SourceResult, SourceSettings
from sources.prewarm import fingerprint, lookup


class PrewarmedSource(ContextSource):
    """A source fetched from its pre-warmed state: the same name, kind, settings and deadline."""

    type = "prewarmed"
    Settings = SourceSettings

    def __init__(self, inner: ContextSource, warm: Any):
        super().__init__(inner.settings, default_timeout_ms=inner.default_timeout_ms)
        self.inner = inner
        self.warm = warm

    async def fetch(self, request: ContextRequest) -> SourceResult:
        return await self.inner.fetch_prewarmed(request, self.warm)

    def notes_on_timeout(self) -> dict[str, Any]:
        return self.inner.notes_on_timeout()


@functools.cache
def prewarmed_kind(kind: builtins.type[ContextSource]) -> builtins.type[PrewarmedSource]:
    """The wrapper of one kind, carrying its ``type`` (metrics and logs name the real kind)."""
    return builtins.type(
        f"Prewarmed{kind.__name__}",
        (PrewarmedSource,),
        {"type": kind.type, "Settings": kind.Settings, "prewarmable": True},
    )


def with_prewarmed(
    sources: list[ContextSource], request: ContextRequest
) -> tuple[list[ContextSource], frozenset[str]]:
    """``sources`` with those this session pre-warmed served from their state, and their names."""
    if request.dry_run or not (request.user and request.session):
        return sources, frozenset()
    if not any(s.prewarmable and s.settings.enabled for s in sources):
        return sources, frozenset()
    states = lookup(request.tenant, request.user, request.session)
    if not states:
        return sources, frozenset()
    served: list[ContextSource] = []
    names: set[str] = set()
    for source in sources:
        key = fingerprint(source) if source.prewarmable and source.settings.enabled else None
        if key is not None and key in states:
            served.append(prewarmed_kind(builtins.type(source))(source, states[key]))
            names.add(source.name)
        else:
            served.append(source)
    return served, frozenset(names)
