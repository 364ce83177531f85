"""The reflection gate: what of the recalled memories is injected, after vLLM Semantic Router's.

Pure: no database, no model call. ``reflect`` takes the memories the store recalled (each with its
relevance score) and decides, for every one of them, whether it is injected and why not:

1. ``blocked``: its content matches one of ``block_patterns`` (``re.search``, case-sensitive as in
   vLLM Semantic Router; write ``(?i)`` for a case-insensitive pattern).
2. Recency decay: ``adjusted = score · 0.5 ** (age_days / recency_half_life_days)``, the age taken
   from ``updated_at`` (a memory restated later is young again). A future ``updated_at`` counts as
   age 0; a naive datetime is read as UTC.
3. The rest, by adjusted score (highest first; ties keep the recall order):
   * ``duplicate``: the cosine of its embedding with an already kept memory's is at least
     ``dedup_threshold``; when either embedding is missing (or the two differ in dimension) the
     normalised texts are compared for equality instead (``normalise_text``);
   * ``over_budget``: its ``ReflectionEstimator`` size (its ``injected_text``: the content, and
     the date it was said when known; 1.3 tokens per Latin word, 1.5 per Han / Hiragana /
     Katakana / Hangul character, rounded up) does not fit in what is left of
     ``max_inject_tokens``; a smaller memory further down may still fit;
   * ``kept`` otherwise.

Departures from vLLM Semantic Router, on purpose: dedup is by embedding cosine (it uses word-set
Jaccard), and a memory larger than the whole budget is skipped (it always keeps the first).

A disabled gate keeps everything, in score order, with no decay, blocking, dedup or budget.
The decisions come back in the order the gate considered them (adjusted score, highest first), so
``kept_memories(decisions)`` is the injection order.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from contextplatform.core.estimation import ReflectionEstimator

GateReason = Literal["kept", "blocked", "duplicate", "over_budget"]

MAX_BLOCK_PATTERNS = 100
MAX_BLOCK_PATTERN_CHARS = 500
SECONDS_PER_DAY = 86_400.0

ESTIMATOR = ReflectionEstimator()


class ReflectionConfig(BaseModel):
    """The gate's settings, with vLLM Semantic Router's defaults; ``recency_decay_days`` (its name
    for the half-life) is accepted too."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    enabled: bool = True
    max_inject_tokens: int = Field(default=2048, ge=1, le=1_000_000)
    recency_half_life_days: float = Field(
        default=30.0,
        gt=0,
        le=36_500,
        validation_alias=AliasChoices("recency_half_life_days", "recency_decay_days"),
    )
    dedup_threshold: float = Field(default=0.90, gt=0, le=1)
    block_patterns: list[str] = Field(default_factory=list, max_length=MAX_BLOCK_PATTERNS)

    _compiled: tuple[re.Pattern[str], ...] = PrivateAttr(default=())

    @model_validator(mode="before")
    @classmethod
    def one_half_life(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and {"recency_half_life_days", "recency_decay_days"} <= data.keys()
        ):
            raise ValueError(
                "give recency_half_life_days or its vLLM Semantic Router name recency_decay_days, not both"
            )
        return data

    @field_validator("block_patterns")
    @classmethod
    def patterns_compile(cls, patterns: list[str]) -> list[str]:
        for index, pattern in enumerate(patterns):
            if not pattern:
                raise ValueError(f"block_patterns[{index}] is empty (it would block everything)")
            if len(pattern) > MAX_BLOCK_PATTERN_CHARS:
                raise ValueError(
                    f"block_patterns[{index}] is longer than {MAX_BLOCK_PATTERN_CHARS} characters"
                )
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(
                    f"block_patterns[{index}] is not a valid regular expression: "
                    f"{pattern!r}: {error}"
                ) from None
        return patterns

    def model_post_init(self, context: object, /) -> None:
        self._compiled = tuple(re.compile(pattern) for pattern in self.block_patterns)

    @property
    def compiled_patterns(self) -> tuple[re.Pattern[str], ...]:
        return self._compiled


@dataclass(frozen=True)
class RecalledMemory:
    id: int | str
    content: str
    kind: str
    score: float  # relevance from recall, 0-1
    updated_at: datetime
    embedding: Sequence[float] | None = None
    observed_at: datetime | None = None  # when the user said it (the turn's time), if known


@dataclass(frozen=True)
class GateDecision:
    memory: RecalledMemory
    kept: bool
    reason: GateReason
    adjusted_score: float
    tokens: int = 0  # the memory's ReflectionEstimator size (0 when the gate never sized it)


# --------------------------------------------------------------------------------------------
# Small pure helpers (also used by memory.extraction).


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity; 0.0 when either vector is all zeros. Dimensions must match."""
    if len(a) != len(b):
        raise ValueError(f"vectors differ in dimension: {len(a)} and {len(b)}")
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm > 0 else 0.0


_NOT_WORD = re.compile(r"[\W_]+")


def normalise_text(text: str) -> str:
    """NFKC, case-folded, punctuation and runs of whitespace collapsed to one space."""
    return _NOT_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def similarity(
    a_text: str, a_vec: Sequence[float] | None, b_text: str, b_vec: Sequence[float] | None
) -> float:
    """The cosine of the embeddings when both are there and of one dimension; otherwise 1.0 for
    equal normalised texts and 0.0 for different ones."""
    if a_vec is not None and b_vec is not None and 0 < len(a_vec) == len(b_vec):
        return cosine(a_vec, b_vec)
    return 1.0 if normalise_text(a_text) == normalise_text(b_text) else 0.0


def similar(
    a_text: str,
    a_vec: Sequence[float] | None,
    b_text: str,
    b_vec: Sequence[float] | None,
    threshold: float,
) -> bool:
    """Near-duplicates: ``similarity`` at least ``threshold`` (which is in (0, 1])."""
    return similarity(a_text, a_vec, b_text, b_vec) >= threshold


def age_days(updated_at: datetime, now: datetime) -> float:
    """Days between ``updated_at`` and ``now``, never negative; naive datetimes read as UTC."""
    delta = _aware(now) - _aware(updated_at)
    return max(0.0, delta.total_seconds() / SECONDS_PER_DAY)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def said_on(moment: datetime) -> str:
    """The day something was said, ISO 8601 in UTC (a naive datetime is read as UTC)."""
    return _aware(moment).astimezone(UTC).date().isoformat()


def injected_text(memory: RecalledMemory) -> str:
    """What the model reads of a memory: its content, after the day the user said it when that
    is known ("(2026-11-03) User moved to Lisbon"), so that "when did I ..." has an answer and a
    relative time ("next Tuesday") its anchor."""
    if memory.observed_at is None:
        return memory.content
    return f"({said_on(memory.observed_at)}) {memory.content}"


def decayed(score: float, age: float, half_life_days: float) -> float:
    """``score · 0.5 ** (age / half_life_days)``."""
    # A float power is typed as possibly complex; a positive base keeps it real.
    weight: float = 0.5 ** (age / half_life_days)
    return score * weight


def is_blocked(content: str, patterns: Sequence[re.Pattern[str]]) -> bool:
    return any(pattern.search(content) for pattern in patterns)


# --------------------------------------------------------------------------------------------
# The gate.


def reflect(
    memories: Sequence[RecalledMemory], config: ReflectionConfig, *, now: datetime
) -> list[GateDecision]:
    """One decision per memory, in the order the gate considered them (see the module doc)."""
    if not config.enabled:
        ordered = sorted(memories, key=lambda memory: -memory.score)
        return [GateDecision(memory, True, "kept", memory.score) for memory in ordered]

    scored = [
        (
            memory,
            decayed(memory.score, age_days(memory.updated_at, now), config.recency_half_life_days),
        )
        for memory in memories
    ]
    scored.sort(key=lambda pair: -pair[1])  # stable: ties keep the recall order

    decisions: list[GateDecision] = []
    kept: list[RecalledMemory] = []
    remaining = config.max_inject_tokens
    for memory, adjusted in scored:
        if is_blocked(memory.content, config.compiled_patterns):
            decisions.append(GateDecision(memory, False, "blocked", adjusted))
            continue
        tokens = ESTIMATOR.count(injected_text(memory))
        if any(_near(memory, other, config.dedup_threshold) for other in kept):
            decisions.append(GateDecision(memory, False, "duplicate", adjusted, tokens))
        elif tokens > remaining:
            decisions.append(GateDecision(memory, False, "over_budget", adjusted, tokens))
        else:
            remaining -= tokens
            kept.append(memory)
            decisions.append(GateDecision(memory, True, "kept", adjusted, tokens))
    return decisions


def _near(a: RecalledMemory, b: RecalledMemory, threshold: float) -> bool:
    return similar(a.content, a.embedding, b.content, b.embedding, threshold)


def kept_memories(decisions: Sequence[GateDecision]) -> list[RecalledMemory]:
    """The memories to inject, in injection order."""
    return [decision.memory for decision in decisions if decision.kept]
