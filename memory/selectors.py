"""Reads of memories. Every query names the user in its own WHERE clause: nothing is ever fetched
for several users and filtered afterwards.

A user's memories are few, so the user-scoped searches scan that user's rows exactly (through the
``user_id`` btree index) instead of going through the table-wide HNSW index.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np
from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db.models import (
    Case,
    Expression,
    ExpressionWrapper,
    F,
    FloatField,
    Q,
    QuerySet,
    Value,
    When,
)
from django.utils import timezone
from pgvector.django import CosineDistance

from memory.models import Memory
from sources.fusion import reciprocal_rank, weighted

HybridMode = Literal["weighted", "rrf"]
HYBRID_MODES: tuple[str, ...] = ("weighted", "rrf")
# Hybrid search asks each retriever for four candidates per result wanted, and at least 20, as
# vLLM Semantic Router's memory hybrid search does, so fusion has more than the final few to rank.
MIN_CANDIDATES = 20
CANDIDATES_PER_RESULT = 4
TEXT_CONFIG = "english"
HIT_FIELDS = (
    "id",
    "content",
    "kind",
    "metadata",
    "created_at",
    "updated_at",
    "last_used_at",
    "strength",
    "embedding",
    "observed_at",
)


class MemoryScopeError(ValueError):
    """A memory query without a user: refused, never run unscoped."""


def require_user(user_id: str) -> str:
    if not isinstance(user_id, str) or not user_id.strip():
        raise MemoryScopeError("a memory query needs a non-empty user_id")
    return user_id


@dataclass
class MemoryHit:
    id: int
    content: str
    kind: str
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    last_used_at: datetime | None
    strength: float
    cosine: float | None = None
    lexical: float | None = None  # ts_rank_cd of the text match, 0.0 when the text does not match
    score: float = 0.0
    embedding: list[float] = field(default_factory=list, repr=False)
    observed_at: datetime | None = None  # when the user said it (the turn's time), if known


def hit_from_row(row: dict[str, Any]) -> MemoryHit:
    embedding = row.get("embedding")
    return MemoryHit(
        id=row["id"],
        content=row["content"],
        kind=row["kind"],
        metadata=row["metadata"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_used_at=row["last_used_at"],
        strength=row["strength"],
        embedding=[] if embedding is None else np.asarray(embedding, dtype=np.float64).tolist(),
        observed_at=row.get("observed_at"),
    )


def user_memories(user_id: str) -> QuerySet[Memory]:
    """The base of every read: one user's memories, filtered in SQL."""
    return Memory.objects.filter(user_id=require_user(user_id))


def live_memories(user_id: str, as_of: datetime | None = None) -> QuerySet[Memory]:
    """One user's memories that have not expired nor been superseded; ``as_of``: those that
    existed then and had not expired nor been superseded by then (a rerun of a recorded request).
    Every recall reads through here, so a superseded memory is history, never recalled."""
    if as_of is None:
        return user_memories(user_id).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()),
            superseded_at__isnull=True,
        )
    return user_memories(user_id).filter(
        Q(created_at__lte=as_of),
        Q(expires_at__isnull=True) | Q(expires_at__gt=as_of),
        Q(superseded_at__isnull=True) | Q(superseded_at__gt=as_of),
    )


def text_query(query: str) -> SearchQuery:
    return SearchQuery(query, config=TEXT_CONFIG, search_type="websearch")


# --- search --------------------------------------------------------------------------------------


def nearest(
    user_id: str,
    vector: Sequence[float],
    k: int,
    text: str | None = None,
    as_of: datetime | None = None,
) -> list[MemoryHit]:
    """The user's ``k`` live memories closest to ``vector`` by cosine, exactly. With ``text``,
    each hit also carries its full-text rank for it (0.0 when its text does not match)."""
    rows = live_memories(user_id, as_of).annotate(distance=exact_distance(vector))
    fields: tuple[str, ...] = (*HIT_FIELDS, "distance")
    if text is not None:
        rows = rows.annotate(rank=text_rank(text))
        fields = (*fields, "rank")
    hits = []
    for row in rows.order_by("distance", "id").values(*fields)[:k]:
        hit = hit_from_row(row)
        hit.cosine = 1.0 - float(row["distance"])
        if text is not None:
            hit.lexical = float(row["rank"])
        hits.append(hit)
    return hits


def exact_distance(vector: Sequence[float]) -> Expression:
    """The cosine distance to ``vector``, in a form the HNSW index cannot serve: where one user
    holds most of a table the planner would otherwise walk the index (``ef_search`` candidates,
    40 by default, filtered by user afterwards) and return fewer than ``k`` or miss the nearest."""
    return ExpressionWrapper(
        CosineDistance("embedding", list(vector)) + Value(0.0), output_field=FloatField()
    )


def text_rank(text: str) -> Expression:
    """ts_rank_cd of the memory's text for ``text``, and 0.0 where the text does not match."""
    if not text.strip():
        return Value(0.0, output_field=FloatField())
    search = text_query(text)
    return Case(
        When(search_vector=search, then=SearchRank(F("search_vector"), search, cover_density=True)),
        default=Value(0.0),
        output_field=FloatField(),
    )


def lexical_matches(
    user_id: str, query: str, k: int, as_of: datetime | None = None
) -> list[MemoryHit]:
    """The user's ``k`` live memories best matching ``query`` as full text (ts_rank_cd)."""
    if not query.strip():
        return []
    return text_ranked(user_id, text_query(query), k, as_of)


def text_ranked(
    user_id: str, search: SearchQuery, k: int, as_of: datetime | None = None
) -> list[MemoryHit]:
    """The user's ``k`` live memories matching ``search``, best ``ts_rank_cd`` first, each with
    that rank as its lexical score."""
    rows = (
        live_memories(user_id, as_of)
        .filter(search_vector=search)
        .annotate(rank=SearchRank(F("search_vector"), search, cover_density=True))
        .order_by("-rank", "id")
        .values(*HIT_FIELDS, "rank")[:k]
    )
    hits = []
    for row in rows:
        hit = hit_from_row(row)
        hit.lexical = float(row["rank"])
        hits.append(hit)
    return hits


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Both are unit vectors (the embedders guarantee it), so the dot product is the cosine."""
    return float(np.dot(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)))


def embedding_search(
    user_id: str,
    vector: Sequence[float],
    limit: int,
    min_similarity: float,
    as_of: datetime | None = None,
) -> list[MemoryHit]:
    hits = [
        hit for hit in nearest(user_id, vector, limit, as_of=as_of) if hit.cosine >= min_similarity
    ]
    for hit in hits:
        hit.score = hit.cosine or 0.0
    return hits


def candidate_pool(
    user_id: str, query: str, vector: Sequence[float], limit: int, as_of: datetime | None = None
) -> list[MemoryHit]:
    """The union of the embedding and the full-text candidates, each with its cosine and its
    lexical score (0.0 for a memory whose text does not match)."""
    pool = max(MIN_CANDIDATES, CANDIDATES_PER_RESULT * limit)
    by_id = {hit.id: hit for hit in nearest(user_id, vector, pool, text=query, as_of=as_of)}
    for hit in lexical_matches(user_id, query, pool, as_of):
        if hit.id not in by_id:
            hit.cosine = cosine(hit.embedding, vector)
            by_id[hit.id] = hit
    return list(by_id.values())


def hybrid_search(
    user_id: str,
    query: str,
    vector: Sequence[float],
    limit: int,
    min_similarity: float,
    mode: HybridMode,
    as_of: datetime | None = None,
) -> list[MemoryHit]:
    """The cosine threshold applies to every candidate before fusion, whichever retriever found
    it, so ``min_similarity`` means the same in both modes (RRF scores are on another scale)."""
    hits = [
        hit
        for hit in candidate_pool(user_id, query, vector, limit, as_of)
        if (hit.cosine or 0.0) >= min_similarity
    ]
    cosines = [hit.cosine or 0.0 for hit in hits]
    lexical = [hit.lexical or 0.0 for hit in hits]
    fused = weighted(cosines, lexical) if mode == "weighted" else reciprocal_rank(cosines, lexical)
    for hit, score in zip(hits, fused, strict=True):
        hit.score = score
    hits.sort(key=lambda hit: (-hit.score, -(hit.cosine or 0.0), hit.id))
    return hits[:limit]


def search_memories(
    *,
    user_id: str,
    query: str,
    vector: Sequence[float],
    limit: int,
    min_similarity: float,
    hybrid: bool = False,
    hybrid_mode: HybridMode = "weighted",
    as_of: datetime | None = None,
) -> list[MemoryHit]:
    """The user's live memories most relevant to ``query`` (whose embedding is ``vector``), best
    first, each with ``cosine >= min_similarity``. Embedding search scores by cosine; hybrid search
    fuses cosine with the full-text rank (``weighted`` or ``rrf``, see sources.fusion)."""
    require_user(user_id)
    if limit <= 0:
        return []
    if not hybrid:
        return embedding_search(user_id, vector, limit, min_similarity, as_of)
    if hybrid_mode not in HYBRID_MODES:
        raise ValueError(f"hybrid_mode must be one of {', '.join(HYBRID_MODES)}")
    return hybrid_search(user_id, query, vector, limit, min_similarity, hybrid_mode, as_of)


def newest_memories(user_id: str, limit: int, as_of: datetime | None = None) -> list[MemoryHit]:
    """The user's newest live memories (for a match block with only a judge)."""
    rows = live_memories(user_id, as_of).order_by("-created_at", "-id").values(*HIT_FIELDS)[:limit]
    return [hit_from_row(row) for row in rows]


# --- listing ---------------------------------------------------------------------------------------


class InvalidCursor(ValueError):
    pass


@dataclass
class MemoryPage:
    items: list[Memory]
    next_cursor: str | None


def encode_cursor(memory: Memory) -> str:
    raw = f"{memory.created_at.isoformat()}|{memory.pk}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, memory_id = raw.rsplit("|", 1)
        created_at = datetime.fromisoformat(stamp)
        if created_at.tzinfo is None:
            raise ValueError("naive timestamp")
        return created_at, int(memory_id)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidCursor("not a cursor this endpoint returned") from None


def list_memories(
    user_id: str, q: str | None = None, limit: int = 50, cursor: str | None = None
) -> MemoryPage:
    """One page of the user's memories, newest first (keyset on created_at, id), optionally only
    those matching ``q`` (full text, or the words as a substring). Expired memories that the
    retention task has not deleted yet are listed: they are still stored."""
    memories = user_memories(user_id)
    if q and q.strip():
        memories = memories.filter(Q(search_vector=text_query(q)) | Q(content__icontains=q))
    if cursor:
        created_at, memory_id = decode_cursor(cursor)
        memories = memories.filter(
            Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=memory_id)
        )
    ordered = memories.defer("embedding", "search_vector").order_by("-created_at", "-id")
    page = list(ordered[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    return MemoryPage(items=page, next_cursor=encode_cursor(page[-1]) if more and page else None)


MAX_ID = 2**63 - 1


def memory_for_user(user_id: str, memory_id: int) -> Memory | None:
    """The memory, if it is this user's (another user's id is as absent as a missing one)."""
    if not 0 < memory_id <= MAX_ID:
        require_user(user_id)
        return None
    return user_memories(user_id).filter(pk=memory_id).first()
