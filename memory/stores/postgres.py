"""The memory store on PostgreSQL: pgvector for the embedding, the ``search_vector`` GIN index for
the text, each user's rows read through ``live_memories`` (so every filter on what is live, such as
expiry, is written once there).

The default recall is hybrid, because natural questions rarely repeat the words or the meaning of
the statement that answers them closely enough for one retriever alone: the nearest memories by
cosine and the best text matches over *any* of the question's content words (an OR query, as BM25
reads a question: an AND query misses most questions, whose words the answer never all holds),
each word weighed by how rare it is among the user's memories (memory.lexical), are fused by
reciprocal rank (memory.fusion).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from datetime import datetime
from functools import reduce
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import connection
from django.db.models import Case, Count, F, FloatField, Q, QuerySet, Value, When

from memory.fusion import POOL_PER_SIDE, fuse_ranks, scored
from memory.lexical import content_words, idf
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
)
from memory.store import Fusion, RecallMode
from sources.embedding import Embedder

DUPLICATE_ROOM = 3


def lexical_recall(
    user_id: str, query: str, k: int, as_of: datetime | None = None
) -> list[MemoryHit]:
    """The user's ``k`` live memories best matching the query's content words, each word weighed
    by how rare it is among them (``weighted_text_ranking``), each hit with that weight as its
    text score."""
    live = live_memories(user_id, as_of)
    ranking = weighted_text_ranking(live, query, k)
    rows = {
        row["id"]: row for row in live.filter(id__in=[i for i, _ in ranking]).values(*HIT_FIELDS)
    }
    hits = []
    for memory_id, weight in ranking:
        if memory_id in rows:
            hit = hit_from_row(rows[memory_id])
            hit.lexical = weight
            hits.append(hit)
    return hits


def lexemes(words: list[str]) -> list[str]:
    """The words as the text configuration indexes them: stemmed, stop words dropped, once each."""
    if not words:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lexeme FROM unnest(to_tsvector(%s::regconfig, %s)) ORDER BY lexeme",
            [TEXT_CONFIG, " ".join(words)],
        )
        return [row[0] for row in cursor.fetchall()]


def lexeme_query(lexeme: str) -> SearchQuery:
    """A query for one indexed lexeme as it is (no second stemming)."""
    quoted = "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"
    return SearchQuery(quoted, config="simple", search_type="raw")


def weighted_text_ranking(live: QuerySet[Memory], query: str, k: int) -> list[tuple[int, float]]:
    """The ``k`` memories of ``live`` holding the most of the query's content words, each word
    weighed by its inverse document frequency among ``live`` (memory.lexical), ties by
    ``ts_rank_cd``: (id, summed weight), best first."""
    terms = lexemes(content_words(query))
    if not terms or k <= 0:
        return []
    queries = [lexeme_query(term) for term in terms]
    anyone = reduce(operator.or_, queries)
    matching = live.filter(search_vector=anyone)
    counts = matching.aggregate(
        **{f"t{i}": Count("id", filter=Q(search_vector=q)) for i, q in enumerate(queries)}
    )
    total = live.count()
    weights = [idf(total, counts[f"t{i}"]) for i in range(len(queries))]
    score = reduce(
        operator.add,
        [
            Case(
                When(search_vector=q, then=Value(w)), default=Value(0.0), output_field=FloatField()
            )
            for q, w in zip(queries, weights, strict=True)
        ],
    )
    return [
        (memory_id, float(weight))
        for memory_id, weight in matching.annotate(
            weight=score, rank=SearchRank(F("search_vector"), anyone, cover_density=True)
        )
        .order_by("-weight", "-rank", "id")
        .values_list("id", "weight")[:k]
    ]


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
    # The text's cosines: of the few read below, not of every match.
    lexical: list[tuple[int, float | None, float]] = [
        (memory_id, None, weight) for memory_id, weight in weighted_text_ranking(live, query, side)
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
