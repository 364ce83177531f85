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

Then *questions phrased unlike the statement* (``run_questions``): a change in the user's life
told one way ("I moved to Lisbon last month") and asked about another ("Where do I live?"). Each
case is a user whose memories are what the extractor stores of the statement (said on
``SAID_ON``) and of the same few other turns (``OTHER_TURNS``), embedded by the platform's
embedder; the question is embedded as a query and ranked against them by cosine, as the
(non-hybrid) search ranks a user's rows. Counted: the fact's memory is *recalled at the default
threshold* (in the top ``LOCAL_MEMORY_TOP_K`` with a cosine at least
``LOCAL_MEMORY_MIN_SIMILARITY``: the memory source's defaults with the local embedder) and *found
by the default search* (in the top 5 of ``POST /memories/search`` without ``min_similarity``).
Before: the local extractor as commit ``BEFORE_CURRENT_FACTS`` had it (it wrote the change as
said, and took no date); after: today's, given the turn's date as ``memory.writing`` gives it.

Then *a newer home or job said plainly* (``run_superseding``): a user told where they live or
work, then later said a new one without a time ("I live in Berlin now", "I work at Acme as a
nurse", "I moved to Lisbon"), and asked "Where do I live?" / "Where do I work?". Each case is a
user whose memories are what the extractor and the planning (``memory.extraction.planning``)
leave of the earlier statement and the same ``OTHER_TURNS``, then of the later statement, written
as ``memory.writing`` applies the decisions (an add's superseded memories, and after, the old
wording of an update, kept as history and never recalled); the question is ranked against the
live memories by cosine. Counted: the newer fact's memory *recalled at the default threshold*, the
older one *not recalled*, and both (*right*). Before: the local extractor and the planning as
commit ``BEFORE_PLAIN_SUPERSEDING`` had them (only a dated change superseded, an update wrote over
the memory); after: today's.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memory.extraction import local
from memory.extraction.types import ExtractedMemory
from scripts import bench_memory_data as data
from scripts.bench_setup import module_at, setup_django

# The last commit with the extractor as it was before issue 13.
PREVIOUS = "a361bd1"
# The last commit whose local extractor wrote a change in the user's life as said ("User moved to
# Lisbon last month") rather than as what is true now.
BEFORE_CURRENT_FACTS = "422a1da"
# The last commit where only a dated move or new job superseded the old home or job.
BEFORE_PLAIN_SUPERSEDING = "dfe0a26"

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
    questions: QuestionsResult | None = None  # run_questions, when the embedder was there
    superseding: SupersedingResult | None = None  # run_superseding, likewise

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


# --- questions phrased unlike the statement -------------------------------------------------

SAID_ON = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)
SEARCH_LIMIT = 5  # POST /api/v1/users/{user}/memories/search's default limit
# (statement, question, what the fact's memory holds)
CASES: tuple[tuple[str, str, str], ...] = (
    ("I moved to Lisbon last month.", "Where do I live?", "Lisbon"),
    ("Oh, by the way, I moved to Porto in January.", "Which city do I live in?", "Porto"),
    ("I relocated to Denver two weeks ago for work.", "Where am I based these days?", "Denver"),
    ("I moved to Berlin last year because I got a job there.", "What city am I in?", "Berlin"),
    ("I started as a nurse at St Mary's Hospital last week.", "What do I do for work?", "nurse"),
    ("I started at Siemens as an engineer last month.", "Where do I work?", "Siemens"),
    ("I got a new job as a data engineer at Spotify in January.", "What is my job?", "Spotify"),
    ("I joined Deloitte as an analyst three weeks ago.", "Who is my employer?", "Deloitte"),
    ("We adopted a dog last month.", "Do I have pets?", "dog"),
    ("I adopted a kitten yesterday.", "Do I have any animals at home?", "kitten"),
    ("I got married in June.", "Am I married?", "married"),
    ("I had a baby girl in February.", "Do I have kids?", "baby"),
)
# The user's other turns: what the fact's memory competes with.
OTHER_TURNS = (
    "I'm a big fan of jazz.",
    "I drive a Volvo.",
    "I'm allergic to peanuts.",
    "I play the cello.",
    "My favourite colour is green.",
    "I prefer window seats.",
    "I speak Polish and a little Greek.",
    "I go climbing on Saturdays.",
)

DatedExtractor = Callable[[str], list[ExtractedMemory]]


@dataclass
class QuestionCase:
    statement: str
    question: str
    value: str
    memory: dict[str, str | None] = field(default_factory=dict)  # side -> the fact's memory
    cosine: dict[str, float | None] = field(default_factory=dict)
    rank: dict[str, int | None] = field(default_factory=dict)  # among the user's memories


@dataclass
class QuestionsResult:
    threshold: float
    top_k: int
    embedder: str
    sides: list[tuple[str, str]]  # (name, label)
    cases: list[QuestionCase]

    def stored(self, side: str) -> int:
        return sum(case.memory.get(side) is not None for case in self.cases)

    def recalled(self, side: str) -> int:
        """In the top ``top_k`` with a cosine at least ``threshold`` (the source's defaults)."""
        return sum(
            case.rank.get(side) is not None
            and (case.rank[side] or 0) <= self.top_k
            and (case.cosine.get(side) or -1.0) >= self.threshold
            for case in self.cases
        )

    def found(self, side: str) -> int:
        """In the default search's top ``SEARCH_LIMIT`` (no threshold)."""
        return sum(
            case.rank.get(side) is not None and (case.rank[side] or 0) <= SEARCH_LIMIT
            for case in self.cases
        )


def dated_extractors() -> list[tuple[str, str, DatedExtractor]]:
    found: list[tuple[str, str, DatedExtractor]] = []
    try:
        before = module_at(
            BEFORE_CURRENT_FACTS,
            "memory/extraction/local.py",
            "memory_extraction_local_before_current_facts",
        )
    except (OSError, subprocess.SubprocessError):
        before = None
    if before is not None:
        old: Extractor = before.extract_local
        found.append(
            ("before", f"as said (commit {BEFORE_CURRENT_FACTS})", lambda text: old(text, ""))
        )
    found.append(
        (
            "after",
            "what is true now (memory.extraction.local)",
            lambda text: local.extract_local(text, "", observed_at=SAID_ON),
        )
    )
    return found


def run_questions(embedder: Any = None) -> QuestionsResult:
    """Every case of ``CASES`` before and after, ranked by the platform's embedder (the local
    MiniLM unless ``EMBEDDING_URL`` names another)."""
    import numpy as np

    from sources.embedding import LOCAL_MEMORY_MIN_SIMILARITY, LOCAL_MEMORY_TOP_K, get_embedder

    embedder = embedder or get_embedder()
    sides = dated_extractors()
    cases = [QuestionCase(statement, question, value) for statement, question, value in CASES]
    questions = np.asarray(
        [embedder.embed_query(case.question) for case in cases], dtype=np.float64
    )
    for name, _, extract in sides:
        others = [memory.content for turn in OTHER_TURNS for memory in extract(turn)]
        for case, question in zip(cases, questions, strict=True):
            fact = next(
                (
                    m.content
                    for m in extract(case.statement)
                    if case.value.lower() in m.content.lower()
                ),
                None,
            )
            case.memory[name] = fact
            if fact is None:
                case.cosine[name] = case.rank[name] = None
                continue
            vectors = np.asarray(embedder.embed([fact, *others]), dtype=np.float64)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            cosines = vectors @ (question / np.linalg.norm(question))
            case.cosine[name] = float(cosines[0])
            case.rank[name] = 1 + int(np.sum(cosines[1:] > cosines[0]))
    return QuestionsResult(
        threshold=LOCAL_MEMORY_MIN_SIMILARITY,
        top_k=LOCAL_MEMORY_TOP_K,
        embedder=embedder.identity,
        sides=[(name, label) for name, label, _ in sides],
        cases=cases,
    )


def print_questions(result: QuestionsResult) -> None:
    print(
        f"questions phrased unlike the statement: {len(result.cases)} cases, {result.embedder}, "
        f"default threshold {result.threshold} / top {result.top_k}"
    )
    for name, label in result.sides:
        print(
            f"  {label:<48} stored {result.stored(name)}/{len(result.cases)}; recalled at the "
            f"default threshold {result.recalled(name)}/{len(result.cases)}; found by the "
            f"default search (top {SEARCH_LIMIT}) {result.found(name)}/{len(result.cases)}"
        )
    for case in result.cases:
        cells = "; ".join(
            f"{name}: {case.memory.get(name)!r} cos "
            + (
                f"{case.cosine[name]:.3f} rank {case.rank[name]}"
                if case.cosine.get(name) is not None
                else "-"
            )
            for name, _ in result.sides
        )
        print(f"    {case.question!r} <- {case.statement!r}: {cells}")


# --- a newer home or job said plainly ------------------------------------------------------

SAID_LATER = datetime(2025, 6, 2, 18, 5, tzinfo=UTC)
# (the earlier statement, the later one, the question, what the newer memory holds, the older)
SUPERSEDING_CASES: tuple[tuple[str, str, str, str, str], ...] = (
    ("I live in Porto.", "I live in Berlin now.", "Where do I live?", "Berlin", "Porto"),
    (
        "I'm based in Madrid.",
        "I live in Rome these days.",
        "Which city do I live in?",
        "Rome",
        "Madrid",
    ),
    ("I live in Lyon.", "I'm living in Marseille.", "Where do I live?", "Marseille", "Lyon"),
    ("I live in Porto.", "I moved to Lisbon.", "Where do I live?", "Lisbon", "Porto"),
    ("I work at Siemens.", "I work at Acme as a nurse.", "Where do I work?", "Acme", "Siemens"),
    ("I work for Google.", "I work at Spotify now.", "Who is my employer?", "Spotify", "Google"),
    ("I work at Airbus.", "I'm working at Boeing.", "Where do I work?", "Boeing", "Airbus"),
    (
        "I work as a teacher.",
        "I work as a nurse now.",
        "What do I do for work?",
        "nurse",
        "teacher",
    ),
)
SUPERSEDING_TOPICS = frozenset({"home", "work"})


@dataclass
class Live:
    """One memory of the simulated user: its words, embedding, topic, and whether superseded."""

    content: str
    vector: Any
    topic: str | None
    superseded: bool = False


@dataclass
class SupersedingCase:
    earlier: str
    later: str
    question: str
    new: str
    old: str
    newer: dict[str, str | None] = field(default_factory=dict)  # side -> the newer fact's memory
    new_recalled: dict[str, bool] = field(default_factory=dict)
    old_recalled: dict[str, bool] = field(default_factory=dict)
    history: dict[str, bool] = field(default_factory=dict)  # the older memory kept, superseded


@dataclass
class SupersedingResult:
    threshold: float
    top_k: int
    embedder: str
    sides: list[tuple[str, str]]
    cases: list[SupersedingCase]

    def count(self, side: str, what: str) -> int:
        if what == "right":
            return sum(c.new_recalled[side] and not c.old_recalled[side] for c in self.cases)
        values = {
            "new": [c.new_recalled[side] for c in self.cases],
            "old": [c.old_recalled[side] for c in self.cases],
            "history": [c.history[side] for c in self.cases],
        }[what]
        return sum(values)


@dataclass
class Writer:
    """A side of the comparison: its extractor, planning and topic reader, and whether an
    update keeps the old wording as history (else it writes over the memory)."""

    extract: Callable[[str, datetime], list[ExtractedMemory]]
    plan: Callable[..., list[Any]]
    topic_of: Callable[[str], str | None]
    keeps_history: bool


def superseding_writers() -> list[tuple[str, str, Writer]]:
    from memory.extraction import planning

    found: list[tuple[str, str, Writer]] = []
    try:
        old_local = module_at(
            BEFORE_PLAIN_SUPERSEDING,
            "memory/extraction/local.py",
            "memory_extraction_local_before_plain_superseding",
        )
        old_planning = module_at(
            BEFORE_PLAIN_SUPERSEDING,
            "memory/extraction/planning.py",
            "memory_extraction_planning_before_plain_superseding",
        )
    except (OSError, subprocess.SubprocessError):
        old_local = old_planning = None
    if old_local is not None and old_planning is not None:
        before = Writer(
            lambda text, said: old_local.extract_local(text, "", observed_at=said),
            old_planning.plan_writes,
            old_local.topic_of,
            keeps_history=False,
        )
        found.append(("before", f"dated changes only (commit {BEFORE_PLAIN_SUPERSEDING})", before))
    after = Writer(
        lambda text, said: local.extract_local(text, "", observed_at=said),
        planning.plan_writes,
        local.topic_of,
        keeps_history=True,
    )
    found.append(("after", "plain statements too (memory.extraction)", after))
    return found


def write_statement(
    writer: Writer, memories: list[Live], text: str, said: datetime, embed: Callable[..., Any]
) -> None:
    """One turn written as ``memory.writing.write_turn`` writes it: extracted, planned against
    the user's live memories (near-duplicates by cosine, the current home and job by topic), and
    applied; a superseded memory stays in ``memories``, marked."""
    from memory.extraction.types import ExistingMemory

    extracted = writer.extract(text, said)
    if not extracted:
        return
    vectors = [list(v) for v in embed([e.content for e in extracted])]
    live = {str(i): m for i, m in enumerate(memories) if not m.superseded}
    existing = [ExistingMemory(i, m.content, list(m.vector)) for i, m in live.items()]
    topics = {e.topic for e in extracted if e.topic in SUPERSEDING_TOPICS}
    current = [
        ExistingMemory(i, m.content, topic=writer.topic_of(m.content))
        for i, m in live.items()
        if writer.topic_of(m.content) in topics
    ]
    decisions = writer.plan(extracted, existing, vectors, 0.9, current=current)
    known = {e.content: v for e, v in zip(extracted, vectors, strict=True)}
    for decision in decisions:
        vector = known.get(decision.content)
        if vector is None:
            vector = embed([decision.content])[0]
        if decision.action == "add":
            memories.append(Live(decision.content, vector, writer.topic_of(decision.content)))
            for replaced in decision.supersedes:
                live[str(replaced)].superseded = True
        elif decision.action == "update":
            target = live[str(decision.target_id)]
            if decision.content == target.content:
                continue
            if writer.keeps_history:
                target.superseded = True
                memories.append(Live(decision.content, vector, writer.topic_of(decision.content)))
            else:
                target.content, target.vector = decision.content, vector


def run_superseding(embedder: Any = None) -> SupersedingResult:
    """Every case of ``SUPERSEDING_CASES`` before and after, ranked by the platform's
    embedder."""
    import numpy as np

    from sources.embedding import LOCAL_MEMORY_MIN_SIMILARITY, LOCAL_MEMORY_TOP_K, get_embedder

    embedder = embedder or get_embedder()
    sides = superseding_writers()
    cases = [SupersedingCase(*case) for case in SUPERSEDING_CASES]

    def recalled(question: Any, memories: list[Live]) -> list[str]:
        live = [m for m in memories if not m.superseded]
        vectors = np.asarray([m.vector for m in live], dtype=np.float64)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        cosines = vectors @ (question / np.linalg.norm(question))
        order = np.argsort(-cosines, kind="stable")[:LOCAL_MEMORY_TOP_K]
        return [live[i].content for i in order if cosines[i] >= LOCAL_MEMORY_MIN_SIMILARITY]

    for name, _, writer in sides:
        for case in cases:
            memories: list[Live] = []
            for text in (case.earlier, *OTHER_TURNS):
                write_statement(writer, memories, text, SAID_ON, embedder.embed)
            write_statement(writer, memories, case.later, SAID_LATER, embedder.embed)
            question = np.asarray(embedder.embed_query(case.question), dtype=np.float64)
            found = recalled(question, memories)
            holds = lambda text, value: value.lower() in text.lower()  # noqa: E731
            live = [m.content for m in memories if not m.superseded]
            case.newer[name] = next((c for c in live if holds(c, case.new)), None)
            case.new_recalled[name] = any(holds(c, case.new) for c in found)
            case.old_recalled[name] = any(holds(c, case.old) for c in found)
            case.history[name] = any(m.superseded and holds(m.content, case.old) for m in memories)
    return SupersedingResult(
        threshold=LOCAL_MEMORY_MIN_SIMILARITY,
        top_k=LOCAL_MEMORY_TOP_K,
        embedder=embedder.identity,
        sides=[(name, label) for name, label, _ in sides],
        cases=cases,
    )


def print_superseding(result: SupersedingResult) -> None:
    total = len(result.cases)
    print(
        f"a newer home or job said plainly: {total} cases, {result.embedder}, default "
        f"threshold {result.threshold} / top {result.top_k}"
    )
    for name, label in result.sides:
        print(
            f"  {label:<48} newer recalled {result.count(name, 'new')}/{total}; older recalled "
            f"{result.count(name, 'old')}/{total}; right (newer, not older) "
            f"{result.count(name, 'right')}/{total}; older kept as history "
            f"{result.count(name, 'history')}/{total}"
        )
    for case in result.cases:
        cells = "; ".join(
            f"{name}: {case.newer.get(name)!r} new {'y' if case.new_recalled[name] else 'n'} "
            f"old {'y' if case.old_recalled[name] else 'n'}"
            for name, _ in result.sides
        )
        print(f"    {case.question!r} <- {case.earlier!r} then {case.later!r}: {cells}")


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
    setup_django()  # the embedder reads the settings
    print_questions(run_questions())
    print_superseding(run_superseding())


if __name__ == "__main__":
    main()
