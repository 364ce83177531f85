"""The extractive path's bulk counting against the one-text-at-a-time reference it replaced.

Issue 15 moved the hot loops of ``compress_extractive`` to numpy: the terms of ASCII chunks are
counted over their joined bytes (``chunk_term_counts``), a text's lines are measured in bulk
(``_measured_lines``, the heuristic meter's count), the token heuristic runs on arrays, and the
selection skips the chunks that cannot fit a window at a time. Each is pinned here to what it
replaced, on generated text: ``tokenize_terms`` chunk by chunk, ``_stats`` and
``HeuristicEstimator.count`` line by line, the plain scan of the ranking."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from compression.text import (
    _chunk_text,
    _heuristic_tokens,
    _heuristic_tokens_of_each,
    _HeuristicMeter,
    _measured_lines,
    _select,
    _Selection,
    _stats,
    _SummedSelection,
    _trimmed_lines,
    chunk_scores,
    chunk_term_counts,
    compress_extractive,
    tokenize_terms,
)
from contextplatform.core.bm25 import scores_from_counts
from contextplatform.core.estimation import HeuristicEstimator

PROPERTY = settings(max_examples=300, deadline=None)
estimator = HeuristicEstimator()

# ASCII with every byte class the tokenizer tells apart: letters of both cases, digits, "_", the
# ASCII symbols, punctuation that separates, and the whitespace str.split() splits at.
ASCII_TEXT = st.text(
    alphabet=st.sampled_from(list("abcXYZ019_ $+<=>^`|~.,:;'\"{}[]()-!?\t\r\x0b\x0c\x1c\x1f")),
    max_size=80,
)
# Beyond ASCII: CJK (BMP and astral), emoji and other symbols, letter-like numbers, the letters Go
# lower-cases differently, combining marks, Unicode whitespace.
UNICODE_TEXT = st.text(
    alphabet=st.sampled_from(
        list(
            "ab XY_9$+.\t\u3000\xa0\u2028\u0085€→²Ⅻ½éİΣß中文字日本語데이터カナ"
            "\U00020000\U0002a6d6\U0001f600\U0001d11e\u0301"
        )
    ),
    max_size=60,
)
ANY_TEXT = st.one_of(ASCII_TEXT, UNICODE_TEXT, st.text(max_size=40))
TEXTS = st.lists(st.one_of(ASCII_TEXT, ASCII_TEXT, ANY_TEXT), max_size=30)
QUERY = st.one_of(ASCII_TEXT, ANY_TEXT, st.lists(ANY_TEXT, max_size=3).map(" ".join))


def reference_counts(query_terms: list[str], texts: list[str]) -> tuple[list[list[int]], list[int]]:
    """What ``chunk_term_counts`` replaced: each text tokenized, its terms counted."""
    query = list(dict.fromkeys(query_terms))
    bags = [Counter(tokenize_terms(text)) for text in texts]
    return [[bag[term] for bag in bags] for term in query], [sum(bag.values()) for bag in bags]


@PROPERTY
@given(QUERY, TEXTS)
def test_term_counts_equal_the_tokenizers(query: str, texts: list[str]) -> None:
    query_terms = tokenize_terms(query) + tokenize_terms(" ".join(texts[:2]))  # shared terms too
    frequencies, lengths = chunk_term_counts(query_terms, texts)
    expected_frequencies, expected_lengths = reference_counts(query_terms, texts)
    assert frequencies.tolist() == expected_frequencies
    assert lengths.tolist() == expected_lengths


@PROPERTY
@given(TEXTS, st.lists(st.one_of(ANY_TEXT, st.sampled_from(["$", "a", "ab", "A_1", "é", "\n"]))))
def test_any_query_term_is_counted_as_the_tokenizer_would(
    texts: list[str], terms: list[str]
) -> None:
    # Terms the tokenizer never makes (upper case, one letter, a newline) occur nowhere.
    frequencies, _ = chunk_term_counts(terms, texts)
    assert frequencies.tolist() == reference_counts(terms, texts)[0]


def test_term_counts_by_hand() -> None:
    texts = ["Vault code: 4242, vault!", "a $5 + <tag>", "中文 vault", "no\nnewline vault"]
    frequencies, lengths = chunk_term_counts(["vault", "$", "tag", "vault", "中"], texts)
    assert frequencies.tolist() == [[2, 0, 1, 1], [0, 1, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]
    assert lengths.tolist() == [4, 5, 4, 3]  # 中, 文, 中文, vault
    empty_frequencies, empty_lengths = chunk_term_counts(["x"], [])
    assert empty_frequencies.shape == (1, 0) and empty_lengths.tolist() == []


@PROPERTY
@given(QUERY, TEXTS)
def test_chunk_scores_from_counts_equal_the_term_lists_scores(query: str, texts: list[str]) -> None:
    terms = tokenize_terms(query)
    frequencies, lengths = chunk_term_counts(terms, texts)
    from_counts = scores_from_counts(frequencies, lengths, average_length_floor=1.0)
    assert from_counts == chunk_scores(terms, [tokenize_terms(text) for text in texts])


LINES = st.lists(st.one_of(ASCII_TEXT, UNICODE_TEXT), max_size=40).map("\n".join)


@PROPERTY
@given(LINES)
def test_measured_lines_equal_each_lines_stats(text: str) -> None:
    lines = _measured_lines(_trimmed_lines(text))
    stats = [_stats(line) for line in lines.texts]
    assert lines.stats.tolist() == [list(_stats(line)) for line in lines.texts]
    assert lines.tokens == [estimator.count(line) for line in lines.texts]
    assert (lines.cjk, lines.words) == (sum(s[0] for s in stats), sum(s[1] for s in stats))


@PROPERTY
@given(st.one_of(LINES, ANY_TEXT))
def test_the_meters_count_is_the_estimators(text: str) -> None:
    meter = _HeuristicMeter(estimator)
    assert meter.count(text) == estimator.count(text)
    assert meter.count(text) == estimator.count(text)  # from the lines measured the first time


@PROPERTY
@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 4 * 10**6)),
        max_size=30,
    )
)
def test_heuristic_tokens_on_arrays_equal_one_by_one(stats: list[tuple[int, int, int]]) -> None:
    array = np.array(stats, dtype=np.int64).reshape(-1, 3).T
    assert _heuristic_tokens_of_each(*array).tolist() == [_heuristic_tokens(*s) for s in stats]


class _ScannedSelection(_SummedSelection):
    """The summed selection, every chunk of the ranking tried one by one (no bulk skipping)."""

    def worth_trying(self, ranked: list[int], target_tokens: int) -> Iterator[int]:
        return _Selection.worth_trying(self, ranked, target_tokens)


class _ScanningMeter(_HeuristicMeter):
    def selection(self, chunks):  # type: ignore[no-untyped-def]
        return _ScannedSelection(chunks)


PROSE = st.lists(
    st.lists(
        st.sampled_from(["vault", "code", "4242", "row", "nominal", "数据", "x" * 40]), max_size=30
    ).map(" ".join),
    min_size=2,
    max_size=80,
).map("\n".join)


@PROPERTY
@given(st.one_of(PROSE, LINES), QUERY, st.floats(0.01, 1.0))
def test_bulk_skipping_keeps_the_chunks_the_plain_scan_keeps(
    text: str, query: str, fraction: float
) -> None:
    target = max(1, int(estimator.count(text) * fraction))
    meter, scanning = _HeuristicMeter(estimator), _ScanningMeter(estimator)
    chunks = _chunk_text(text, target, meter)
    if len(chunks.texts) < 2:
        return
    terms = [tokenize_terms(chunk) for chunk in chunks.texts]
    scores = chunk_scores(tokenize_terms(query), terms)
    assert _select(chunks, scores, target, meter) == _select(chunks, scores, target, scanning)


def test_the_speed_shape_compresses_as_the_plain_scan() -> None:
    # Thousands of chunks, a few lines split, a target far below the text: the bench's shape.
    rows = [
        f"row {i} status nominal, queue depth {i % 17}, latency {i * 3} ms" for i in range(3000)
    ]
    rows[1234] = "the vault code for order 4242 is alpha-bravo-nine " * 30
    rows[2900] = "x" * 900
    text = "\n".join(rows)
    result = compress_extractive(text, "vault code 4242", 400, estimator)
    assert result.applied and "alpha-bravo-nine" in result.text
    meter = _ScanningMeter(estimator)
    chunks = _chunk_text(text, 400, meter)
    terms = [tokenize_terms(chunk) for chunk in chunks.texts]
    scores = chunk_scores(tokenize_terms("vault code 4242"), terms)
    scores[0] += 0.35
    scores[-1] += 0.35
    fast = _select(chunks, scores, 400, _HeuristicMeter(estimator))
    assert fast == _select(chunks, scores, 400, meter)
