"""The hybrid recall's fusion, whichever store found the candidates (pure).

Reciprocal rank (k 60) over the embedding's and the text's rankings; ``min_similarity`` drops a
candidate only the embedding found: a text match is kept whatever its cosine, since the threshold
is the embedding's notion of relevance and the text found it on its own. Near-duplicates (the same
text once case, spacing and punctuation are set aside, or cosine ``DUPLICATE_COSINE`` and above)
are collapsed to the best ranked, so a restated fact does not take two of the few places.
"""

from __future__ import annotations

import re

import numpy as np

from memory.selectors import MemoryHit
from sources.fusion import RRF_K

# Candidates each retriever hands the fusion: enough that a memory ranked low by one and well by
# the other still meets the fusion, few enough that the exact scan stays cheap per user.
POOL_PER_SIDE = 64
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


def fuse_by_rank(
    dense: list[MemoryHit], lexical: list[MemoryHit], limit: int, min_similarity: float
) -> list[MemoryHit]:
    """``dense`` (best first, each with its cosine) and ``lexical`` (best first, each with its
    cosine and text score) fused: the best ``limit``, each scored by its reciprocal rank sum."""
    by_id: dict[int, MemoryHit] = {}
    scores: dict[int, float] = {}
    for rank, hit in enumerate(dense, start=1):
        hit.lexical = 0.0
        by_id[hit.id] = hit
        scores[hit.id] = 1.0 / (RRF_K + rank)
    found_by_text: set[int] = set()
    for rank, hit in enumerate(lexical, start=1):
        found_by_text.add(hit.id)
        if hit.id in by_id:
            by_id[hit.id].lexical = hit.lexical
        else:
            by_id[hit.id] = hit
        scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (RRF_K + rank)
    hits = [
        hit
        for hit in by_id.values()
        if hit.id in found_by_text or (hit.cosine or 0.0) >= min_similarity
    ]
    for hit in hits:
        hit.score = scores[hit.id]
    hits.sort(key=lambda hit: (-hit.score, -(hit.cosine or 0.0), hit.id))
    return collapse_duplicates(hits)[:limit]
