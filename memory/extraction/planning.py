"""Planning the writes: ``plan_writes(extracted, existing, vectors, threshold)`` decides what to do
with the local extractor's statements. Near-duplicates within the batch collapse (the later
wording wins); one nearly identical to an existing memory updates that memory (new wording, and
its recency refreshed) instead of adding another. A new statement of a change in the user's
life (a move, a new job: its ``topic``) supersedes the user's older memories of that topic, which
are kept as history. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from memory.extraction.types import ExistingMemory, ExtractedMemory, MemoryDecision
from memory.reflection import similar, similarity

DEFAULT_THRESHOLD = 0.9
# Topics whose new statement replaces the old one: a user lives in one place and has one job
# at a time, while a new pet or child comes beside the others.
SUPERSEDING_TOPICS = frozenset({"home", "work"})


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
    * An item nearly identical to an existing memory updates it: the new wording wins and the
      memory counts as recent again. The most similar unclaimed existing memory is taken, each at
      most once; otherwise the item is added.

    Near-duplicate means cosine ≥ ``threshold`` when both vectors are there, else equal normalised
    texts. The local plan never deletes.

    * An added item with a superseding ``topic`` (a move, a new job) supersedes the ``current``
      memories of that topic (the user's memories with their topic known) that no item of the
      batch updates: they are kept as history, no longer recalled.
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
            decisions.append(MemoryDecision("update", item.content, item.kind, target.id))
            continue
        replaced: tuple[int | str, ...] = ()
        if item.topic in SUPERSEDING_TOPICS:
            replaced = tuple(
                memory.id
                for memory in current
                if memory.topic == item.topic and str(memory.id) not in claimed
            )
            claimed.update(str(memory_id) for memory_id in replaced)
        decisions.append(MemoryDecision("add", item.content, item.kind, supersedes=replaced))
    return decisions


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
