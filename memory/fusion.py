"""The hybrid recall's fusion, whichever store found the candidates (pure).

Reciprocal rank (k ``MEMORY_RRF_K``) over the embedding's and the text's rankings;
``min_similarity`` drops a candidate only the embedding found: a text match is kept whatever its cosine, since the threshold
is the embedding's notion of relevance and the text found it on its own. Near-duplicates (the same
text once case, spacing and punctuation are set aside, or cosine ``DUPLICATE_COSINE`` and above)
are collapsed to the best ranked, so a restated fact does not take two of the few places.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memory.selectors import MemoryHit, cosine

# Candidates each retriever hands the fusion: enough that a memory ranked low by one and well by
# the other still meets the fusion, few enough that the exact scan stays cheap per user.
POOL_PER_SIDE = 64
# RRF's k for two short pools: at the usual 60 (set for rankings a thousand deep) rank 1 and rank
# 30 differ little, so a memory both sides rank in the middle outranks the best of either; at 10
# each side's first few count. Measured on both recall benches (scripts/bench_memory_recall.py):
# never worse, and a tenth more of the evidence on conversations between two speakers.
MEMORY_RRF_K = 10
DUPLICATE_COSINE = 0.95
WORD = re.compile(r"\w+", re.UNICODE)


def normalized(text: str) -> str:
    return " ".join(WORD.findall(text.lower()))


def collapse_duplicates(hits: list[MemoryHit]) -> list[MemoryHit]:
    """The hits, best first, without any whose text is the same as a better one's or whose
    embedding is within ``DUPLICATE_COSINE`` of it."""
    kept: list[MemoryHit] = []
    texts: set[str] = set()
    vectors: list[np.ndarray] = []
    for hit in hits:
        text = normalized(hit.content)
        if text in texts:
            continue
        vector = np.asarray(hit.embedding, dtype=np.float64)
        if vector.size and any(float(vector @ other) >= DUPLICATE_COSINE for other in vectors):
            continue
        texts.add(text)
        if vector.size:
            vectors.append(vector)
        kept.append(hit)
    return kept


@dataclass(frozen=True)
class Fused:
    id: int
    score: float  # the sum of the reciprocal ranks
    cosine: float | None  # None: found by the text alone, its cosine not computed yet
    lexical: float  # the text score, 0.0 where the text search did not find it


def fuse_ranks(
    dense: Sequence[tuple[int, float]],
    lexical: Sequence[tuple[int, float | None, float]],
    min_similarity: float,
) -> list[Fused]:
    """``dense``: (id, cosine) best first; ``lexical``: (id, cosine or None, text score) best
    first. The candidates of both, best fused first (ties: the higher cosine, then the lower id)."""
    cosines: dict[int, float | None] = {}
    texts: dict[int, float] = {}
    scores: dict[int, float] = {}
    for rank, (memory_id, similarity) in enumerate(dense, start=1):
        cosines[memory_id] = similarity
        scores[memory_id] = 1.0 / (MEMORY_RRF_K + rank)
    for rank, (memory_id, similarity, text) in enumerate(lexical, start=1):
        cosines.setdefault(memory_id, similarity)
        texts[memory_id] = text
        scores[memory_id] = scores.get(memory_id, 0.0) + 1.0 / (MEMORY_RRF_K + rank)
    fused = [
        Fused(memory_id, score, cosines[memory_id], texts.get(memory_id, 0.0))
        for memory_id, score in scores.items()
        if memory_id in texts or (cosines[memory_id] or 0.0) >= min_similarity
    ]
    fused.sort(key=lambda f: (-f.score, -(f.cosine or 0.0), f.id))
    return fused


def scored(
    fused: Sequence[Fused], hits: dict[int, MemoryHit], limit: int, vector: Sequence[float]
) -> list[MemoryHit]:
    """The hits in fused order, each given its fused score, cosine (to ``vector``) and text score,
    near-duplicates collapsed, the best ``limit``."""
    ordered = []
    for f in fused:
        hit = hits.get(f.id)
        if hit is None:
            continue
        hit.score, hit.lexical = f.score, f.lexical
        hit.cosine = f.cosine if f.cosine is not None else cosine(hit.embedding, vector)
        ordered.append(hit)
    return collapse_duplicates(ordered)[:limit]


def fuse_by_rank(
    dense: list[MemoryHit],
    lexical: list[MemoryHit],
    limit: int,
    min_similarity: float,
    vector: Sequence[float],
) -> list[MemoryHit]:
    """``dense`` (best first, each with its cosine) and ``lexical`` (best first, each with its
    cosine and text score) fused: the best ``limit``, each scored by its reciprocal rank sum."""
    fused = fuse_ranks(
        [(h.id, h.cosine or 0.0) for h in dense],
        [(h.id, h.cosine, h.lexical or 0.0) for h in lexical],
        min_similarity,
    )
    hits = {h.id: h for h in [*lexical, *dense]}
    return scored(fused, hits, limit, vector)
