"""Token estimation: the conservative heuristic and the reflection gate's estimate."""

from __future__ import annotations

import json

import pytest

from contextplatform.core.estimation import (
    HeuristicEstimator,
    ReflectionEstimator,
    count_json,
    default_estimator,
    is_cjk,
    script_aware_tokens,
    utf8_quarter_tokens,
)

heuristic = HeuristicEstimator()
reflection = ReflectionEstimator()


def utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def quarter(text: str) -> int:
    """ceil(utf8_bytes / 4) in integers."""
    return -(-utf8_bytes(text) // 4)


def test_estimator_names() -> None:
    assert heuristic.name == "heuristic"
    assert default_estimator().name == "heuristic"
    assert isinstance(default_estimator(), HeuristicEstimator)
    assert reflection.name == "script_aware"


def test_empty_text_counts_zero() -> None:
    assert heuristic.count("") == 0
    assert reflection.count("") == 0
    assert script_aware_tokens("") == 0


def test_whitespace_only_counts_its_bytes() -> None:
    # No words, but (4 + 3) // 4 = 1: whitespace is not free.
    assert script_aware_tokens("  \n\t") == 0
    assert heuristic.count("  \n\t") == 1


# --- Latin text -------------------------------------------------------------------------------


def test_short_latin_words_count_by_words() -> None:
    text = "I am a cat so we go to it ok"  # 10 words, 28 bytes
    assert script_aware_tokens(text) == 13  # int(1.3 * 10)
    assert quarter(text) == 7
    assert heuristic.count(text) == 13


def test_latin_word_count_is_floored() -> None:
    assert heuristic.count("a b c") == 3  # int(3.9) = 3; bytes 5 -> 2
    assert heuristic.count("a") == 1  # int(1.3) = 1
    assert heuristic.count("a b") == 2  # int(2.6) = 2


def test_long_latin_words_count_by_bytes() -> None:
    text = "Internationalization considerations notwithstanding"  # 3 words, 51 bytes
    assert script_aware_tokens(text) == 3
    assert heuristic.count(text) == 13  # ceil(51 / 4)


def test_latin_text_uses_whitespace_of_any_kind() -> None:
    assert script_aware_tokens("one\ttwo\nthree   four") == 5  # int(1.3 * 4)
    assert script_aware_tokens("one two three four") == 5


# --- CJK text ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("日本語", 4),  # Han: int(1.5 * 3) = 4 > ceil(9 / 4) = 3
        ("你好世界", 6),  # Han: 1.5 * 4
        ("ひらがな", 6),  # Hiragana
        ("カタカナ", 6),  # Katakana
        ("ｶﾀｶﾅ", 6),  # half-width Katakana
        ("한국어", 4),  # Hangul syllables: int(4.5)
        ("안녕하세요", 7),  # int(7.5)
    ],
)
def test_cjk_scripts_count_one_and_a_half_per_character(text: str, expected: int) -> None:
    assert all(is_cjk(char) for char in text)
    assert heuristic.count(text) == expected
    assert heuristic.count(text) >= quarter(text)


def test_cjk_fields_are_not_words_but_mixed_fields_are() -> None:
    assert script_aware_tokens("日本語 日本語") == 9  # 6 CJK, 0 words
    assert script_aware_tokens("日本語text") == 5  # 3 CJK + 1 mixed word: int(4.5 + 1.3)
    assert script_aware_tokens("日本語 text") == 5
    assert script_aware_tokens("東京 is big") == int(1.5 * 2 + 1.3 * 2)


def test_long_cjk_text_counts_more_than_bytes_over_four() -> None:
    text = "自然言語処理" * 50  # 300 Han characters, 900 bytes
    assert heuristic.count(text) == 450
    assert quarter(text) == 225


@pytest.mark.parametrize("char", ["a", "Z", "1", "é", "Ж", "\u0627", "😀", "\uff0c", "。"])
def test_non_cjk_characters(char: str) -> None:
    assert not is_cjk(char)


@pytest.mark.parametrize("char", ["中", "㐀", "𠀀", "豈", "ぁ", "ア", "ㇰ", "가", "ᄀ", "ㄱ"])
def test_cjk_characters(char: str) -> None:
    assert is_cjk(char)


# --- blobs where bytes / 4 wins ---------------------------------------------------------------


def test_whitespace_free_blob_counts_by_bytes() -> None:
    blob = "x" * 400
    assert script_aware_tokens(blob) == 1
    assert heuristic.count(blob) == 100


def test_base64_like_blob_counts_by_bytes() -> None:
    blob = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=" * 10  # 360 bytes, one field
    assert heuristic.count(blob) == 90


def test_minified_json_counts_by_bytes() -> None:
    payload = {"user_id": "u_123", "tier": "premium", "items": list(range(40)), "ok": True}
    text = json.dumps(payload, separators=(",", ":"))
    assert " " not in text
    assert script_aware_tokens(text) == 1
    assert heuristic.count(text) == quarter(text)
    assert heuristic.count(text) > 30


def test_emoji_count_by_bytes() -> None:
    text = "😀" * 10  # 4 bytes each, one field
    assert script_aware_tokens(text) == 1
    assert heuristic.count(text) == 10
    assert heuristic.count("🎉 🎉 🎉") == 4  # 14 bytes -> 4 beats int(3 * 1.3) = 3


def test_bytes_are_rounded_up() -> None:
    assert utf8_quarter_tokens("abcde") == 2
    assert utf8_quarter_tokens("abcd") == 1
    assert utf8_quarter_tokens("é") == 1  # 2 bytes
    assert heuristic.count("abcdefghi") == 3  # ceil(9 / 4)


@pytest.mark.parametrize(
    "text",
    [
        "The quick brown fox jumps over the lazy dog.",
        "日本語のテキストと English words mixed 한국어",
        '{"a":[1,2,3],"b":{"c":"d"}}',
        "short a b c d e f g h i j k",
        "emoji 🎉🎉 and text",
        "line one\nline two\n\n  indented",
    ],
)
def test_heuristic_is_the_larger_of_the_two_estimates(text: str) -> None:
    fields = text.split()
    cjk = sum(1 for char in text if is_cjk(char))
    words = sum(1 for field in fields if any(not is_cjk(char) for char in field))
    script = (15 * cjk + 13 * words) // 10
    assert heuristic.count(text) == max(script, quarter(text))


def test_heuristic_is_deterministic_and_monotone_in_repetition() -> None:
    text = "Refunds are issued within 30 days of purchase."
    assert heuristic.count(text) == heuristic.count(text)
    assert heuristic.count(text + " " + text) >= heuristic.count(text)


# --- reflection estimator ---------------------------------------------------------------------


def test_reflection_rounds_up() -> None:
    assert reflection.count("one two three") == 4  # ceil(3.9), the heuristic floors to 3
    assert script_aware_tokens("one two three") == 3
    assert reflection.count("a") == 2  # ceil(1.3)
    assert reflection.count("日本語") == 5  # ceil(4.5)
    assert reflection.count("日本") == 3  # exactly 3.0 stays 3
    assert reflection.count(" ".join(["w"] * 10)) == 13  # exactly 13.0 stays 13


def test_reflection_ignores_bytes() -> None:
    assert reflection.count("x" * 400) == 2  # one word
    assert reflection.count("日本語text") == 6  # ceil(4.5 + 1.3)


# --- count_json -------------------------------------------------------------------------------


def test_count_json_counts_compact_unescaped_json() -> None:
    body = {"messages": [{"role": "user", "content": "日本語で答えて"}]}
    compact = '{"messages":[{"role":"user","content":"日本語で答えて"}]}'
    assert count_json(body) == heuristic.count(compact)


def test_count_json_uses_the_given_estimator() -> None:
    class Fixed:
        name = "fixed"

        def count(self, text: str) -> int:
            return len(text)

    assert count_json({"a": 1}, Fixed()) == len('{"a":1}')
