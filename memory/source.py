"""The ``memory`` source kind: recall the user's memories, judge (optional), reflect, inject.

A memory failure never refuses the request: the source may only ``skip`` or ``warn``, and the
outcome (``used``, ``missing``, ``filtered``, ``unavailable``, ...) lands in the replay record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from asgiref.sync import sync_to_async
from django.db import DatabaseError
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memory.fusion import POOL_PER_SIDE, fuse_by_rank
from memory.metrics import MEMORY_RETRIEVAL
from memory.reflection import RecalledMemory, ReflectionConfig, injected_text, reflect
from memory.store import RecallMode
from memory.stores import get_store
from memory.stores.engines import IndexRef
from sources.base import (
    ContextItem,
    ContextRequest,
    ContextSource,
    PrewarmSkipped,
    ResolvedTurn,
    SourceFailed,
    SourceResult,
    SourceSettings,
    register_source_kind,
)
from sources.deadline import within_deadline
from sources.embedding import get_embedder
from sources.matching import AppliedRecall, MatchConfig, RecallConfig, judge_and_keep, memory_recall
from sources.rag.vector_configs import (
    LITE_FILE,
    LOCAL_DIRECTORY,
    REMOTE_SCHEMES,
    server_or_local_name,
)
from sources.recall import RecallHit

if TYPE_CHECKING:
    from memory.prewarm import MemoryPool
    from memory.selectors import MemoryHit

TOUCH_DEADLINE_S = 0.25
logger = logging.getLogger("contextplatform.memory")


class MemoryStoreConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Where the source recalls: PostgreSQL (the memories' own table), or an index of them in
    # Milvus or Qdrant (memory.stores.external), named as the rag backends name their server.
    backend: Literal["postgres", "milvus", "qdrant"] = Field(
        default="postgres",
        description="where recall runs: postgres (default), milvus or qdrant; the memories "
        "themselves are always kept in PostgreSQL",
    )
    uri: str | None = Field(
        default=None,
        max_length=2000,
        description="milvus: a Milvus server (http://, https://, tcp://) or a Milvus Lite file "
        "name (memories.db); none: the platform's Milvus",
    )
    url: str | None = Field(
        default=None,
        max_length=2000,
        description="qdrant: a Qdrant server (http://, https://) or a local-mode directory name; "
        "none: the platform's Qdrant",
    )

    auto: bool | None = Field(
        default=None,
        description="write the turn after the response; unset: off unless the request asks",
    )
    extractor: str = Field(default="local", description='"local" or an LLM deployment name')
    # The seed's store defaults: what a match block that writes no min_similarity / top_k recalls
    # with. Unset: the embedder's (sources.embedding.EmbedderDefaults), since thresholds are
    # specific to the embedding model.
    default_similarity_threshold: float | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        description="the recall's min_similarity where the match block writes none; "
        "unset: the embedder's default",
    )
    default_retrieval_limit: int | None = Field(
        default=None,
        ge=1,
        le=500,
        description="the recall's top_k where the match block writes none; "
        "unset: the embedder's default",
    )

    @field_validator("uri")
    @classmethod
    def milvus_uri(cls, value: str | None) -> str | None:
        return server_or_local_name(
            value,
            (*REMOTE_SCHEMES, "tcp://"),
            LITE_FILE,
            "a Milvus server URL (http://, https://, tcp://) or the name of a Milvus Lite file "
            "such as memories.db (no directory: the platform keeps each tenant's files)",
        )

    @field_validator("url")
    @classmethod
    def qdrant_url(cls, value: str | None) -> str | None:
        return server_or_local_name(
            value,
            REMOTE_SCHEMES,
            LOCAL_DIRECTORY,
            "a Qdrant server URL (http://, https://) or the name of a local-mode directory "
            "such as memories (no path: the platform keeps each tenant's directories)",
        )

    @model_validator(mode="after")
    def address_of_its_backend(self) -> MemoryStoreConfig:
        if self.uri is not None and self.backend != "milvus":
            raise ValueError("store.uri: only a milvus store takes a uri (qdrant takes url)")
        if self.url is not None and self.backend != "qdrant":
            raise ValueError("store.url: only a qdrant store takes a url (milvus takes uri)")
        return self

    @property
    def index(self) -> IndexRef | None:
        """The external index recalled through, or None for PostgreSQL."""
        if self.backend == "postgres":
            return None
        return IndexRef(self.backend, (self.uri if self.backend == "milvus" else self.url) or "")


def default_memory_match() -> MatchConfig:
    """Recall only, with nothing written: the store's defaults, else the embedder's."""
    return MatchConfig(recall=RecallConfig())


class MemorySettings(SourceSettings):
    type: Literal["memory"] = "memory"
    priority: int = Field(default=70, ge=0, le=1000)
    match: MatchConfig | None = None
    # Written true: the classic fusion of ``hybrid_mode`` over the embedding pool; written false:
    # by embedding only. Unwritten (with no ``match.recall.method`` written either): the store's
    # hybrid recall, embedding and any-word text fused by rank (memory.stores.postgres).
    hybrid_search: bool = False
    hybrid_mode: Literal["weighted", "rrf"] = "weighted"
    reflection: ReflectionConfig = Field(default_factory=ReflectionConfig)
    store: MemoryStoreConfig = Field(default_factory=MemoryStoreConfig)

    @model_validator(mode="after")
    def never_blocks(self) -> MemorySettings:
        if self.on_failure == "block":
            raise ValueError(
                "on_failure: a memory failure never refuses the request; use skip or warn"
            )
        return self


def unavailable(reason: str) -> dict[str, str]:
    return {"memory_status": "unavailable", "memory_reason": reason}


def wants_write(settings: MemorySettings, requested: bool | None) -> bool:
    """A request may turn the write off, and on only where the route leaves ``store.auto`` unset."""
    if requested is False:
        return False
    if settings.store.auto is not None:
        return settings.store.auto
    return bool(requested)


@register_source_kind
class MemorySource(ContextSource):
    type = "memory"
    Settings = MemorySettings
    previewable = True
    # The user's memories are read ahead (memory/prewarm.py); the turn's query ranks them.
    prewarmable = True

    @property
    def memory(self) -> MemorySettings:
        return self.settings  # type: ignore[return-value]

    @property
    def match(self) -> MatchConfig:
        return self.memory.match or default_memory_match()

    @property
    def judge_only_limit(self) -> int:
        """How many of the newest memories a match block without a recall hands its judge."""
        return self.match.judge.max_candidates if self.match.judge else 64

    @property
    def recall_mode(self) -> RecallMode:
        """How the store recalls: what the route writes (``hybrid_search``, else the recall's
        ``method``), else the store's default, hybrid."""
        if self.memory.hybrid_search or "hybrid_search" in self.memory.model_fields_set:
            return "hybrid" if self.memory.hybrid_search else "dense"
        recall = self.match.recall
        if recall is not None and "method" in recall.model_fields_set:
            return {"embedding": "dense", "bm25": "lexical", "hybrid": "hybrid"}[recall.method]  # type: ignore[return-value]
        return "hybrid"

    def applied_recall(self, recall: RecallConfig) -> AppliedRecall:
        """The recall's values: the match block's, else the store's defaults, else the
        embedder's (each with where it came from, for the notes)."""
        store = self.memory.store
        return memory_recall(
            recall,
            get_embedder(),
            store_threshold=store.default_similarity_threshold,
            store_limit=store.default_retrieval_limit,
        )

    async def fetch(self, request: ContextRequest) -> SourceResult:
        return await self.remembered(request, self.recall)

    async def prewarm(self, request: ContextRequest) -> MemoryPool:
        from memory.prewarm import POOL_MAX, load_pool

        if not request.user:
            raise PrewarmSkipped("no user")
        if self.memory.store.index is not None:
            raise PrewarmSkipped(f"the {self.memory.store.backend} store recalls at the turn")
        if self.memory.hybrid_search:
            raise PrewarmSkipped("hybrid_search ranks by the store's full text at the turn")
        if self.recall_mode == "lexical" and self.match.recall is not None:
            raise PrewarmSkipped("lexical recall ranks by the store's full text at the turn")
        user = request.user
        pool = await sync_to_async(within_deadline)(self.timeout_seconds, lambda: load_pool(user))
        if pool is None:
            raise PrewarmSkipped(f"the user has more than {POOL_MAX} memories")
        return pool

    async def fetch_prewarmed(self, request: ContextRequest, warm: Any) -> SourceResult:
        if warm.user != request.user:  # never another user's memories, whatever the cache held
            raise RuntimeError("a pre-warmed memory pool of another user")

        async def from_pool(request: ContextRequest) -> list[RecallHit]:
            return await self.recall_from_pool(request, warm)

        return await self.remembered(request, from_pool)

    async def remembered(
        self,
        request: ContextRequest,
        recall: Callable[[ContextRequest], Awaitable[list[RecallHit]]],
    ) -> SourceResult:
        notes: dict[str, Any] = {"backend": self.memory.store.backend}
        if not request.user:
            return self.outcome(notes, "missing", "no user on the request")
        if not request.query.strip():
            return self.outcome(notes, "missing", "no user query")
        if self.match.recall is not None:
            notes.update(self.applied_recall(self.match.recall).notes())
        try:
            hits = await recall(request)
        except Exception as error:
            MEMORY_RETRIEVAL.labels(backend=self.memory.store.backend, status="error").inc()
            raise SourceFailed(
                error, {**notes, **unavailable(f"{type(error).__name__}: {error}"[:300])}
            ) from error
        if not hits:
            return self.outcome(notes, "missing", "no memory above the threshold")
        result = await judge_and_keep(
            request.query,
            hits,
            self.match.judge,
            request,
            ranked_recall=self.match.recall is not None,
        )
        judged = [d for d in result.decisions if d.kept]
        recalled = [
            RecalledMemory(
                id=int(d.hit.document_id),
                content=d.hit.text,
                kind=d.hit.metadata.get("kind", "fact"),
                score=d.judge_score if d.judge_score is not None else (d.hit.cosine or d.hit.score),
                updated_at=d.hit.metadata["updated_at"],
                embedding=d.hit.metadata.get("embedding"),
                observed_at=d.hit.metadata.get("observed_at"),
            )
            for d in judged
        ]
        gate = reflect(recalled, self.memory.reflection, now=timezone.now())
        kept = [g for g in gate if g.kept]
        trace = [
            {
                "memory_id": g.memory.id,
                "recall_score": round(g.memory.score, 6),
                "adjusted_score": round(g.adjusted_score, 6),
                "kept": g.kept,
                "reason": g.reason,
            }
            for g in gate
        ] + [
            {
                "memory_id": int(d.hit.document_id),
                "recall_score": round(d.hit.score, 6),
                "kept": False,
                "reason": d.reason,
            }
            for d in result.decisions
            if not d.kept
        ]
        notes.update(result.judge_notes())
        if not kept:
            return self.outcome(
                notes, "filtered", "every recalled memory was filtered", trace=trace
            )
        if not request.dry_run and not await self.mark_used([g.memory.id for g in kept]):
            notes["memory_touch"] = "skipped: the memory table was busy"
        items = [
            self.item(
                injected_text(g.memory),  # dated: "(2026-11-03) User moved to Lisbon"
                score=round(g.adjusted_score, 6),
                metadata={"memory_id": g.memory.id, "kind": g.memory.kind},
            )
            for g in kept
        ]
        return self.outcome(notes, "used", None, items, trace=trace)

    def notes_on_timeout(self) -> dict[str, Any]:
        # Cancelled while the store (or the judge after it) had not answered.
        return {
            "backend": self.memory.store.backend,
            **unavailable("the memory store did not answer in time"),
        }

    async def mark_used(self, ids: list[int]) -> bool:
        """Reinforce what was recalled, if the table lets us soon: it is worth less than the
        answer, so a busy table costs a note (False), not the memories or the source's deadline."""
        from memory.services import touch_used

        deadline = min(TOUCH_DEADLINE_S, self.timeout_seconds / 4)
        try:
            await sync_to_async(within_deadline)(deadline, lambda: touch_used(ids))
        except DatabaseError as error:
            logger.warning("memory_touch_skipped", extra={"memories": len(ids), "err": str(error)})
            return False
        return True

    def outcome(
        self,
        notes: dict[str, Any],
        status: str,
        reason: str | None,
        items: list[ContextItem] | None = None,
        *,
        trace: list[dict[str, Any]] | None = None,
    ) -> SourceResult:
        items = items or []
        MEMORY_RETRIEVAL.labels(
            backend=self.memory.store.backend, status="hit" if items else "miss"
        ).inc()
        notes["memory_status"] = status
        notes["memory_result_count"] = len(items)
        if reason:
            notes["memory_reason"] = reason
        return SourceResult(items, trace or [], notes)

    def after_resolve(self, turn: ResolvedTurn) -> bool:
        """Queue the turn's memory write, to run once the answer is handed back. One write per
        turn whatever the number of memory sources: the first that wants it queues it."""
        from memory.writing import queue_turn

        settings: MemorySettings = self.settings  # type: ignore[assignment]
        if not turn.user or not wants_write(settings, turn.store_requested):
            return False
        queue_turn(
            resolve_id=turn.resolve_id,
            route=turn.route,
            user=turn.user,
            user_text=turn.user_text,
            extractor=settings.store.extractor,
            key_id=turn.key_id,
        )
        return True

    @classmethod
    def after_response(cls, resolve_id: str, answer: str) -> bool:
        from memory.writing import hand_back

        return hand_back(resolve_id=resolve_id, assistant_text=answer)

    async def recall(self, request: ContextRequest) -> list[RecallHit]:
        store = get_store(self.memory.store.index)
        recall = self.match.recall
        if recall is None:  # a judge-only block reads the user's newest memories
            limit = self.judge_only_limit
            memories = await sync_to_async(within_deadline)(
                self.timeout_seconds, lambda: store.newest(request.user, limit, request.as_of)
            )
            return [recall_hit(m, score=1.0) for m in memories]
        applied = self.applied_recall(recall)
        vector = await asyncio.to_thread(get_embedder().embed_query, request.query)
        found = await sync_to_async(within_deadline)(
            self.timeout_seconds,
            lambda: store.recall(
                request.user,
                request.query,
                vector,
                applied.top_k,
                mode=self.recall_mode,
                min_similarity=applied.min_similarity,
                fusion=self.memory.hybrid_mode if self.memory.hybrid_search else None,
                as_of=request.as_of,
            ),
        )
        hits = [recall_hit(hit, score=hit.score) for hit in found]
        return self.floored(hits, applied) if not self.memory.hybrid_search else hits

    def floored(self, hits: list[RecallHit], applied: AppliedRecall) -> list[RecallHit]:
        """A threshold the route or the store writes is a floor on every memory's cosine, text
        matches included; the embedder's own default only drops what the text did not find."""
        if self.recall_mode != "hybrid" or applied.min_similarity_from == "embedder":
            return hits
        return [hit for hit in hits if (hit.cosine or 0.0) >= applied.min_similarity]

    async def recall_from_pool(self, request: ContextRequest, pool: MemoryPool) -> list[RecallHit]:
        """``recall`` over the user's pre-warmed memories instead of the store."""
        from memory import prewarm

        recall = self.match.recall
        if recall is None:
            return [recall_hit(m, score=1.0) for m in prewarm.newest(pool, self.judge_only_limit)]
        applied = self.applied_recall(recall)
        vector = await asyncio.to_thread(get_embedder().embed_query, request.query)
        if self.recall_mode == "dense":
            found = prewarm.search(pool, vector, applied.top_k, applied.min_similarity)
            return [recall_hit(hit, score=hit.score) for hit in found]
        # Hybrid: the embedding's side from the pool, the text's from the store (its full-text
        # rank is the store's), fused as the store fuses them.
        side = max(POOL_PER_SIDE, applied.top_k)
        lexical = await sync_to_async(within_deadline)(
            self.timeout_seconds,
            lambda: get_store(self.memory.store.index).recall(
                request.user, request.query, vector, side, mode="lexical", as_of=request.as_of
            ),
        )
        dense = prewarm.search(pool, vector, side, -1.0)
        found = fuse_by_rank(dense, lexical, applied.top_k, applied.min_similarity, vector)
        return self.floored([recall_hit(hit, score=hit.score) for hit in found], applied)


def recall_hit(hit: MemoryHit, score: float) -> RecallHit:
    """A recalled memory in the match block's shape (the embedding rides along for dedup)."""
    return RecallHit(
        chunk_id=None,
        document_id=str(hit.id),
        title="",
        text=hit.content,
        collection="memory",
        metadata={
            "kind": hit.kind,
            "updated_at": hit.updated_at,
            "observed_at": hit.observed_at,
            "embedding": hit.embedding,
        },
        cosine=hit.cosine,
        bm25=hit.lexical,
        score=score,
    )
