"""What the extractors produce and read: extracted statements, write decisions, the existing
memories those decisions may target, and the one error an extractor raises."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

MemoryKind = Literal["fact", "preference", "event"]
Action = Literal["add", "update", "delete"]
KINDS: tuple[MemoryKind, ...] = ("fact", "preference", "event")
ACTIONS: tuple[Action, ...] = ("add", "update", "delete")
# Topics whose new statement replaces the old one: a user lives in one place and has one job
# at a time, while a new pet or child comes beside the others.
SUPERSEDING_TOPICS = frozenset({"home", "work"})


class ExtractionError(Exception):
    """The extractor gave no usable answer (transport error, timeout, malformed or invalid reply)."""


@dataclass(frozen=True)
class ExtractedMemory:
    content: str
    kind: MemoryKind
    # What the statement is the user's current state of ("home", "work", ...): it then supersedes
    # the user's older memories of that topic (``memory.extraction.planning``).
    topic: str | None = None
    # Whether it tells a change (a move, a new job) rather than the present state ("I live in
    # Berlin"): a change supersedes every older memory of its topic, a present state only those
    # that name another place or employer.
    change: bool = False


@dataclass(frozen=True)
class ExistingMemory:
    id: int | str
    content: str
    embedding: Sequence[float] | None = None
    topic: str | None = None  # see ExtractedMemory.topic


@dataclass(frozen=True)
class MemoryDecision:
    action: Action
    content: str  # add / update: the memory's (new) text; delete: "" or the model's note
    kind: MemoryKind | None = None  # None on update: keep the memory's kind
    target_id: int | str | None = None  # update / delete: the existing memory's id
    # add: the existing memories the new one replaces, kept as history (superseded), not deleted
    supersedes: tuple[int | str, ...] = ()
