"""Write planning (``memory/extraction/planning.py``): update instead of add for near-duplicates,
one match per existing memory, collapse within a batch."""

from __future__ import annotations

import pytest

from memory.extraction.local import extract_local
from memory.extraction.planning import plan_writes
from memory.extraction.types import (
    ExistingMemory,
    ExtractedMemory,
    MemoryDecision,
)

# --------------------------------------------------------------------------------------------
# plan_writes


TEA = ExtractedMemory("User likes green tea", "preference")
LYON = ExtractedMemory("User lives in Lyon", "fact")


def test_plan_adds_new_memories() -> None:
    existing = [ExistingMemory(1, "User's name is Ada", [0.0, 1.0])]
    decisions = plan_writes([TEA, LYON], existing, [[1.0, 0.0], [0.6, 0.8]], 0.9)
    assert decisions == [
        MemoryDecision("add", "User likes green tea", "preference"),
        MemoryDecision("add", "User lives in Lyon", "fact"),
    ]


def test_plan_updates_a_near_duplicate_instead_of_adding() -> None:
    existing = [
        ExistingMemory(7, "User's name is Ada", [0.0, 1.0]),
        ExistingMemory(8, "User likes tea, green", [0.96, 0.28]),
    ]
    decisions = plan_writes([TEA], existing, [[1.0, 0.0]], 0.9)
    assert decisions == [MemoryDecision("update", "User likes green tea", "preference", 8)]


def test_plan_takes_the_most_similar_existing_memory_each_once() -> None:
    existing = [
        ExistingMemory(1, "close", [0.95, 0.312]),
        ExistingMemory(2, "closest", [0.99, 0.141]),
    ]
    first = ExtractedMemory("User likes green tea a lot", "preference")
    second = ExtractedMemory("User enjoys green tea", "preference")
    # the new ones are not near-duplicates of each other (cosine 0.80); each is of both existing
    # (first: 0.95 and 0.99; second: 0.95 and 0.88)
    decisions = plan_writes([first, second], existing, [[1.0, 0.0], [0.8, 0.6]], 0.85)
    assert [(d.action, d.target_id) for d in decisions] == [("update", 2), ("update", 1)]
    decisions = plan_writes([first, second], existing[:1], [[1.0, 0.0], [0.8, 0.6]], 0.85)
    assert [(d.action, d.target_id) for d in decisions] == [("update", 1), ("add", None)]


def test_plan_collapses_duplicates_within_the_batch_newest_wording_wins() -> None:
    newer = ExtractedMemory("User really likes green tea", "preference")
    decisions = plan_writes([TEA, LYON, newer], [], [[1.0, 0.0], [0.0, 1.0], [0.99, 0.141]], 0.9)
    assert decisions == [
        MemoryDecision("add", "User really likes green tea", "preference"),
        MemoryDecision("add", "User lives in Lyon", "fact"),
    ]


def test_plan_falls_back_to_text_without_vectors() -> None:
    existing = [ExistingMemory(3, "user likes green tea.", None), ExistingMemory(4, "x", [1.0])]
    decisions = plan_writes([TEA, TEA, LYON], existing, [None, None, None], 0.9)
    assert decisions == [
        MemoryDecision("update", "User likes green tea", "preference", 3),
        MemoryDecision("add", "User lives in Lyon", "fact"),
    ]


def test_plan_checks_its_inputs() -> None:
    with pytest.raises(ValueError, match="1 vectors for 2"):
        plan_writes([TEA, LYON], [], [[1.0]], 0.9)
    with pytest.raises(ValueError, match="threshold"):
        plan_writes([TEA], [], [[1.0]], 0.0)
    assert plan_writes([], [ExistingMemory(1, "x", [1.0])], [], 0.9) == []


def test_extract_then_plan_updates_a_restated_preference() -> None:
    """The local path end to end, with stand-in vectors: a bag of words hashed into 64 bins."""

    def embed(text: str) -> list[float]:
        vector = [0.0] * 64
        for word in text.lower().replace("'", " ").split():
            vector[sum(map(ord, word)) % 64] += 1.0
        return vector

    existing = [
        ExistingMemory(41, "User prefers window seats", embed("User prefers window seats")),
        ExistingMemory(42, "User lives in Lyon", embed("User lives in Lyon")),
    ]
    extracted = extract_local("Hi! I prefer window seats. I work at Airbus.")
    decisions = plan_writes(extracted, existing, [embed(m.content) for m in extracted], 0.9)
    assert decisions == [
        MemoryDecision("update", "User prefers window seats", "preference", 41),
        MemoryDecision("add", "User works at Airbus", "fact"),
    ]
