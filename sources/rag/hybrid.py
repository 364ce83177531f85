"""The ``hybrid`` backend: a primary backend with an optional fallback.

``sequential`` (default) runs the fallback only after the primary fails or finds nothing;
``parallel`` starts both and answers with the primary as soon as it has documents.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from pydantic import BaseModel

from sources.judge_calibration import JudgeCalibration
from sources.matching import AppliedRecall
from sources.rag.backends import BackendError, RagBackend, RetrievalRequest
from sources.rag.config import BackendSpec, HybridConfig, validate_backend_config
from sources.recall import RecallHit

# Builds the backend of a validated backend config: ``sources.rag.source.build_backend``, handed
# in by it, since it is the one that knows every backend (and builds this one).
BackendBuilder = Callable[[BaseModel], RagBackend]


def build(spec: BackendSpec, build_backend: BackendBuilder) -> RagBackend:
    return build_backend(validate_backend_config(spec.backend, spec.backend_config))


class HybridBackend(RagBackend):
    name = "hybrid"

    def __init__(self, config: HybridConfig, build_backend: BackendBuilder):
        self.config = config
        self.primary = build(config.primary, build_backend)
        self.fallback = build(config.fallback, build_backend) if config.fallback else None
        self.served_by: str | None = None
        self.primary_error: str | None = None

    # No cache token (the base's None): one side may be an external service whose changes
    # cannot be seen, so a cached result lasts until its TTL.

    def judge_calibrations(self) -> dict[str, JudgeCalibration]:
        found = self.primary.judge_calibrations()
        if self.fallback is not None:
            found = {**self.fallback.judge_calibrations(), **found}
        return found

    def resolved(self, request: RetrievalRequest) -> RetrievalRequest:
        return request  # each side fills the unwritten values on its own scale (``side``)

    async def side(self, backend: RagBackend, request: RetrievalRequest) -> list[RecallHit]:
        return await backend.retrieve(backend.resolved(request))

    @property  # type: ignore[override]
    def applied(self) -> AppliedRecall | None:
        """The recall's values as the side that answered applied them."""
        side = {"primary": self.primary, "fallback": self.fallback}.get(self.served_by or "")
        return side.applied if side is not None else None

    async def retrieve(self, request: RetrievalRequest) -> list[RecallHit]:
        if self.fallback is None:
            self.served_by = "primary"
            return await self.side(self.primary, request)
        if self.config.strategy == "parallel":
            return await self.parallel(request)
        return await self.sequential(request)

    async def attempt_primary(self, request: RetrievalRequest) -> list[RecallHit]:
        try:
            return await self.side(self.primary, request)
        except Exception as error:  # the fallback exists for exactly this
            self.primary_error = f"{type(error).__name__}: {error}"
            return []

    async def sequential(self, request: RetrievalRequest) -> list[RecallHit]:
        hits = await self.attempt_primary(request)
        if hits:
            self.served_by = "primary"
            return hits
        assert self.fallback is not None
        self.served_by = "fallback"
        return await self.side(self.fallback, request)

    async def parallel(self, request: RetrievalRequest) -> list[RecallHit]:
        assert self.fallback is not None
        fallback_task = asyncio.ensure_future(self.side(self.fallback, request))
        try:
            hits = await self.attempt_primary(request)
            if hits:
                self.served_by = "primary"
                return hits
            self.served_by = "fallback"
            return await fallback_task
        finally:
            if not fallback_task.done():
                fallback_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, BackendError, Exception):
                    await fallback_task
