"""Planning the writes: ``plan_writes(extracted, existing, vectors, threshold)`` decides what to do
with the local extractor's statements. Near-duplicates within the batch collapse (the later
wording wins); one nearly identical to an existing memory updates that memory (the new wording
replaces it, the old one kept as history, and it is recent again) instead of adding another. A
new statement of where the user lives or works (its ``topic``) supersedes the user's older
memories of that topic, kept as history: a change (a move, a new job) every one of them, a
present state ("I live in Berlin now") those naming another place or employer, while one naming
the same is a restatement that updates it. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from memory.extraction.local import NOW_WORDS, same_subject
from memory.extraction.types import (
    SUPERSEDING_TOPICS,
    ExistingMemory,
    ExtractedMemory,
    MemoryDecision,
)
from memory.reflection import normalise_text, similar, similarity

DEFAULT_THRESHOLD = 0.9


def plan_writes(
    extracted: Sequence[ExtractedMemory],
    existing: Sequence[ExistingMemory],
    vectors: Sequence[Sequence[float] | None],
    threshold: float = DEFAULT_THRESHOLD,
    current: Sequence[ExistingMemory] = (),
) -> list[MemoryDecision]:
    """Add / update decisions for a turn's extracted memories (``vectors[i]`` embeds
    ``extracted[i]``).

    * Within the batch, a near-duplicate of an earlier item replaces it (the later wording wins,
      in the earlier one's place).
    * An item nearly identical to an existing memory updates it: the new wording wins (unless
      the memory's own says the same and more) and the memory counts as recent again. The most similar unclaimed existing memory is taken, each at
      most once; otherwise the item is added.

    Near-duplicate means cosine ≥ ``threshold`` when both vectors are there, else equal normalised
    texts. The local plan never deletes.

    * An added item with a superseding ``topic`` supersedes ``current`` memories of that topic
      (the user's memories with their topic known) that no item of the batch updates: all of
      them for a change (``item.change``: a move, a new job), for a present state those that
      name another place or employer (``same_subject``). They are kept as history, no longer
      recalled. A present state naming the same place or employer as one of them updates it.
    """
    if len(vectors) != len(extracted):
        raise ValueError(f"{len(vectors)} vectors for {len(extracted)} extracted memories")
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], not {threshold}")
    batch = collapse(list(zip(extracted, vectors, strict=True)), threshold)
    decisions: list[MemoryDecision] = []
    claimed: set[str] = set()
    targets: list[ExistingMemory | None] = []
    for item, vector in batch:
        target = best_match(item.content, vector, existing, threshold, claimed)
        targets.append(target)
        if target is not None:
            claimed.add(str(target.id))
    for (item, _), target in zip(batch, targets, strict=True):
        if target is not None:
            decisions.append(restated_decision(item, target))
            continue
        replaced: tuple[int | str, ...] = ()
        if item.topic in SUPERSEDING_TOPICS:
            mates = [m for m in current if m.topic == item.topic and str(m.id) not in claimed]
            restated = None if item.change else restatement(item, mates)
            if restated is not None:
                claimed.add(str(restated.id))
                decisions.append(restated_decision(item, restated))
                continue
            replaced = tuple(
                memory.id
                for memory in mates
                if item.change or same_subject(item.topic, item.content, memory.content) is False
            )
            claimed.update(str(memory_id) for memory_id in replaced)
        decisions.append(MemoryDecision("add", item.content, item.kind, supersedes=replaced))
    return decisions


def restatement(item: ExtractedMemory, mates: Sequence[ExistingMemory]) -> ExistingMemory | None:
    """The current memory of the item's topic naming the same place or employer, if any."""
    topic = item.topic or ""
    return next((m for m in mates if same_subject(topic, item.content, m.content)), None)


def restated_decision(item: ExtractedMemory, memory: ExistingMemory) -> MemoryDecision:
    """The update of a memory said again: refreshed in its own words when they say more ("User
    lives in Berlin (moved there in May 2024)" for "I live in Berlin now"), else in the new ones
    (the old wording kept as history)."""
    said, own = normalise_text(NOW_WORDS.sub("", item.content)), normalise_text(memory.content)
    if own.startswith(said + " "):
        return MemoryDecision("update", memory.content, None, memory.id)
    return MemoryDecision("update", item.content, item.kind, memory.id)


Pair = tuple[ExtractedMemory, Sequence[float] | None]


def collapse(batch: Iterable[Pair], threshold: float) -> list[Pair]:
    kept: list[Pair] = []
    for item, vector in batch:
        for index, (other, other_vector) in enumerate(kept):
            if similar(item.content, vector, other.content, other_vector, threshold):
                kept[index] = (item, vector)
                break
        else:
            kept.append((item, vector))
    return kept


def best_match(
    content: str,
    vector: Sequence[float] | None,
    existing: Sequence[ExistingMemory],
    threshold: float,
    claimed: set[str],
) -> ExistingMemory | None:
    """The unclaimed existing memory most similar to the item, if any is a near-duplicate (the
    first of equals)."""
    best: tuple[float, ExistingMemory] | None = None
    for memory in existing:
        if str(memory.id) in claimed:
            continue
        closeness = similarity(content, vector, memory.content, memory.embedding)
        if closeness >= threshold and (best is None or closeness > best[0]):
            best = (closeness, memory)
    return best[1] if best else None
