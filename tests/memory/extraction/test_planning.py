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


# --------------------------------------------------------------------------------------------
# where the user lives or works, said plainly


def home(memory_id: int, content: str) -> ExistingMemory:
    return ExistingMemory(memory_id, content, None, topic="home")


def work(memory_id: int, content: str) -> ExistingMemory:
    return ExistingMemory(memory_id, content, None, topic="work")


def plan(text: str, current: list[ExistingMemory]) -> list[MemoryDecision]:
    extracted = extract_local(text)
    return plan_writes(extracted, [], [None] * len(extracted), 0.9, current=current)


def test_a_present_state_supersedes_only_what_names_another_place_or_employer() -> None:
    current = [
        home(1, "User lives in Porto"),
        home(2, "User lives in a small flat"),  # no place named: cannot be told apart
        work(3, "User works at Siemens"),
        work(4, "User works as a teacher"),
    ]
    assert plan("I live in Berlin now.", current) == [
        MemoryDecision("add", "User lives in Berlin now", "fact", supersedes=(1,))
    ]
    # employers compared first; without one on both sides, the roles
    assert plan("I work at Acme as a nurse.", current) == [
        MemoryDecision("add", "User works at Acme as a nurse", "fact", supersedes=(3, 4))
    ]
    assert plan("I work as a nurse.", current) == [
        MemoryDecision("add", "User works as a nurse", "fact", supersedes=(4,))
    ]
    # a move is a change: every home before it is history
    assert plan("I moved to Lisbon.", current) == [
        MemoryDecision("add", "User lives in Lisbon (moved there)", "fact", supersedes=(1, 2))
    ]


def test_a_present_state_naming_the_same_place_restates_it() -> None:
    dated = home(5, "User lives in Berlin (moved there in May 2024)")
    # the memory says more: refreshed in its own words
    assert plan("I live in Berlin now.", [dated]) == [
        MemoryDecision("update", dated.content, None, 5)
    ]
    # the same employer ("St Mary's" is "St Mary's Hospital"): the new wording, the old as history
    nurse = work(6, "User works at St Mary's Hospital")
    assert plan("I work at St Mary's as a nurse.", [nurse]) == [
        MemoryDecision("update", "User works at St Mary's as a nurse", "fact", 6)
    ]


def test_the_benchmarks_plain_statements_supersede_what_they_replace() -> None:
    """Section 6's "newer home or job said plainly" (scripts/bench_memory_extraction.py), with
    stand-in vectors: whatever the embedder, today's extractor and planning leave every older
    home or job as history, never recalled, and the newer one live."""
    from scripts.bench_memory_extraction import SUPERSEDING_CASES, run_superseding

    class Hashed:
        identity = "test:hashed"

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [self.embed_query(text) for text in texts]

        def embed_query(self, text: str) -> list[float]:
            vector = [0.0] * 64
            for word in text.lower().replace("'", " ").split():
                vector[sum(map(ord, word)) % 64] += 1.0
            return vector

    result = run_superseding(Hashed())
    total = len(SUPERSEDING_CASES)
    assert (result.count("after", "history"), result.count("after", "old")) == (total, 0)
    assert all(case.newer["after"] for case in result.cases)
