"""The local judge's lexical feature: BM25 of the query against each candidate, min-max normalised
over the candidates, so that one scale serves a request's whole candidate set.

The shared BM25 (``contextplatform.core.bm25``: k1 1.2, b 0.75, idf ln((N-n+0.5)/(n+0.5) + 1))
over lower-case alphanumeric runs; pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from contextplatform.core.bm25 import bm25_scores

TOKEN = re.compile(r"[^\W_]+")


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


class Bm25:
    """Okapi BM25 over a fixed corpus; ``scores(query)`` gives one raw score per document."""

    def __init__(self, documents: Sequence[str]) -> None:
        self.documents = [tokenize(document) for document in documents]

    def scores(self, query: str) -> list[float]:
        return bm25_scores(tokenize(query), self.documents)


def min_max(values: Sequence[float]) -> list[float]:
    """Min-max over the candidate set; with no spread, a positive score counts as 1, zero as 0."""
    if not values:
        return []
    low, high = min(values), max(values)
    if high - low <= 1e-12:
        return [1.0 if value > 0 else 0.0 for value in values]
    return [(value - low) / (high - low) for value in values]


def bm25_signal_texts(query: str, texts: Sequence[str]) -> list[float]:
    """BM25 computed here with the candidates' texts as the corpus, min-max normalised."""
    return min_max(Bm25(texts).scores(query))
