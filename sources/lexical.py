"""BM25 over a set of collections with bm25s: real BM25 scoring, no query embedding.

Each process keeps one index per (tenant schema, collections and their versions); a document change
bumps its collection's version, so the next search rebuilds from PostgreSQL.

Why bm25s and not the shared ``contextplatform.core.bm25``: a collection is indexed once and
searched many times, and bm25s scores a query against its sparse index in about 0.1 ms over 5,997
chunks where the shared function, which reads every chunk's terms per query, takes about 10 ms
(the chunks of ``scripts/bench_compression.py``'s 100,000-token text, stemmed; building the index
took 135-215 ms, paid once per collection version). Its scores (Lucene's BM25, k1 1.5, English
stemming and stop words) are also what the local judge's calibration was fitted on for recalled
chunks (``sources.judge``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import bm25s
import numpy as np
import Stemmer

from sources.models import Chunk, Collection

STEMMER = Stemmer.Stemmer("english")
MAX_CACHED_INDEXES = 16


def tokenize(texts: list[str]) -> list[list[str]]:
    return bm25s.tokenize(
        texts, stopwords="en", stemmer=STEMMER, return_ids=False, show_progress=False
    )


def contains(metadata: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """JSON containment, like PostgreSQL's ``@>`` for objects."""
    for key, value in wanted.items():
        if key not in metadata:
            return False
        if isinstance(value, dict):
            if not isinstance(metadata[key], dict) or not contains(metadata[key], value):
                return False
        elif metadata[key] != value:
            return False
    return True


@dataclass
class LexicalIndex:
    chunk_ids: np.ndarray
    metadata: list[dict[str, Any]]
    retriever: bm25s.BM25 | None
    position: dict[int, int]

    def scores(self, query: str) -> np.ndarray:
        if self.retriever is None:
            return np.zeros(len(self.chunk_ids), dtype=np.float32)
        vocabulary = self.retriever.vocab_dict
        tokens = [token for token in tokenize([query])[0] if token in vocabulary]
        if not tokens:
            return np.zeros(len(self.chunk_ids), dtype=np.float32)
        return self.retriever.get_scores(tokens)

    def mask(self, wanted: dict[str, Any] | None) -> np.ndarray | None:
        if not wanted:
            return None
        return np.array([contains(meta, wanted) for meta in self.metadata], dtype=bool)

    def top(
        self,
        query: str,
        k: int,
        wanted: dict[str, Any] | None = None,
        *,
        scores: np.ndarray | None = None,
    ) -> list[tuple[int, float]]:
        """(chunk id, BM25 score) of the best ``k`` chunks with a positive score; ``scores``, when
        the caller already has ``self.scores(query)``, spares scoring the corpus a second time."""
        if scores is None:
            scores = self.scores(query)
        mask = self.mask(wanted)
        if mask is not None:
            scores = np.where(mask, scores, 0.0)
        if not len(scores):
            return []
        k = min(k, len(scores))
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(int(self.chunk_ids[i]), float(scores[i])) for i in best if scores[i] > 0]

    def score_of(self, scores: np.ndarray, chunk_id: int) -> float:
        index = self.position.get(chunk_id)
        return float(scores[index]) if index is not None else 0.0


def build_index(collection_ids: list[int]) -> LexicalIndex:
    rows = list(
        Chunk.objects.filter(collection_id__in=collection_ids)
        .order_by("id")
        .values_list("id", "title", "text", "metadata")
    )
    chunk_ids = np.array([row[0] for row in rows], dtype=np.int64)
    retriever = None
    if rows:
        retriever = bm25s.BM25()
        retriever.index(
            tokenize([f"{title}\n{text}" for _, title, text, _ in rows]), show_progress=False
        )
    return LexicalIndex(
        chunk_ids=chunk_ids,
        metadata=[row[3] for row in rows],
        retriever=retriever,
        position={int(chunk_id): index for index, chunk_id in enumerate(chunk_ids)},
    )


_indexes: OrderedDict[tuple[Any, ...], LexicalIndex] = OrderedDict()
_lock = threading.Lock()


def lexical_index(schema: str, collections: list[Collection]) -> LexicalIndex:
    key = (schema, tuple(sorted((c.pk, c.version) for c in collections)))
    with _lock:
        if key in _indexes:
            _indexes.move_to_end(key)
            return _indexes[key]
    index = build_index([c.pk for c in collections])
    with _lock:
        stale = [
            k
            for k in _indexes
            if k[0] == schema and {i for i, _ in k[1]} == {c.pk for c in collections}
        ]
        for old in stale:
            del _indexes[old]
        _indexes[key] = index
        while len(_indexes) > MAX_CACHED_INDEXES:
            _indexes.popitem(last=False)
    return index
