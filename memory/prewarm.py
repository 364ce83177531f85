"""Memories read ahead for a session: the user's whole live set, searched at the resolve.

Which memories a turn needs depends on its query, which a pre-warm does not know. What it can read
is the user's memories themselves: when the user has at most ``POOL_MAX`` live ones, all of them
(with their embeddings) are kept in the session's pre-warm, and the resolve ranks them against its
query in process, the exact cosine the store's own user-scoped search computes (it scans the
user's rows exactly too), so the memories recalled are those a fetch would have recalled. A
judge-only match block reads the newest of the same set. The default hybrid recall ranks the
embedding's side from the pool and asks the store for the text's side at the resolve (the
full-text rank is the store's). Not pre-warmed: a user with more memories (the pool would not be
the whole set), ``hybrid_search`` and a lexical-only recall (their ranking is the store's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
from django.utils import timezone

from memory.selectors import HIT_FIELDS, MemoryHit, hit_from_row, live_memories

POOL_MAX = 200


@dataclass(frozen=True)
class PooledMemory:
    """A pre-warmed memory: the hit a fetch would build, less its embedding, which is kept as the
    store keeps it (float32 bytes, the compact form the pre-warm holds) and turned back into the
    hit's floats per resolve. ``base`` is never handed out: each resolve gets its own copy to
    score."""

    base: MemoryHit
    expires_at: datetime | None
    embedding: bytes  # float32, as the store keeps it

    @property
    def id(self) -> int:
        return self.base.id

    def hit(self) -> MemoryHit:
        vector = np.frombuffer(self.embedding, dtype=np.float32).astype(np.float64).tolist()
        return replace(self.base, embedding=vector)


@dataclass(frozen=True)
class MemoryPool:
    """One user's live memories, newest first."""

    user: str
    memories: tuple[PooledMemory, ...]

    def live(self, now: datetime | None = None) -> list[PooledMemory]:
        """Those not expired since the pre-warm."""
        moment = now or timezone.now()
        return [m for m in self.memories if m.expires_at is None or m.expires_at > moment]


def load_pool(user_id: str) -> MemoryPool | None:
    """The user's live memories, or None when they are more than ``POOL_MAX``."""
    rows = list(
        live_memories(user_id)
        .order_by("-created_at", "-id")
        .values(*HIT_FIELDS, "expires_at")[: POOL_MAX + 1]
    )
    if len(rows) > POOL_MAX:
        return None
    return MemoryPool(
        user=user_id,
        memories=tuple(
            PooledMemory(
                base=hit_from_row({**row, "embedding": None}),
                expires_at=row["expires_at"],
                embedding=np.asarray(row["embedding"], dtype=np.float32).tobytes(),
            )
            for row in rows
        ),
    )


def newest(pool: MemoryPool, limit: int) -> list[MemoryHit]:
    """``memory.selectors.newest_memories`` over the pool."""
    return [memory.hit() for memory in pool.live()[:limit]]


def search(
    pool: MemoryPool, vector: Sequence[float], limit: int, min_similarity: float
) -> list[MemoryHit]:
    """``memory.selectors.search_memories`` by embedding over the pool: the ``limit`` nearest by
    cosine (ties by id), then those at ``min_similarity`` or above, scored by their cosine."""
    memories = pool.live()
    if not memories or limit <= 0:
        return []
    matrix = np.stack([np.frombuffer(m.embedding, dtype=np.float32) for m in memories])
    query = np.asarray(vector, dtype=np.float64)
    vectors = matrix.astype(np.float64)
    norms = np.linalg.norm(vectors, axis=1) * np.linalg.norm(query)
    cosines = (vectors @ query) / np.where(norms == 0, 1.0, norms)
    order = sorted(range(len(memories)), key=lambda i: (-cosines[i], memories[i].id))[:limit]
    hits = []
    for index in order:
        if cosines[index] < min_similarity:
            continue
        hit = memories[index].hit()
        hit.cosine = float(cosines[index])
        hit.score = hit.cosine
        hits.append(hit)
    return hits
