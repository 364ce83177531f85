"""What a case's kept items score against what it expects, and a run's metrics over its cases.

Pure: the runner hands in what each resolve kept, in the order it was kept.

- A case *hits* when everything it expects was kept: each document by id, each
  ``memories_containing`` entry inside a kept memory's text, each ``text_containing`` entry inside
  any kept item's text (both case-insensitive).
- ``kept_precision``: the share of a case's kept documents that it expects, averaged over the cases
  that name documents.
- ``ndcg``: binary gains (an expected document 1, any other 0) over the kept documents in their
  kept order, cut off at the kept count (at most 10), averaged over the cases that name documents.
- ``tokens_mean``: the request's tokens after the context was injected (and compressed), averaged;
  ``latency_p50_ms``: the median resolve time.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

NDCG_CUTOFF = 10
# Mean tokens rising by more than this share is reported as a regression.
TOKENS_TOLERANCE = 0.10


@dataclass(frozen=True)
class Kept:
    """What one resolve kept, in kept order."""

    documents: Sequence[str] = ()
    memory_texts: Sequence[str] = ()
    texts: Sequence[str] = ()


@dataclass(frozen=True)
class Expected:
    documents: Sequence[str] = ()
    memories_containing: Sequence[str] = ()
    text_containing: Sequence[str] = ()


@dataclass(frozen=True)
class Score:
    hit: bool
    missing: dict[str, list[str]] = field(default_factory=dict)
    precision: float | None = None
    ndcg: float | None = None


def contained(needle: str, texts: Sequence[str]) -> bool:
    wanted = needle.casefold()
    return any(wanted in text.casefold() for text in texts)


def score(expected: Expected, kept: Kept) -> Score:
    kept_documents = list(dict.fromkeys(kept.documents))
    missing = {
        "documents": [d for d in expected.documents if d not in kept_documents],
        "memories_containing": [
            m for m in expected.memories_containing if not contained(m, kept.memory_texts)
        ],
        "text_containing": [t for t in expected.text_containing if not contained(t, kept.texts)],
    }
    missing = {key: values for key, values in missing.items() if values}
    if not expected.documents:
        return Score(hit=not missing, missing=missing)
    wanted = set(expected.documents)
    relevant = [1 if d in wanted else 0 for d in kept_documents]
    precision = sum(relevant) / len(relevant) if relevant else 0.0
    return Score(
        hit=not missing, missing=missing, precision=precision, ndcg=ndcg(relevant, len(wanted))
    )


def ndcg(relevant: Sequence[int], expected_count: int) -> float:
    """Binary nDCG of the kept order, cut off at the kept count (at most ``NDCG_CUTOFF``)."""
    cutoff = min(len(relevant), NDCG_CUTOFF)
    if cutoff == 0 or expected_count == 0:
        return 0.0
    gains = sum(gain / math.log2(rank + 2) for rank, gain in enumerate(relevant[:cutoff]))
    ideal = sum(1 / math.log2(rank + 2) for rank in range(min(expected_count, cutoff)))
    return gains / ideal


def mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def metrics(
    scores: Sequence[Score], tokens: Sequence[int], latencies_ms: Sequence[float]
) -> dict[str, float | int | None]:
    precisions = [s.precision for s in scores if s.precision is not None]
    ndcgs = [s.ndcg for s in scores if s.ndcg is not None]
    return {
        "cases": len(scores),
        "hit_rate": mean([1.0 if s.hit else 0.0 for s in scores]),
        "kept_precision": mean(precisions),
        "ndcg": mean(ndcgs),
        "tokens_mean": round(statistics.fmean(tokens), 1) if tokens else None,
        "latency_p50_ms": round(statistics.median(latencies_ms), 3) if latencies_ms else None,
    }


def regression(current: dict[str, object], previous: dict[str, object]) -> str | None:
    """What got worse since the previous run: the hit rate fell, or mean tokens rose by more
    than ``TOKENS_TOLERANCE``; None when neither."""
    said: list[str] = []
    now_hit, then_hit = current.get("hit_rate"), previous.get("hit_rate")
    if (
        isinstance(now_hit, float | int)
        and isinstance(then_hit, float | int)
        and now_hit < then_hit
    ):
        said.append(f"hit rate fell from {then_hit:.0%} to {now_hit:.0%}")
    now_tokens, then_tokens = current.get("tokens_mean"), previous.get("tokens_mean")
    if (
        isinstance(now_tokens, float | int)
        and isinstance(then_tokens, float | int)
        and then_tokens > 0
        and now_tokens > then_tokens * (1 + TOKENS_TOLERANCE)
    ):
        rise = now_tokens / then_tokens - 1
        said.append(f"mean tokens rose {rise:.0%} ({then_tokens:g} → {now_tokens:g})")
    return "; ".join(said) + " since the previous run" if said else None
