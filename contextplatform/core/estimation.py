"""Token estimation behind one interface, so an exact tokenizer can replace it later.

``heuristic`` is the conservative local estimate of vLLM Semantic Router
(``contextcompression.EstimateTokens``): the larger of a script-aware word count
(1.3 tokens per Latin word, 1.5 per Han, Hiragana, Katakana or Hangul character) and
UTF-8 bytes / 4, so whitespace-free blobs, minified JSON, emoji and CJK all count high.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Protocol


class TokenEstimator(Protocol):
    name: str

    def count(self, text: str) -> int: ...


CJK_RANGES = (
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\u3400-\u4dbf"  # extension A
    "\U00020000-\U0002ebef"  # extensions B-F
    "\uf900-\ufaff"  # compatibility ideographs
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\uff66-\uff9d"  # half-width Katakana
    "\uac00-\ud7af"  # Hangul syllables
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3130-\u318f"  # Hangul compatibility Jamo
)
CJK_CHAR = re.compile(f"[{CJK_RANGES}]")
CJK_FREE_FIELD = re.compile(f"[^\\s{CJK_RANGES}]")


def is_cjk(char: str) -> bool:
    return CJK_CHAR.match(char) is not None


def cjk_and_words(text: str) -> tuple[int, int]:
    """CJK characters, and whitespace-separated fields that hold anything besides CJK."""
    if text.isascii():  # the common case, and a hot path: no CJK, every field is a word
        return 0, len(text.split())
    cjk = len(CJK_CHAR.findall(text))
    if not cjk:
        return 0, len(text.split())
    words = sum(1 for field in text.split() if CJK_FREE_FIELD.search(field))
    return cjk, words


def script_aware_tokens(text: str) -> int:
    """``int(1.5 * cjk_chars + 1.3 * words)``; a field counts as a word unless it is all CJK."""
    return script_tokens(*cjk_and_words(text))


def script_tokens(cjk: int, words: int) -> int:
    """``script_aware_tokens`` from a text's CJK characters and words (at least 1 if it has any):
    for texts joined by whitespace it can be computed from running sums."""
    tokens = int(1.5 * cjk + 1.3 * words)
    return 1 if tokens == 0 and (cjk or words) else tokens


def utf8_quarter_tokens(text: str) -> int:
    return (len(text.encode("utf-8")) + 3) // 4


class HeuristicEstimator:
    """The conservative default: ``max(script_aware_tokens, ceil(utf8_bytes / 4))``."""

    name = "heuristic"

    def count(self, text: str) -> int:
        if not text:
            return 0
        return max(script_aware_tokens(text), utf8_quarter_tokens(text))


class ReflectionEstimator:
    """The memory reflection gate's estimate: the script-aware count alone, rounded up."""

    name = "script_aware"

    def count(self, text: str) -> int:
        if not text:
            return 0
        cjk, words = cjk_and_words(text)
        return math.ceil(1.5 * cjk + 1.3 * words)


DEFAULT_ESTIMATOR: TokenEstimator = HeuristicEstimator()


def default_estimator() -> TokenEstimator:
    return DEFAULT_ESTIMATOR


def count_json(value: Any, estimator: TokenEstimator | None = None) -> int:
    """Estimate a whole JSON body (keys and punctuation included), as the budget sees it."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return (estimator or DEFAULT_ESTIMATOR).count(text)
