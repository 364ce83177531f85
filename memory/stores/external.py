"""The memory store over an external index (Milvus or Qdrant): the engine ranks, PostgreSQL holds.

Recall asks the tenant's index (``memory.stores.sync.ready``) for the user's nearest memories and,
for the lexical side, the best BM25 matches of the question's words; the hits are then read from
PostgreSQL through ``live_memories`` (the user's own, live at ``as_of``), so the engine narrows
what is read and never decides what is returned. The modes and the fusion are PostgreSQL's own
(``memory.stores.postgres``, ``memory.fusion``, ``memory.selectors.hybrid_search``), so a route
recalls the same way whichever store it names. Everything else (newest, write, list, erase) is
PostgreSQL's: the memories' system of record, whose writes reach the index (``sync``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memory.fusion import POOL_PER_SIDE, fuse_ranks, scored
from memory.models import Memory
from memory.selectors import (
    CANDIDATES_PER_RESULT,
    HIT_FIELDS,
    HYBRID_MODES,
    MIN_CANDIDATES,
    MemoryHit,
    MemoryPage,
    cosine,
    hit_from_row,
    live_memories,
    require_user,
)
from memory.store import Fusion, RecallMode
from memory.stores import sync
from memory.stores.engines import EngineIndex, IndexRef, words
from memory.stores.postgres import DUPLICATE_ROOM, PostgresMemoryStore
from sources.embedding import Embedder
from sources.fusion import reciprocal_rank, weighted


class ExternalMemoryStore:
    def __init__(self, ref: IndexRef) -> None:
        self.ref = ref
        self.name = ref.backend
        self.rows = PostgresMemoryStore()

    def read(
        self, user_id: str, ids: Sequence[int], as_of: datetime | None
    ) -> dict[int, MemoryHit]:
        """The engine's hits as PostgreSQL holds them: the user's, live (the rest left out)."""
        if not ids:
            return {}
        rows = live_memories(user_id, as_of).filter(id__in=list(ids)).values(*HIT_FIELDS)
        return {row["id"]: hit_from_row(row) for row in rows}

    def recall(
        self,
        user_id: str,
        query: str,
        vector: Sequence[float],
        limit: int,
        *,
        mode: RecallMode = "hybrid",
        min_similarity: float = -1.0,
        fusion: Fusion | None = None,
        as_of: datetime | None = None,
    ) -> list[MemoryHit]:
        require_user(user_id)
        if limit <= 0:
            return []
        if mode not in ("dense", "lexical", "hybrid"):
            raise ValueError(f"mode must be one of dense, lexical, hybrid, not {mode!r}")
        index = sync.ready(self.ref)
        if mode == "dense":
            return self.dense(index, user_id, vector, limit, min_similarity, as_of)
        if mode == "lexical":
            return self.lexical(index, user_id, query, vector, limit, as_of)
        if fusion is not None:
            return self.classic(index, user_id, query, vector, limit, min_similarity, fusion, as_of)
        return self.fused(index, user_id, query, vector, limit, min_similarity, as_of)

    def dense(
        self,
        index: EngineIndex,
        user_id: str,
        vector: Sequence[float],
        limit: int,
        min_similarity: float,
        as_of: datetime | None,
    ) -> list[MemoryHit]:
        found = index.dense(user_id, vector, limit, as_of)
        rows = self.read(user_id, [i for i, _ in found], as_of)
        hits = []
        for memory_id, _ in found:
            hit = rows.get(memory_id)
            if hit is None:
                continue
            hit.cosine = hit.score = cosine(hit.embedding, vector)
            if hit.cosine >= min_similarity:
                hits.append(hit)
        hits.sort(key=lambda hit: (-(hit.cosine or 0.0), hit.id))
        return hits

    def lexical(
        self,
        index: EngineIndex,
        user_id: str,
        query: str,
        vector: Sequence[float],
        limit: int,
        as_of: datetime | None,
    ) -> list[MemoryHit]:
        found = index.lexical(user_id, words(query), limit, as_of)
        rows = self.read(user_id, [i for i, _ in found], as_of)
        hits = []
        for memory_id, score in found:
            hit = rows.get(memory_id)
            if hit is not None:
                hit.lexical = hit.score = score
                hit.cosine = cosine(hit.embedding, vector)
                hits.append(hit)
        return hits

    def fused(
        self,
        index: EngineIndex,
        user_id: str,
        query: str,
        vector: Sequence[float],
        limit: int,
        min_similarity: float,
        as_of: datetime | None,
    ) -> list[MemoryHit]:
        """The default hybrid, as PostgreSQL's ``fused_recall``: each side's pool from the
        engine, fused by rank, the rows read for the best few."""
        side = max(POOL_PER_SIDE, limit)
        dense = index.dense(user_id, vector, side, as_of)
        lexical: list[tuple[int, float | None, float]] = [
            (memory_id, None, score)
            for memory_id, score in index.lexical(user_id, words(query), side, as_of)
        ]
        fused = fuse_ranks(dense, lexical, min_similarity)
        hits: dict[int, MemoryHit] = {}
        read, batch = 0, DUPLICATE_ROOM * limit
        while True:
            hits.update(self.read(user_id, [f.id for f in fused[read : read + batch]], as_of))
            read += batch
            found = scored(fused[:read], hits, limit, vector)
            if len(found) >= limit or read >= len(fused):
                return found
            batch *= 2

    def classic(
        self,
        index: EngineIndex,
        user_id: str,
        query: str,
        vector: Sequence[float],
        limit: int,
        min_similarity: float,
        fusion: Fusion,
        as_of: datetime | None,
    ) -> list[MemoryHit]:
        """The classic hybrid (``memory.selectors.hybrid_search``): the pool of both sides, the
        threshold on every candidate's cosine, ``weighted`` or ``rrf`` over cosine and BM25."""
        if fusion not in HYBRID_MODES:
            raise ValueError(f"hybrid_mode must be one of {', '.join(HYBRID_MODES)}")
        pool = max(MIN_CANDIDATES, CANDIDATES_PER_RESULT * limit)
        texts = dict(index.lexical(user_id, words(query), pool, as_of))
        ids = [memory_id for memory_id, _ in index.dense(user_id, vector, pool, as_of)]
        ids += [memory_id for memory_id in texts if memory_id not in set(ids)]
        rows = self.read(user_id, ids, as_of)
        hits = []
        for memory_id in ids:
            hit = rows.get(memory_id)
            if hit is None:
                continue
            hit.cosine = cosine(hit.embedding, vector)
            hit.lexical = texts.get(memory_id, 0.0)
            if hit.cosine >= min_similarity:
                hits.append(hit)
        cosines = [hit.cosine or 0.0 for hit in hits]
        lexical = [hit.lexical or 0.0 for hit in hits]
        scores = (
            weighted(cosines, lexical)
            if fusion == "weighted"
            else reciprocal_rank(cosines, lexical)
        )
        for hit, score in zip(hits, scores, strict=True):
            hit.score = score
        hits.sort(key=lambda hit: (-hit.score, -(hit.cosine or 0.0), hit.id))
        return hits[:limit]

    def newest(self, user_id: str, limit: int, as_of: datetime | None = None) -> list[MemoryHit]:
        return self.rows.newest(user_id, limit, as_of)

    def write(self, *, user_id: str, content: str, embedder: Embedder, **fields: Any) -> Memory:
        return self.rows.write(user_id=user_id, content=content, embedder=embedder, **fields)

    def list(
        self, user_id: str, q: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> MemoryPage:
        return self.rows.list(user_id, q=q, limit=limit, cursor=cursor)

    def erase(self, user_id: str) -> int:
        return self.rows.erase(user_id)
