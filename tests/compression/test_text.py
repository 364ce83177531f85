"""Extractive compression, JSON string-leaf compression, middle truncation and the BM25 helpers."""

from __future__ import annotations

import json
import math
import unicodedata
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compression.text import (
    GAP,
    OMISSION_MARKER,
    TextResult,
    bm25_scores,
    compress_extractive,
    tokenize_terms,
    truncate_middle,
)
from contextplatform.core.estimation import HeuristicEstimator, is_cjk
from tests.compression.conversations import (
    FILE_ARGUMENTS,
    REFUND_ANSWER,
    REFUND_LINE,
    REFUND_QUESTION,
    service_log,
)

estimator = HeuristicEstimator()
PROPERTY = settings(max_examples=200, deadline=None)


class SlowHeuristic:
    """The heuristic under another type: the engine counts every joined candidate with it instead
    of summing per-chunk stats, so both paths must agree."""

    name = "slow_heuristic"

    def count(self, text: str) -> int:
        return estimator.count(text)


class BytesPerToken:
    """A calibrated-style counter: ceil(bytes / 3)."""

    name = "bytes3"

    def count(self, text: str) -> int:
        return -(-len(text.encode("utf-8")) // 3)


def filler(count: int, start: int = 0) -> list[str]:
    return [
        f"row {i} status nominal latency within bounds nothing to report"
        for i in range(start, start + count)
    ]


def short_rows(count: int) -> list[str]:
    """Rows below the smallest chunk size (8 tokens), so each stays one chunk."""
    return [f"row {i} ok" for i in range(count)]


def haystack(needle: str, lines: int = 200) -> str:
    rows = filler(lines)
    rows[lines * 7 // 12] = needle
    return "\n".join(rows)


# --- extractive text: examples pinning the algorithm ---------------------------------------------


def test_best_chunk_survives_ten_times_compression() -> None:
    text = haystack("The vault code for the blue door is 7481, rotated every Monday.")
    original = estimator.count(text)
    result = compress_extractive(
        text, "what is the vault code of the blue door", original // 10, estimator
    )
    assert result.applied and result.format == "text"
    assert "The vault code for the blue door is 7481" in result.text
    assert result.tokens_after == estimator.count(result.text) <= original // 10
    assert result.tokens_before == original


def test_boundary_bonus_keeps_first_and_last_chunks() -> None:
    text = haystack("The vault code for the blue door is 7481.")
    result = compress_extractive(
        text, "vault code blue door", estimator.count(text) // 10, estimator
    )
    lines = result.text.split("\n")
    assert lines[0] == "row 0 status nominal latency within bounds nothing to report"
    assert lines[-1] == "row 199 status nominal latency within bounds nothing to report"


def test_without_query_terms_the_bonus_alone_ranks_the_boundaries_first() -> None:
    rows = short_rows(10)
    text = "\n".join(rows)
    two_rows = estimator.count(rows[0] + "\n" + GAP + "\n" + rows[9])
    result = compress_extractive(text, "", two_rows, estimator)
    assert result.text == rows[0] + "\n" + GAP + "\n" + rows[9]
    assert result.omitted_chunks == 8


def test_marker_sits_on_its_own_line_between_non_adjacent_chunks_only() -> None:
    rows = filler(12)
    rows[5] = "alpha bravo charlie"
    rows[6] = "alpha bravo delta"
    text = "\n".join(rows)
    kept = [rows[0], rows[5], rows[6], rows[11]]
    expected = (
        f"{rows[0]}\n\n{OMISSION_MARKER}\n\n{rows[5]}\n{rows[6]}\n\n{OMISSION_MARKER}\n\n{rows[11]}"
    )
    result = compress_extractive(text, "alpha bravo", estimator.count(expected), estimator)
    assert result.text == expected
    assert result.omitted_chunks == 12 - len(kept)


def test_leading_and_trailing_omissions_get_no_marker() -> None:
    rows = short_rows(30)
    rows[15] = "needle mentions zebra"
    text = "\n".join(rows)
    # Room for the best chunk only: no boundary fits next to it with a marker.
    result = compress_extractive(text, "zebra", estimator.count(rows[15]) + 1, estimator)
    assert result.text == rows[15]
    assert result.omitted_chunks == 29


def test_best_chunk_is_reserved_before_the_boundaries() -> None:
    rows = short_rows(30)
    rows[15] = "zebra"
    text = "\n".join(rows)
    # The two boundaries and a marker would fit, but the best chunk goes in first.
    target = estimator.count(rows[0] + "\n" + GAP + "\n" + rows[29]) + 1
    result = compress_extractive(text, "zebra", target, estimator)
    assert "zebra" in result.text.split("\n")


# Issue 13: what the compress stage asks of a 240-line tool output read by a call that names only
# a file; its query is the call followed by the user's question.
ISSUE_QUERY = f"read_file {FILE_ARGUMENTS} {REFUND_QUESTION}"


@pytest.mark.parametrize("counter", [estimator, SlowHeuristic(), BytesPerToken()])
def test_the_line_that_answers_survives_60_tokens_whole(counter: Any) -> None:
    text = service_log()
    result = compress_extractive(text, ISSUE_QUERY, 60, counter)
    assert result.applied and counter.count(text) > 40 * 60
    assert result.tokens_after == counter.count(result.text) <= 60
    # The line was cut in two chunks (the terms in one, the answer in the other): both are kept,
    # joined as the line was.
    assert REFUND_LINE in result.text.split("\n")


@pytest.mark.parametrize("target", [30, 60, 150, 400])
def test_whole_lines_are_counted_alike_by_sums_and_by_joining(target: int) -> None:
    text = service_log()
    summed = compress_extractive(text, ISSUE_QUERY, target, estimator)
    assert summed.applied
    assert compress_extractive(text, ISSUE_QUERY, target, SlowHeuristic()) == summed


@pytest.mark.parametrize("needle_at", [0, 1, 60, 137, 238, 239])
def test_the_answering_line_survives_wherever_it_is(needle_at: int) -> None:
    result = compress_extractive(service_log(needle_at=needle_at), ISSUE_QUERY, 60, estimator)
    assert result.applied and REFUND_ANSWER in result.text
    assert any(line.endswith(REFUND_LINE[3:]) for line in result.text.split("\n"))


def test_a_cut_line_that_does_not_fit_whole_gives_its_best_piece() -> None:
    words = [f"word{i}" for i in range(400)]
    words[200] = "needle"
    rows = [*filler(20), " ".join(words), *filler(20, start=20)]
    result = compress_extractive("\n".join(rows), "needle", 60, estimator)
    assert result.applied and "needle" in result.text and result.tokens_after <= 60


def test_lines_are_trimmed_and_blank_lines_dropped() -> None:
    rows = [f"  {row}\t" for row in filler(40)]
    text = "\n\n".join(rows)
    result = compress_extractive(text, "row 20", estimator.count(text) // 4, estimator)
    assert result.applied
    for line in result.text.split("\n"):
        assert line == line.strip()


def test_a_long_line_is_split_by_words() -> None:
    words = [f"word{i}" for i in range(2000)]
    words[1500] = "needle"
    text = " ".join(words)
    result = compress_extractive(text, "needle", 200, estimator)
    assert result.applied and "needle" in result.text
    assert OMISSION_MARKER in result.text
    assert result.tokens_after <= 200


def test_a_single_long_word_is_split_by_code_points() -> None:
    text = "ab" * 4000 + "€" * 10
    result = compress_extractive(text, "", 200, estimator)
    assert result.applied
    pieces = [line for line in result.text.split("\n") if line and line != OMISSION_MARKER]
    assert text.startswith(pieces[0]) and text.endswith(pieces[-1])
    assert all(piece in text for piece in pieces)


@pytest.mark.parametrize("target", [0, -5])
def test_no_target_means_unchanged(target: int) -> None:
    text = haystack("needle")
    result = compress_extractive(text, "needle", target, estimator)
    assert result == TextResult(
        text, False, "text", 0, estimator.count(text), estimator.count(text)
    )


def test_target_at_or_above_the_original_means_unchanged() -> None:
    text = haystack("needle", lines=20)
    result = compress_extractive(text, "needle", estimator.count(text), estimator)
    assert not result.applied and result.text == text


def test_a_single_chunk_cannot_be_compressed() -> None:
    text = "just one short line"
    result = compress_extractive(text, "line", 2, estimator)
    assert not result.applied and result.text == text


def test_nothing_fitting_leaves_the_text_unchanged() -> None:
    text = "\n".join(filler(20))
    result = compress_extractive(text, "row", 1, estimator)
    assert not result.applied and result.text == text and result.omitted_chunks == 0


def test_other_estimators_are_used_for_every_count() -> None:
    text = haystack("The vault code for the blue door is 7481.")
    counter = BytesPerToken()
    target = counter.count(text) // 10
    result = compress_extractive(text, "vault code blue door", target, counter)
    assert result.applied and "7481" in result.text
    assert result.tokens_before == counter.count(text)
    assert result.tokens_after == counter.count(result.text) <= target


def test_cjk_text_is_ranked_by_unigrams_and_bigrams() -> None:
    rows = [f"第{i}行 普通 日志 内容 没有 异常" for i in range(80)]
    rows[40] = "数据库 连接 失败 错误 代码 42"
    text = "\n".join(rows)
    result = compress_extractive(text, "数据库连接失败", estimator.count(text) // 8, estimator)
    assert result.applied and "数据库 连接 失败" in result.text


# --- JSON -------------------------------------------------------------------------------------------


def long_log(needle: str | None = None, lines: int = 80) -> str:
    rows = filler(lines)
    if needle:
        rows[lines // 2] = needle
    return "\n".join(rows)


def test_json_compresses_only_string_leaves_and_keeps_key_order() -> None:
    zeta, log = json.dumps(long_log("disk failure on volume 7")), json.dumps(long_log())
    document = (
        f'{{"zeta": {zeta}, "alpha": 1.50, "alpha": 2, "big": 12345678901234567890, "exp": 1E+5, '
        f'"flags": [true, false, null], "nested": {{"log": {log}, "id": "x-1"}}}}'
    )
    result = compress_extractive(
        document, "disk failure", estimator.count(document) // 5, estimator
    )
    assert result.applied and result.format == "json"
    assert result.text.startswith('{"zeta":"')
    assert (
        '"alpha":1.50,"alpha":2,"big":12345678901234567890,"exp":1E+5,"flags":[true,false,null]'
        in result.text
    )
    pairs = json.loads(result.text, object_pairs_hook=lambda pairs: pairs)
    assert [key for key, _ in pairs] == ["zeta", "alpha", "alpha", "big", "exp", "flags", "nested"]
    assert "disk failure on volume 7" in pairs[0][1]
    assert OMISSION_MARKER in pairs[0][1]
    assert dict(pairs[6][1])["id"] == "x-1"


def test_json_string_leaf_keeps_the_line_that_answers_at_60_tokens() -> None:
    output = {"path": "/srv/app/current.txt", "exit_code": 0, "content": service_log()}
    document = json.dumps(output)
    result = compress_extractive(document, ISSUE_QUERY, 60, estimator)
    assert result.applied and result.format == "json" and result.tokens_after <= 60
    compressed = json.loads(result.text)
    assert list(compressed) == ["path", "exit_code", "content"] and compressed["exit_code"] == 0
    assert REFUND_LINE in compressed["content"].split("\n")


@pytest.mark.parametrize("holder", [0, 2, 4])
def test_json_the_leaf_with_the_best_line_gets_room_for_it_first(holder: int) -> None:
    # Five results share the budget by size: a fifth is too little for the answering line, so
    # its leaf is given room for that line first and the others share the rest.
    lines = service_log(needle_at=None).split("\n")
    results = [
        {"title": f"part {i}", "content": "\n".join(lines[i * 48 : (i + 1) * 48])} for i in range(5)
    ]
    content = results[holder]["content"].split("\n")
    content[20] = REFUND_LINE
    results[holder]["content"] = "\n".join(content)
    document = json.dumps({"results": results})
    target = estimator.count(document) // 30
    result = compress_extractive(document, ISSUE_QUERY, target, estimator)
    assert result.applied and result.format == "json" and result.tokens_after <= target
    compressed = json.loads(result.text)["results"]
    assert [item["title"] for item in compressed] == [f"part {i}" for i in range(5)]
    assert REFUND_LINE in compressed[holder]["content"].split("\n")
    others = [i for i in range(5) if i != holder]
    assert all(len(compressed[i]["content"]) < len(results[i]["content"]) for i in others)


def test_json_string_document_keeps_the_line_that_answers_at_60_tokens() -> None:
    document = json.dumps(service_log())
    result = compress_extractive(document, ISSUE_QUERY, 60, estimator)
    assert result.applied and result.format == "json" and result.tokens_after <= 60
    assert REFUND_LINE in json.loads(result.text).split("\n")


def test_json_keys_join_the_query_on_the_way_down() -> None:
    rows = filler(60)
    rows[30] = "the weather turned to heavy snow"
    value = {"weather": "\n".join(rows)}
    document = json.dumps(value)
    result = compress_extractive(document, "", estimator.count(document) // 6, estimator)
    assert result.applied
    assert "the weather turned to heavy snow" in json.loads(result.text)["weather"]


def test_json_string_document_is_decoded_compressed_and_re_encoded() -> None:
    document = json.dumps(long_log("the vault code is 7481", lines=150))
    result = compress_extractive(document, "vault code", estimator.count(document) // 8, estimator)
    assert result.applied and result.format == "json"
    inner = json.loads(result.text)
    assert isinstance(inner, str)
    assert "the vault code is 7481" in inner and OMISSION_MARKER in inner
    assert result.tokens_after <= estimator.count(document) // 8


@pytest.mark.parametrize(
    "document",
    [
        "{not json\n" + long_log(),
        "[1, 2,\n" + long_log(),
        '{"a": "b"} trailing\n' + long_log(),
        '{"a": NaN, "log": ' + json.dumps(long_log()) + "}",
        "[" + long_log(),
    ],
)
def test_malformed_json_is_left_unchanged(document: str) -> None:
    result = compress_extractive(document, "row", estimator.count(document) // 5, estimator)
    assert not result.applied and result.text == document and result.format == "text"


@pytest.mark.parametrize("document", ["12345678901234567890", "true", "null", "-1.5e300"])
def test_other_json_scalars_are_left_unchanged(document: str) -> None:
    result = compress_extractive(document, "x", 1, estimator)
    assert not result.applied and result.text == document and result.format == "json"


def test_json_without_string_leaves_is_left_unchanged() -> None:
    document = json.dumps(list(range(5000)))
    result = compress_extractive(document, "1", 100, estimator)
    assert not result.applied and result.text == document


def test_json_whose_skeleton_exceeds_the_target_is_left_unchanged() -> None:
    document = json.dumps({f"key{i}": "value " * 20 for i in range(200)})
    result = compress_extractive(document, "value", 50, estimator)
    assert not result.applied and result.text == document


def test_json_lone_surrogate_escapes_stay_valid() -> None:
    value = {"odd": "\ud800 kept as an escape", "log": long_log("needle line here")}
    document = json.dumps(value)
    result = compress_extractive(document, "needle", estimator.count(document) // 4, estimator)
    assert result.applied
    decoded = json.loads(result.text)
    assert decoded["odd"] == value["odd"] and "needle line here" in decoded["log"]


def test_json_leaves_within_their_share_are_kept_verbatim() -> None:
    value = {"small": "short note", "big": long_log("needle line here", lines=120)}
    document = json.dumps(value)
    result = compress_extractive(document, "needle", estimator.count(document) // 4, estimator)
    assert result.applied
    decoded = json.loads(result.text)
    assert decoded["small"] == "short note" and OMISSION_MARKER in decoded["big"]


def test_deeply_nested_json_is_left_unchanged() -> None:
    document = "[" * 100_000 + "]" * 100_000
    result = compress_extractive(document, "x", 10, estimator)
    assert not result.applied and result.text == document


def test_text_with_a_lone_surrogate_is_left_unchanged() -> None:
    text = "\ud800 broken\n" + long_log()
    assert not compress_extractive(text, "row", 50, estimator).applied
    assert not truncate_middle(text, 50, estimator).applied


def test_json_output_is_compact_and_keeps_non_ascii() -> None:
    document = json.dumps({"note": "naïve café ✓", "log": long_log("needle")}, indent=2)
    result = compress_extractive(document, "needle", estimator.count(document) // 4, estimator)
    assert result.applied and '"note":"naïve café ✓"' in result.text


# --- truncate_middle --------------------------------------------------------------------------------


def split_truncation(text: str, result: str) -> tuple[int, int]:
    keep = len(result) - len(GAP)
    head = (keep + 1) // 2
    tail = keep - head
    assert result == text[:head] + GAP + text[len(text) - tail :]
    return head, tail


def test_truncate_keeps_the_largest_head_and_tail_that_fit() -> None:
    text = "abcdefghij" * 100
    result = truncate_middle(text, 30, estimator)
    assert result.applied and result.omitted_chunks == 1 and result.format == "text"
    head, tail = split_truncation(text, result.text)
    assert head - tail in (0, 1)
    assert result.tokens_after == estimator.count(result.text) <= 30
    keep = head + tail + 1
    bigger = text[: (keep + 1) // 2] + GAP + text[len(text) - (keep - (keep + 1) // 2) :]
    assert estimator.count(bigger) > 30


def test_truncate_marker_layout() -> None:
    result = truncate_middle("x" * 400, 20, estimator)
    assert f"\n{OMISSION_MARKER}\n" in result.text
    assert result.text.count(OMISSION_MARKER) == 1


def test_truncate_keeps_whole_code_points() -> None:
    text = "😀é中" * 300
    result = truncate_middle(text, 60, estimator)
    assert result.applied
    split_truncation(text, result.text)
    result.text.encode("utf-8")


def test_truncate_leaves_fitting_text_alone() -> None:
    result = truncate_middle("short text", 100, estimator)
    assert result == TextResult("short text", False, "text", 0, 3, 3)


def test_truncate_leaves_the_text_alone_when_nothing_fits() -> None:
    text = "y" * 1000
    result = truncate_middle(text, 3, estimator)
    assert not result.applied and result.text == text


# --- terms, BM25, lexical score ----------------------------------------------------------------------


def test_term_tokenizer() -> None:
    assert tokenize_terms("Hello, World! a_b x I") == ["hello", "world", "a_b"]
    assert sorted(tokenize_terms("中文字 ab")) == sorted(["ab", "中", "文", "中文", "字", "文字"])
    assert tokenize_terms("$5 + <tag>") == ["$", "+", "<", "tag", ">"]
    assert tokenize_terms("x²y ⅫIV") == ["iv"]  # Nl/No characters separate, as in Go
    assert tokenize_terms("İSTANBUL") == ["istanbul"]
    assert sorted(tokenize_terms("😀 ab😀")) == ["ab", "😀", "😀"]


def test_bm25_scores_by_hand() -> None:
    scores = bm25_scores("apple", ["apple banana", "cherry"])
    idf = math.log(1 + (2 - 1 + 0.5) / (1 + 0.5))
    expected = idf * (1 * 2.2) / (1 + 1.2 * (1 - 0.75 + 0.75 * 2 / 1.5))
    assert scores == pytest.approx([expected, 0.0])


def test_bm25_counts_unique_query_terms_once() -> None:
    assert bm25_scores("apple apple", ["apple pie", "plum"]) == bm25_scores(
        "apple", ["apple pie", "plum"]
    )
    assert bm25_scores("", ["a b"]) == [0.0]
    assert bm25_scores("x", []) == []


def reference_terms(text: str) -> list[str]:
    """A rune-by-rune port of vLLM Semantic Router's BM25 term tokenizer ``tokenizeTerms`` (its
    context compression, in Go), to check ours against."""
    terms: list[str] = []
    word: list[str] = []
    previous_cjk = ""

    def flush() -> None:
        if len(word) > 1:
            terms.append("".join(word))
        word.clear()

    for char in text.replace("\u0130", "i").replace("\u03a3", "\u03c3").lower():
        category = unicodedata.category(char)
        if is_cjk(char):
            flush()
            terms.append(char)
            if previous_cjk:
                terms.append(previous_cjk + char)
            previous_cjk = char
        elif category[0] == "L" or category == "Nd" or char == "_":
            previous_cjk = ""
            word.append(char)
        elif category[0] == "S":
            flush()
            previous_cjk = ""
            terms.append(char)
        else:
            flush()
            previous_cjk = ""
    flush()
    return terms


@PROPERTY
@given(st.text(max_size=200))
def test_term_tokenizer_matches_the_rune_by_rune_port(text: str) -> None:
    assert sorted(tokenize_terms(text)) == sorted(reference_terms(text))


# --- properties -------------------------------------------------------------------------------------

WORDS = st.sampled_from(
    [
        "error",
        "disk",
        "vault",
        "code",
        "7481",
        "naïve",
        "数据库",
        "连接",
        "日本語",
        "😀",
        "x",
        "{",
        "[",
        "_id",
        "€",
    ]
)
LINE_TEXT = st.text(
    alphabet=st.sampled_from(list("abcdef xyz019 \t_-.,:;'\"{}[]éü中文字日本😀🎉€→²")), max_size=60
)
LINE = st.one_of(st.lists(WORDS, max_size=12).map(" ".join), LINE_TEXT)
TEXT = st.lists(LINE, max_size=40).map("\n".join)
QUERY = st.one_of(st.lists(WORDS, max_size=5).map(" ".join), st.text(max_size=20))
FRACTION = st.floats(min_value=0.0, max_value=1.2)


def target_for(text: str, fraction: float) -> int:
    return int(estimator.count(text) * fraction)


def assert_sound(text: str, result: TextResult, target: int, counter: Any = estimator) -> None:
    assert result.tokens_before == counter.count(text)
    assert result.tokens_after == counter.count(result.text)
    assert result.tokens_after <= result.tokens_before
    if text:
        assert result.text
    if result.applied:
        assert result.tokens_after <= target
        assert result.tokens_after < result.tokens_before
    else:
        assert result.text == text and result.omitted_chunks == 0


@PROPERTY
@given(TEXT, QUERY, FRACTION)
def test_extractive_text_is_never_longer_nor_empty(text: str, query: str, fraction: float) -> None:
    target = target_for(text, fraction)
    result = compress_extractive(text, query, target, estimator)
    assert_sound(text, result, target)
    if result.applied and result.format == "text":
        # Chunks are whole lines, words of a line, or code points of a single long word.
        kept = [line for line in result.text.split("\n") if line and line != OMISSION_MARKER]
        assert all(word in text for line in kept for word in line.split())
    assert compress_extractive(text, query, target, HeuristicEstimator()) == result


@PROPERTY
@given(TEXT, QUERY, FRACTION)
def test_summed_counts_match_joined_counts(text: str, query: str, fraction: float) -> None:
    target = target_for(text, fraction)
    assert compress_extractive(text, query, target, SlowHeuristic()) == compress_extractive(
        text, query, target, estimator
    )


@PROPERTY
@given(TEXT, QUERY, FRACTION)
def test_extractive_with_another_estimator_is_sound(text: str, query: str, fraction: float) -> None:
    counter = BytesPerToken()
    target = int(counter.count(text) * fraction)
    assert_sound(text, compress_extractive(text, query, target, counter), target, counter)


JSON_STRING = st.one_of(
    st.text(max_size=10), st.lists(LINE, min_size=4, max_size=40).map("\n".join)
)
JSON_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | JSON_STRING,
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6)
    ),
    max_leaves=20,
)
JSON_DOCUMENT = st.tuples(
    st.one_of(
        st.lists(JSON_VALUE, max_size=6),
        st.dictionaries(st.text(max_size=8), JSON_VALUE, max_size=6),
    ),
    st.sampled_from([None, 2]),
    st.booleans(),
).map(lambda args: json.dumps(args[0], indent=args[1], ensure_ascii=args[2]))


def skeleton(text: str) -> Any:
    """The document with every string leaf emptied; objects as ordered (key, value) pairs."""

    def strip(value: Any) -> Any:
        if isinstance(value, tuple):  # ("object", pairs)
            return ("object", [(key, strip(item)) for key, item in value[1]])
        if isinstance(value, list):
            return [strip(item) for item in value]
        if isinstance(value, str):
            return ""
        return (type(value).__name__, value)

    return strip(json.loads(text, object_pairs_hook=lambda pairs: ("object", pairs)))


@PROPERTY
@given(JSON_DOCUMENT, QUERY, FRACTION)
def test_compressed_json_keeps_its_structure(document: str, query: str, fraction: float) -> None:
    target = target_for(document, fraction)
    result = compress_extractive(document, query, target, estimator)
    assert_sound(document, result, target)
    assert result.format == "json"
    assert skeleton(result.text) == skeleton(document)
    assert compress_extractive(document, query, target, SlowHeuristic()) == result


@PROPERTY
@given(TEXT, QUERY, FRACTION)
def test_json_string_documents_stay_json_strings(text: str, query: str, fraction: float) -> None:
    document = json.dumps(text, ensure_ascii=False)
    target = target_for(document, fraction)
    result = compress_extractive(document, query, target, estimator)
    assert_sound(document, result, target)
    assert isinstance(json.loads(result.text), str)


@PROPERTY
@given(TEXT, FRACTION)
def test_truncation_keeps_a_prefix_and_a_suffix(text: str, fraction: float) -> None:
    target = target_for(text, fraction)
    result = truncate_middle(text, target, estimator)
    assert_sound(text, result, target)
    if result.applied:
        head, tail = split_truncation(text, result.text)
        assert 2 <= head + tail <= len(text) - 1
        assert result.omitted_chunks == 1
    assert truncate_middle(text, target, HeuristicEstimator()) == result
