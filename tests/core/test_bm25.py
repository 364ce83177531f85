"""The kernel's BM25 against the straightforward formula, float for float.

``scores_from_counts`` applies the formula to every document at once (numpy), for the compression
stage's thousands of chunks; ``bm25_scores`` and ``own_query_scores`` run it document by document.
The local judge's calibration was fitted on the scalar formula's floats, so the reference here is
that formula written out term by term, document by document, and the scores must be equal, not
close."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from contextplatform.core.bm25 import (
    K1,
    B,
    bm25_scores,
    own_query_scores,
    scores_from_counts,
)
from sources.judge_lexical import Bm25, tokenize

PROPERTY = settings(max_examples=300, deadline=None)

# Few distinct terms, so documents share them and frequencies above 1 are common.
TERM = st.sampled_from(["vault", "code", "order", "4242", "a", "the", "refund", "é", "中"])
DOCUMENT = st.lists(TERM, max_size=30)
CORPUS = st.lists(DOCUMENT, max_size=25)
QUERY = st.lists(TERM, max_size=8)
FLOOR = st.sampled_from([0.0, 1.0, 7.5])


def reference_scores(query: list[str], documents: list[list[str]], floor: float) -> list[float]:
    """Okapi BM25 as the module's docstring states it, one document and one term at a time."""
    count = len(documents)
    average = max(floor, sum(len(terms) for terms in documents) / max(1, count))
    scores = []
    for terms in documents:
        score = 0.0
        for term in dict.fromkeys(query):  # each distinct query term once, in the query's order
            frequency = terms.count(term)
            if not frequency:
                continue
            containing = sum(1 for other in documents if term in other)
            weight = math.log(1 + (count - containing + 0.5) / (containing + 0.5))
            norm = K1 * (1 - B + B * len(terms) / average)
            score += weight * (frequency * (K1 + 1)) / (frequency + norm)
        scores.append(score)
    return scores


@PROPERTY
@given(QUERY, CORPUS, FLOOR)
def test_bm25_scores_equal_the_formula_float_for_float(
    query: list[str], documents: list[list[str]], floor: float
) -> None:
    scores = bm25_scores(query, documents, average_length_floor=floor)
    assert scores == reference_scores(query, documents, floor)
    assert all(type(score) is float for score in scores)


@PROPERTY
@given(QUERY, CORPUS, FLOOR)
def test_scores_from_counts_equal_the_formula(
    query: list[str], documents: list[list[str]], floor: float
) -> None:
    distinct = list(dict.fromkeys(query))
    held = [Counter(terms) for terms in documents]
    frequencies = np.array(
        [[bag[term] for bag in held] for term in distinct], dtype=np.int64
    ).reshape(len(distinct), len(documents))
    lengths = np.array([len(terms) for terms in documents], dtype=np.int64)
    scores = scores_from_counts(frequencies, lengths, average_length_floor=floor)
    assert scores == reference_scores(query, documents, floor)


@PROPERTY
@given(st.lists(QUERY, max_size=25), CORPUS)
def test_own_query_scores_equal_each_query_alone(
    queries: list[list[str]], documents: list[list[str]]
) -> None:
    queries = (queries + [[]] * len(documents))[: len(documents)]
    expected = [bm25_scores(query, documents)[i] for i, query in enumerate(queries)]
    assert own_query_scores(queries, documents) == expected


@PROPERTY
@given(st.text(max_size=30), st.lists(st.text(max_size=60), max_size=12))
def test_the_judges_lexical_scores_are_the_formulas(query: str, texts: list[str]) -> None:
    expected = reference_scores(tokenize(query), [tokenize(text) for text in texts], 0.0)
    assert Bm25(texts).scores(query) == expected


def test_edge_cases() -> None:
    assert bm25_scores(["x"], []) == []
    assert bm25_scores([], [["a"], []]) == [0.0, 0.0]
    assert bm25_scores(["a"], [[], []]) == [0.0, 0.0]  # an all-empty collection divides by nothing
    assert bm25_scores(["a", "a"], [["a", "b"], ["c"]]) == bm25_scores(["a"], [["a", "b"], ["c"]])
