"""A bench-only source kind: a fixed list of items returned after a fixed sleep.

Registered only inside the benchmark process; production code never sees it.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from typing import Literal

from pydantic import Field

from sources.base import (
    ContextRequest,
    ContextSource,
    SourceResult,
    SourceSettings,
    register_source_kind,
)

BENCH_SOURCE_TYPE = "bench_static"
WORDS = [
    "refund",
    "policy",
    "window",
    "shipping",
    "order",
    "invoice",
    "warranty",
    "account",
    "billing",
    "customer",
    "device",
    "firmware",
    "update",
    "replacement",
    "support",
    "ticket",
    "escalation",
    "delivery",
    "carrier",
    "address",
    "payment",
    "subscription",
    "plan",
    "upgrade",
    "downgrade",
    "cancellation",
    "credit",
]


class BenchStaticSettings(SourceSettings):
    type: Literal["bench_static"] = "bench_static"
    items: int = Field(default=10, ge=0, le=1000)
    sleep_ms: float = Field(default=3.0, ge=0, le=10_000)
    min_words: int = Field(default=20, ge=1, le=2000)
    max_words: int = Field(default=120, ge=1, le=2000)


def item_text(source: str, index: int, words: int) -> str:
    """Deterministic filler text of ``words`` words."""
    body = " ".join(WORDS[(index * 7 + n) % len(WORDS)] for n in range(words))
    return f"[{source} #{index}] {body}."


@lru_cache(maxsize=64)
def item_texts(source: str, items: int, min_words: int, max_words: int) -> tuple[str, ...]:
    """Built once per source, so a fetch costs little more than its sleep."""
    span = max(max_words - min_words, 0) + 1
    return tuple(
        item_text(source, index, min_words + (index * 37) % span) for index in range(items)
    )


@register_source_kind
class BenchStaticSource(ContextSource):
    type = BENCH_SOURCE_TYPE
    Settings = BenchStaticSettings

    async def fetch(self, request: ContextRequest) -> SourceResult:
        settings: BenchStaticSettings = self.settings  # type: ignore[assignment]
        texts = item_texts(self.name, settings.items, settings.min_words, settings.max_words)
        await asyncio.sleep(settings.sleep_ms / 1000)
        # Within a source, later items rank a little lower, so packing has to interleave sources.
        return SourceResult(
            [
                self.item(
                    text, priority=max(self.priority - index % 5, 0), metadata={"index": index}
                )
                for index, text in enumerate(texts)
            ]
        )
