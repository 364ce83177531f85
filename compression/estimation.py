"""Token estimation behind one interface, so an exact tokenizer can replace it later.

``heuristic`` is the conservative local estimate of vLLM Semantic Router
(``contextcompression.EstimateTokens``): the larger of a script-aware word count
(1.3 tokens per Latin word, 1.5 per Han, Hiragana, Katakana or Hangul character) and
UTF-8 bytes / 4, so whitespace-free blobs, minified JSON, emoji and CJK all count high.
"""

from __future__ import annotations

import json
import math
from typing import Any, Protocol


class TokenEstimator(Protocol):
    name: str

    def count(self, text: str) -> int: ...


def is_cjk(char: str) -> bool:
    code = ord(char)
    return (
        0x4E00 <= code <= 0x9FFF  # CJK unified ideographs
        or 0x3400 <= code <= 0x4DBF  # extension A
        or 0x20000 <= code <= 0x2EBEF  # extensions B-F
        or 0xF900 <= code <= 0xFAFF  # compatibility ideographs
        or 0x3040 <= code <= 0x309F  # Hiragana
        or 0x30A0 <= code <= 0x30FF  # Katakana
        or 0x31F0 <= code <= 0x31FF  # Katakana phonetic extensions
        or 0xFF66 <= code <= 0xFF9D  # half-width Katakana
        or 0xAC00 <= code <= 0xD7AF  # Hangul syllables
        or 0x1100 <= code <= 0x11FF  # Hangul Jamo
        or 0x3130 <= code <= 0x318F  # Hangul compatibility Jamo
    )


def script_aware_tokens(text: str) -> int:
    """``int(1.5 * cjk_chars + 1.3 * words)``; a field counts as a word unless it is all CJK."""
    cjk = 0
    words = 0
    fields = text.split()
    for field in fields:
        field_cjk = sum(1 for char in field if is_cjk(char))
        cjk += field_cjk
        if field_cjk < len(field):
            words += 1
    tokens = int(1.5 * cjk + 1.3 * words)
    return 1 if tokens == 0 and fields else tokens


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
        cjk = sum(1 for char in text if is_cjk(char))
        words = sum(1 for field in text.split() if any(not is_cjk(char) for char in field))
        return math.ceil(1.5 * cjk + 1.3 * words)


DEFAULT_ESTIMATOR: TokenEstimator = HeuristicEstimator()


def default_estimator() -> TokenEstimator:
    return DEFAULT_ESTIMATOR


def count_json(value: Any, estimator: TokenEstimator | None = None) -> int:
    """Estimate a whole JSON body (keys and punctuation included), as the budget sees it."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return (estimator or DEFAULT_ESTIMATOR).count(text)
