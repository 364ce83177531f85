"""Text-level compression: extractive (plain text and JSON string leaves) and middle truncation.

INTERFACE — being implemented. Pure functions; deterministic; never longer than the input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from compression.estimation import TokenEstimator

OMISSION_MARKER = "[... context omitted by route compression ...]"


@dataclass(frozen=True)
class TextResult:
    text: str  # the input itself when nothing could be done
    applied: bool
    format: Literal["text", "json"]
    omitted_chunks: int
    tokens_before: int
    tokens_after: int


def compress_extractive(text: str, query: str, target_tokens: int, estimator: TokenEstimator) -> TextResult:
    """vSR §2.4 for text, §2.5 for JSON (object/array: string leaves only; a JSON string document:
    its inner text); text that starts like JSON but is not valid JSON is left unchanged."""
    raise NotImplementedError


def truncate_middle(text: str, target_tokens: int, estimator: TokenEstimator) -> TextResult:
    """vSR §2.8: keep the beginning and the end, ``OMISSION_MARKER`` between, whole code points."""
    raise NotImplementedError


def lexical_score(query: str, text: str) -> float:
    """BM25 of ``text`` against ``query`` is done over a block set by the engine; this is the
    per-text tokenizer-backed helper the engine may use for ranking."""
    raise NotImplementedError
