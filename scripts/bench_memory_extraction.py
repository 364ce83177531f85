"""Section 6, extraction: what the local extractor stores of the quality conversations' turns.

Pure and fast (no database, no embedder): the same conversations as the quality part
(``scripts/bench_memory_data.py``, same seed and sizes), every user turn given to an extractor
as ``memory.writing.write_turn`` gives it (the user's text and the assistant's answer), and
counted:

* *planted facts stored*: the fact's turn yields a memory whose content holds the fact's value
  (case-insensitive), the test the quality part applies to the memories it wrote (target: at
  least 95 % of them);
* *small-talk turns stored*: a turn of ``CHITCHAT`` (questions, requests, thanks, reactions: no
  fact about the user) that yields any memory (target: none);
* *about-me turns stored*: a turn of ``ABOUT_ME`` (a walk, a liking, two cats) that yields a
  memory; they state something about the user, so storing them is right, and they compete with
  the planted facts at recall.

Three extractors, in the same run: the local extractor as it is (``memory.extraction.local``);
the rules before issue 13 (``memory/extraction/local.py`` as commit ``PREVIOUS`` had it, read
from the repository's history and loaded as a module of its own, so no copy of it lives in the
tree; the row is left out where the history is not there); and "a memory per user sentence", what
storing everything would give (every fact, and every question).
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from memory.extraction import local
from memory.extraction.types import ExtractedMemory
from scripts import bench_memory_data as data
from scripts.bench_setup import module_at

# The last commit with the extractor as it was before issue 13.
PREVIOUS = "a361bd1"

TARGET = 0.95  # of the planted facts stored (issue 13)

Extractor = Callable[[str, str], list[ExtractedMemory]]


def every_sentence(user_text: str, assistant_text: str = "") -> list[ExtractedMemory]:
    """The store-everything baseline: each sentence of the user's message as a memory."""
    del assistant_text
    return [ExtractedMemory(sentence, "fact") for sentence in local.sentences(user_text)]


def previous_extractor() -> Extractor | None:
    """``extract_local`` of ``memory/extraction/local.py`` at ``PREVIOUS``; None without git or
    that commit (a shallow clone, an exported tree)."""
    try:
        module = module_at(
            PREVIOUS, "memory/extraction/local.py", "memory_extraction_local_before_issue_13"
        )
    except (OSError, subprocess.SubprocessError):
        return None
    extract: Extractor = module.extract_local
    return extract


def extractors() -> list[tuple[str, str, Extractor]]:
    found: list[tuple[str, str, Extractor]] = [
        ("local", "the local extractor (memory.extraction.local)", local.extract_local)
    ]
    previous = previous_extractor()
    if previous is not None:
        found.append(("v1", f"the rules before issue 13 (commit {PREVIOUS})", previous))
    found.append(
        ("every_sentence", "a memory per user sentence (store everything)", every_sentence)
    )
    return found


@dataclass
class ExtractorCount:
    name: str
    label: str
    planted: int = 0
    stored: int = 0
    small_talk_turns: int = 0
    small_talk_stored: int = 0
    about_me_turns: int = 0
    about_me_stored: int = 0
    memories: int = 0  # every memory extracted, all turns
    missed: Counter[str] = field(default_factory=Counter)  # template key -> planted facts missed
    planted_by_key: Counter[str] = field(default_factory=Counter)
    small_talk_examples: list[tuple[str, str]] = field(default_factory=list)  # (turn, memory)
    runtime_ms: float = 0.0

    @property
    def rate(self) -> float:
        return self.stored / self.planted if self.planted else float("nan")

    @property
    def meets_target(self) -> bool:
        return self.rate >= TARGET and self.small_talk_stored == 0


@dataclass
class ExtractionResult:
    conversations: int
    turns: int
    counts: list[ExtractorCount]

    def count(self, name: str) -> ExtractorCount | None:
        return next((count for count in self.counts if count.name == name), None)


def measure(
    name: str, label: str, extract: Extractor, conversations: Sequence[data.Conversation]
) -> ExtractorCount:
    small_talk, about_me = set(data.CHITCHAT), set(data.ABOUT_ME)
    count = ExtractorCount(name, label)
    started = time.perf_counter()
    for conversation in conversations:
        planted = {fact.turn: fact for fact in conversation.facts}
        for index, (user_text, assistant_text) in enumerate(conversation.turns):
            memories = extract(user_text, assistant_text)
            count.memories += len(memories)
            fact = planted.get(index)
            if fact is not None:
                count.planted += 1
                count.planted_by_key[fact.template.key] += 1
                if any(fact.value.lower() in memory.content.lower() for memory in memories):
                    count.stored += 1
                else:
                    count.missed[fact.template.key] += 1
            elif user_text in small_talk:
                count.small_talk_turns += 1
                if memories:
                    count.small_talk_stored += 1
                    if len(count.small_talk_examples) < 3:
                        count.small_talk_examples.append((user_text, memories[0].content))
            elif user_text in about_me:
                count.about_me_turns += 1
                count.about_me_stored += bool(memories)
    count.runtime_ms = (time.perf_counter() - started) * 1000
    return count


def run_extraction(conversations: Sequence[data.Conversation]) -> ExtractionResult:
    """Every extractor of ``extractors()`` over the same conversations."""
    return ExtractionResult(
        conversations=len(conversations),
        turns=sum(len(conversation.turns) for conversation in conversations),
        counts=[
            measure(name, label, extract, conversations) for name, label, extract in extractors()
        ],
    )


def main() -> None:
    """``python -m scripts.bench_memory_extraction``: the figures at the bench's full sizes."""
    from scripts.bench_memory import FULL_SIZES, QUALITY_SEED

    sizes = FULL_SIZES
    result = run_extraction(
        data.conversations(sizes.conversations, sizes.turns, sizes.facts, QUALITY_SEED)
    )
    print(f"{result.conversations} conversations, {result.turns} user turns")
    for count in result.counts:
        print(
            f"  {count.label:<48} planted facts stored {count.stored}/{count.planted} "
            f"({count.rate:.1%}); small-talk turns stored {count.small_talk_stored}/"
            f"{count.small_talk_turns}; about-me turns stored {count.about_me_stored}/"
            f"{count.about_me_turns}; {count.memories} memories; {count.runtime_ms:.0f} ms"
        )
        if count.missed:
            print(f"    missed: {dict(count.missed)}")


if __name__ == "__main__":
    main()
