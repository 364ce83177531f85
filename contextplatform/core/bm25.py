"""Okapi BM25: the one scorer behind every ranking the platform does over a handful of texts.

The compression stage ranks chunks of a tool output and blocks of a request with it, and the local
judge turns it into half of its relevance signal. Lexical recall over a whole collection is another
job (an index built once per collection version, stemmed, searched many times) and uses the
``bm25s`` library instead (``sources.lexical``). ``bm25s`` is no gain here, where every corpus is
scored once: on the 5,997 chunks of the 100,000-token tool output of
``scripts/bench_compression.py`` the scalar ``bm25_scores`` scored the query in 5.2-5.6 ms,
``bm25s`` (index, then score) in 86-91 ms (best of 20 runs each, 2-core Xeon); the compression
stage now counts those chunks' terms in bulk and scores them with ``scores_from_counts``.

Callers bring their own terms (or their counts): the compression stage tokenizes as vLLM Semantic
Router does, the judge into lower-cased alphanumeric runs (the tokens its calibration was fitted
on); this module only counts them. The formula is fixed because the judge's calibration constants were fitted on it:
k1 1.2, b 0.75, idf ``ln(1 + (N - n + 0.5) / (n + 0.5))`` (never negative, even for a term every
document holds), each distinct query term counted once. Terms are summed in the query's order, so
the same input always gives the same floating-point score.

``scores_from_counts`` is the same formula over a matrix of query-term frequencies and the
documents' lengths, for thousands of documents (the chunks of a long tool output, counted without
building term lists): numpy applies it to every document at once, one query term after the other,
so each document's score is the same sequence of IEEE-754 operations as the scalar formula
(``_term_score``, which ``bm25_scores`` and ``own_query_scores`` run) and the same float, bit for
bit (``tests/core/test_bm25.py`` holds all three to the formula written out).

Pure (numpy only): the kernel imports no app.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

K1 = 1.2
B = 0.75

# A document length and its norm: a Python number for one document, an array for all of them. The
# same expression serves both, so the vectorised scores run the scalar formula's operations.
_Real = TypeVar("_Real", float, npt.NDArray[np.float64])


def idf(documents: int, containing: int) -> float:
    """Inverse document frequency of a term held by ``containing`` of ``documents`` documents."""
    return math.log(1 + (documents - containing + 0.5) / (containing + 0.5))


def bm25_scores(
    query_terms: Iterable[str],
    documents: Sequence[Sequence[str]],
    *,
    average_length_floor: float = 0.0,
) -> list[float]:
    """BM25 of each document (its terms) against the query, the documents being the collection.

    ``average_length_floor`` bounds the average document length from below; the compression stage
    sets it to one term so a collection of mostly empty chunks does not inflate the length penalty
    of the others.

    The query terms are first intersected with each document's set of terms, so the per-term work
    (``list.count``) only runs for the few terms a document actually shares with the query. This
    scalar loop is for the handful of texts a judge call or a request's blocks bring, where numpy's
    per-call cost would be most of the work; thousands of chunks go through
    ``scores_from_counts``."""
    order = {term: position for position, term in enumerate(dict.fromkeys(query_terms))}
    query = frozenset(order)
    found = [query.intersection(terms) for terms in documents]
    containing: Counter[str] = Counter()
    for shared in found:
        containing.update(shared)
    count = len(documents)
    average = _average_length(documents, average_length_floor)
    weights = {term: idf(count, containing[term]) for term in containing}
    scores: list[float] = []
    for terms, present in zip(documents, found, strict=True):
        score = 0.0
        if present:
            norm = _length_norm(len(terms), average)
            # Summed in the query's order, as vLLM Semantic Router does, for the same
            # floating-point result.
            for term in sorted(present, key=order.__getitem__):
                score += _term_score(weights[term], terms.count(term), norm)
        scores.append(score)
    return scores


def scores_from_counts(
    frequencies: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    *,
    average_length_floor: float = 0.0,
) -> list[float]:
    """BM25 of each document from counts: ``frequencies[t, d]`` is how often the ``t``-th distinct
    query term (in the query's order) occurs in document ``d``, ``lengths[d]`` how many terms
    document ``d`` holds; the documents are the collection.

    Only the documents holding a term get its share, as in the scalar formula, so a document
    sharing no term with the query scores exactly 0.0 (and an all-empty collection never divides
    by its zero average length)."""
    count = len(lengths)
    scores = np.zeros(count, dtype=np.float64)
    if not frequencies.any():
        return scores.tolist()
    # Python's own int / int, as the scalar formula divides.
    average = max(average_length_floor, int(lengths.sum()) / max(1, count))
    norms = _length_norm(lengths.astype(np.float64), average)
    for row in frequencies:
        present = np.flatnonzero(row)
        if present.size == 0:
            continue
        weight = idf(count, present.size)
        held = row[present].astype(np.float64)
        scores[present] += weight * (held * (K1 + 1)) / (held + norms[present])
    return scores.tolist()


def own_query_scores(
    queries: Sequence[Iterable[str]],
    documents: Sequence[Sequence[str]],
    *,
    average_length_floor: float = 0.0,
) -> list[float]:
    """Each document scored against its own query, over all documents as the collection:
    ``scores[i] == bm25_scores(queries[i], documents)[i]``, exactly, without scoring every
    document against every query."""
    if len(queries) != len(documents):
        raise ValueError("own_query_scores needs one query per document")
    bags = [frozenset(terms) for terms in documents]
    count = len(documents)
    average = _average_length(documents, average_length_floor)
    weights: dict[str, float] = {}
    scores: list[float] = []
    for query, terms, bag in zip(queries, documents, bags, strict=True):
        present = [term for term in dict.fromkeys(query) if term in bag]
        score = 0.0
        if present:
            norm = _length_norm(len(terms), average)
            for term in present:
                if term not in weights:
                    weights[term] = idf(count, sum(1 for other in bags if term in other))
                score += _term_score(weights[term], terms.count(term), norm)
        scores.append(score)
    return scores


def _average_length(documents: Sequence[Sequence[str]], floor: float) -> float:
    # Only documents that share a term with the query are normalised, and those hold at least one
    # term, so without a floor the average is positive wherever it divides.
    return max(floor, sum(map(len, documents)) / max(1, len(documents)))


def _length_norm(length: _Real, average: float) -> _Real:
    return K1 * (1 - B + B * length / average)


def _term_score(weight: float, frequency: int, norm: float) -> float:
    return weight * (frequency * (K1 + 1)) / (frequency + norm)
