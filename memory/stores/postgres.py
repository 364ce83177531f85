"""The memory store on PostgreSQL: pgvector for the embedding, the ``search_vector`` GIN index for
the text, each user's rows read through ``live_memories`` (so every filter on what is live, such as
expiry, is written once there).

The default recall is hybrid, because natural questions rarely repeat the words or the meaning of
the statement that answers them closely enough for one retriever alone: the nearest memories by
cosine and the best text matches over *any* of the question's content words (an OR query, as BM25
reads a question: an AND query misses most questions, whose words the answer never all holds;
the question's frame taken out, memory.lexical) are fused by reciprocal rank (memory.fusion).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db.models import F

from memory.fusion import POOL_PER_SIDE, fuse_ranks, scored
from memory.lexical import content_words
from memory.models import Memory
from memory.selectors import (
    HIT_FIELDS,
    TEXT_CONFIG,
    MemoryHit,
    MemoryPage,
    cosine,
    exact_distance,
    hit_from_row,
    list_memories,
    live_memories,
    newest_memories,
    require_user,
    search_memories,
    text_ranked,
)
from memory.store import Fusion, RecallMode
from sources.embedding import Embedder

DUPLICATE_ROOM = 3


def any_word_query(text: str) -> SearchQuery | None:
    """A text query matching a memory holding any of ``text``'s content words (the question's
    frame taken out, memory.lexical; stop words dropped by the text configuration, words
    stemmed); None for a text without one."""
    words = content_words(text)
    if not words:
        return None
    return SearchQuery(" or ".join(words), config=TEXT_CONFIG, search_type="websearch")


def lexical_recall(
    user_id: str, query: str, k: int, as_of: datetime | None = None
) -> list[MemoryHit]:
    """The user's ``k`` live memories best matching any of ``query``'s content words (ts_rank_cd,
    which counts how many of the words a memory holds and how close together)."""
    search = any_word_query(query)
    if search is None or k <= 0:
        return []
    return text_ranked(user_id, search, k, as_of)


def fused_recall(
    user_id: str,
    query: str,
    vector: Sequence[float],
    limit: int,
    min_similarity: float,
    as_of: datetime | None = None,
) -> list[MemoryHit]:
    """Dense and text candidates, ``POOL_PER_SIDE`` each, fused (memory.fusion). The two
    rankings read ids and scores only; the rows (with their embeddings, for the near-duplicates)
    are read for the best fused few alone: parsing a hundred embeddings cost more than both scans
    at 10,000 memories."""
    side = max(POOL_PER_SIDE, limit)
    live = live_memories(user_id, as_of)
    dense = [
        (memory_id, 1.0 - float(distance))
        for memory_id, distance in live.annotate(distance=exact_distance(vector))
        .order_by("distance", "id")
        .values_list("id", "distance")[:side]
    ]
    lexical: list[tuple[int, float | None, float]] = []
    search = any_word_query(query)
    if search is not None:  # the text's cosines: of the few read below, not of every match
        lexical = [
            (memory_id, None, float(rank))
            for memory_id, rank in live.filter(search_vector=search)
            .annotate(rank=SearchRank(F("search_vector"), search, cover_density=True))
            .order_by("-rank", "id")
            .values_list("id", "rank")[:side]
        ]
    fused = fuse_ranks(dense, lexical, min_similarity)
    # Read with room for the duplicates the collapse drops, and more while it drops too many.
    hits: dict[int, MemoryHit] = {}
    read, batch = 0, DUPLICATE_ROOM * limit
    while True:
        wanted = [f.id for f in fused[read : read + batch]]
        hits.update(
            (row["id"], hit_from_row(row)) for row in live.filter(id__in=wanted).values(*HIT_FIELDS)
        )
        read += batch
        found = scored(fused[:read], hits, limit, vector)
        if len(found) >= limit or read >= len(fused):
            return found
        batch *= 2


class PostgresMemoryStore:
    name = "postgres"

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
        if mode == "dense" or (mode == "hybrid" and fusion is not None):
            return search_memories(
                user_id=user_id,
                query=query,
                vector=vector,
                limit=limit,
                min_similarity=min_similarity,
                hybrid=mode == "hybrid",
                hybrid_mode=fusion or "weighted",
                as_of=as_of,
            )
        if mode == "lexical":
            hits = lexical_recall(user_id, query, limit, as_of)
            for hit in hits:
                hit.cosine = cosine(hit.embedding, vector)
                hit.score = hit.lexical or 0.0
            return hits
        if mode != "hybrid":
            raise ValueError(f"mode must be one of dense, lexical, hybrid, not {mode!r}")
        return fused_recall(user_id, query, vector, limit, min_similarity, as_of)

    def newest(self, user_id: str, limit: int, as_of: datetime | None = None) -> list[MemoryHit]:
        return newest_memories(user_id, limit, as_of)

    def write(self, *, user_id: str, content: str, embedder: Embedder, **fields: Any) -> Memory:
        from memory.services import create_memory

        return create_memory(user_id=user_id, content=content, embedder=embedder, **fields)

    def list(
        self, user_id: str, q: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> MemoryPage:
        return list_memories(user_id, q=q, limit=limit, cursor=cursor)

    def erase(self, user_id: str) -> int:
        from memory.services import erase_user

        return erase_user(user_id=user_id)
