"""Pack context items into the token budget by priority, highest first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sources.base import ContextItem

PackReason = Literal["kept", "over_budget"]


@dataclass
class PackDecision:
    item: ContextItem
    kept: bool
    reason: PackReason
    order: int


def pack(items: list[ContextItem], budget: int) -> tuple[list[PackDecision], int]:
    """Sort by priority (stable, so a source's own order is kept within a priority) and keep each
    item that still fits; an item that does not fit is skipped and smaller ones after it may fit."""
    ranked = sorted(enumerate(items), key=lambda pair: -pair[1].priority)
    used = 0
    decisions: list[PackDecision] = []
    for order, item in ranked:
        if used + item.tokens > budget:
            decisions.append(PackDecision(item=item, kept=False, reason="over_budget", order=order))
            continue
        used += item.tokens
        decisions.append(PackDecision(item=item, kept=True, reason="kept", order=order))
    return decisions, used
