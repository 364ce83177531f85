"""Score fusion for hybrid recall (pure)."""

from __future__ import annotations

from collections.abc import Sequence

RRF_K = 60
COSINE_WEIGHT = (
    0.8  # models.md: 0.8 cosine + 0.2 BM25, each min-max normalised, beat RRF and either alone
)
BM25_WEIGHT = 0.2


def min_max(values: Sequence[float]) -> list[float]:
    if not values:
        return []
    low, high = min(values), max(values)
    if high == low:
        return [1.0 if high > 0 else 0.0 for _ in values]
    return [(value - low) / (high - low) for value in values]


def weighted(cosines: Sequence[float], bm25: Sequence[float]) -> list[float]:
    """``0.8 * minmax(cosine) + 0.2 * minmax(bm25)`` over the candidates; a candidate without a BM25
    match contributes 0 from BM25, never a negative (unlike vLLM Semantic Router's fusion)."""
    return [
        COSINE_WEIGHT * c + BM25_WEIGHT * b
        for c, b in zip(min_max(cosines), min_max(bm25), strict=True)
    ]


def ranks(values: Sequence[float]) -> list[int | None]:
    """1-based rank of each value (higher is better); a value <= 0 has no rank."""
    order = sorted((i for i, v in enumerate(values) if v > 0), key=lambda i: -values[i])
    result: list[int | None] = [None] * len(values)
    for rank, index in enumerate(order, start=1):
        result[index] = rank
    return result


def reciprocal_rank(cosines: Sequence[float], bm25: Sequence[float], k: int = RRF_K) -> list[float]:
    return [
        sum(1.0 / (k + rank) for rank in pair if rank is not None)
        for pair in zip(ranks(cosines), ranks(bm25), strict=True)
    ]
