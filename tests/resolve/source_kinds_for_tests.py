"""Source kinds that exist only in the tests; importing this module registers them.

- ``test_sleep``: sleeps ``sleep_ms``, then fails (``fail``) or returns ``items`` (one item each,
  with the optional ``priorities``).
- ``test_hang``: never returns (only its timeout ends it).
- ``test_barrier``: returns only once ``parties`` sources of the same request are all in flight at
  the same time, so it can succeed only when the sources are fetched concurrently.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Literal

from pydantic import Field

from sources.base import (
    ContextRequest,
    ContextSource,
    ResolvedTurn,
    SourceResult,
    SourceSettings,
    register_source_kind,
)


class SleepSettings(SourceSettings):
    type: Literal["test_sleep"] = "test_sleep"
    priority: int = Field(default=40, ge=0, le=1000)
    sleep_ms: int = Field(default=0, ge=0)
    items: list[str] = Field(default_factory=list)
    priorities: list[int] | None = None
    fail: bool = False


@register_source_kind
class SleepSource(ContextSource):
    type = "test_sleep"
    Settings = SleepSettings

    async def fetch(self, request: ContextRequest) -> SourceResult:
        settings: SleepSettings = self.settings  # type: ignore[assignment]
        if settings.sleep_ms:
            await asyncio.sleep(settings.sleep_ms / 1000)
        if settings.fail:
            raise RuntimeError(f"test source {self.name} failed on purpose")
        priorities = settings.priorities or [self.priority] * len(settings.items)
        return SourceResult(
            [
                self.item(text, priority=priority, metadata={"index": index})
                for index, (text, priority) in enumerate(
                    zip(settings.items, priorities, strict=True)
                )
            ]
        )


class HangSettings(SourceSettings):
    type: Literal["test_hang"] = "test_hang"
    priority: int = Field(default=40, ge=0, le=1000)


@register_source_kind
class HangSource(ContextSource):
    type = "test_hang"
    Settings = HangSettings

    async def fetch(self, request: ContextRequest) -> SourceResult:
        await asyncio.Event().wait()  # nobody ever sets it
        raise AssertionError("unreachable")


class BarrierSettings(SourceSettings):
    type: Literal["test_barrier"] = "test_barrier"
    priority: int = Field(default=40, ge=0, le=1000)
    parties: int = Field(default=2, ge=1)


# request id -> names of the barrier sources currently in flight / ever arrived
IN_FLIGHT: dict[str, set[str]] = defaultdict(set)
MAX_IN_FLIGHT: dict[str, int] = defaultdict(int)
INTERVALS: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)


@register_source_kind
class BarrierSource(ContextSource):
    type = "test_barrier"
    Settings = BarrierSettings

    async def fetch(self, request: ContextRequest) -> SourceResult:
        settings: BarrierSettings = self.settings  # type: ignore[assignment]
        started = time.perf_counter()
        key = request.request_id
        IN_FLIGHT[key].add(self.name)
        MAX_IN_FLIGHT[key] = max(MAX_IN_FLIGHT[key], len(IN_FLIGHT[key]))
        try:
            # Wait (yielding to the loop) until every party has arrived; a sequential fetch never
            # gets there and ends on the source's timeout.
            while MAX_IN_FLIGHT[key] < settings.parties:
                await asyncio.sleep(0.001)
        finally:
            IN_FLIGHT[key].discard(self.name)
            INTERVALS[key][self.name] = (started, time.perf_counter())
        return SourceResult([self.item(f"{self.name} met {settings.parties - 1} others")])


class TurnHookSettings(SourceSettings):
    type: Literal["test_turn_hook"] = "test_turn_hook"
    priority: int = Field(default=40, ge=0, le=1000)
    fail: bool = False


# What the hooks of test_turn_hook sources heard, in order: (source name, turn) at resolve,
# (resolve id, answer) at hand-back.
RESOLVED_TURNS: list[tuple[str, ResolvedTurn]] = []
ANSWERS: list[tuple[str, str]] = []


@register_source_kind
class TurnHookSource(ContextSource):
    """Acts after the response, as the memory kind does, and records what it was told."""

    type = "test_turn_hook"
    Settings = TurnHookSettings

    async def fetch(self, request: ContextRequest) -> SourceResult:
        settings: TurnHookSettings = self.settings  # type: ignore[assignment]
        if settings.fail:
            raise RuntimeError("turn hook source failed on purpose")
        return SourceResult([self.item(f"{self.name} says hello")])

    def after_resolve(self, turn: ResolvedTurn) -> bool:
        RESOLVED_TURNS.append((self.name, turn))
        return True

    @classmethod
    def after_response(cls, resolve_id: str, answer: str) -> bool:
        # Every kind hears every answer; this one acts only on the resolves it served.
        if all(turn.resolve_id != resolve_id for _, turn in RESOLVED_TURNS):
            return False
        ANSWERS.append((resolve_id, answer))
        return True
