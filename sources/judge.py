"""Relevance judges: score how well each candidate answers the query, 0-1.

INTERFACE ONLY — being implemented.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


class JudgeError(Exception):
    """The judge gave no usable answer (transport error, timeout, malformed reply)."""


@dataclass(frozen=True)
class JudgeCandidate:
    text: str
    title: str | None = None
    cosine: float | None = None  # the embedder's cosine similarity to the query, if known
    bm25: float | None = None  # raw BM25 score against the query, if known


class Judge(ABC):
    name: str

    @abstractmethod
    async def score(self, query: str, candidates: list[JudgeCandidate]) -> list[float]:
        """One score in [0, 1] per candidate, in order; raises JudgeError."""


def judge_for(deployment: str | None) -> Judge:
    """``None`` or ``"local"`` → the calibrated local judge; otherwise a configured LLM deployment."""
    raise NotImplementedError
