"""``BENCH_ONLY=memory_recall``: evidence recall over long conversations, every turn a memory.

Over the synthetic multi-session conversations between two friends of
``scripts/bench_memory_recall_data.py`` (``BENCH_MEMORY_DATA=assistant``: the former ones of a user
with an assistant, ``scripts/bench_memory_recall_assistant_data.py``), each conversation's turns
stored as one user's memories, dated by their session, one run measures, per question, the share of
its evidence turns found by

- dense: the store's recall by cosine alone (the top 10);
- BM25: Okapi BM25 (``contextplatform.core.bm25``) over the conversation's turns (the top 10);
- search: the search API's default (``memory.views.search``, what ``POST .../memories/search``
  runs for a body with only a query and ``limit`` 10);
- to the model: the default ``memory`` source's injected items (no match block written), with the
  tokens they take;
- rrf: dense and BM25 fused by reciprocal rank, as a reference beside the search;

and the search API's latency (the query's embedding and the store's recall) for one user with
10,000 memories. ``BENCH_QUICK=1`` shrinks the conversations and the latency run.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from scripts import bench_memory_recall_assistant_data, bench_memory_recall_data, report
from scripts.bench_setup import ensure_tenant, log
from scripts.bench_stats import summarize

TENANT = "bench_memory_recall"
K = 10
SCALE_MEMORIES = 10_000
RRF_POOL = 64  # each retriever's candidates for the reference fusion
START = "<!-- memory_recall:start -->"
END = "<!-- memory_recall:end -->"
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "i",
        "in",
        "is",
        "it",
        "me",
        "my",
        "of",
        "on",
        "or",
        "so",
        "that",
        "the",
        "this",
        "to",
        "was",
        "we",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "with",
        "you",
        "your",
        "am",
    ]
)


DATA_TEXT = {
    "friends": "{conversations} synthetic conversations between two named friends, a dozen and "
    "more dated sessions each (`scripts/bench_memory_recall_data.py`), {turns} turns each "
    'stored as it was said ("Caroline: I went to ...") and dated by its session; each '
    "speaker's events told once in passing, echoed in the friend's reply, small talk never "
    "repeated verbatim; {questions} questions of LoCoMo's kinds, each naming its speaker: "
    'single-hop (one fact, often in other words), temporal ("When did ...", answered by the '
    "turn and its date), multi-hop (two or more turns of different sessions), open-domain "
    "(what the speaker would likely do, from one turn).",
    "assistant": "{conversations} synthetic conversations of a user with an assistant "
    "(`scripts/bench_memory_recall_assistant_data.py`, the former data), {turns} turns each "
    "stored as a memory of its user, {questions} questions asked in other words than the turns "
    "that answer them, or asking when. Its small talk repeats verbatim, so collapsing "
    "near-duplicates is worth more here than on real conversations.",
}


@dataclass
class RecallResults:
    date: str
    quick: bool
    data: str = "friends"
    conversations: int = 0
    turns: int = 0
    questions: int = 0
    recall: dict[str, float] = field(default_factory=dict)  # retriever -> mean evidence recall@10
    by_kind: dict[str, dict[str, float]] = field(default_factory=dict)
    to_model: float = 0.0
    injected_tokens: float = 0.0  # mean per question
    search_ms: list[float] = field(default_factory=list)
    scale_memories: int = 0
    runtime_s: float = 0.0


def terms(text: str) -> list[str]:
    return [t for t in re.findall(r"\w+", text.lower()) if t not in STOP_WORDS]


def rrf(*rankings: list[int]) -> list[int]:
    """Reciprocal rank fusion (k 60) of rankings of turns, best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, turn in enumerate(ranking, start=1):
            scores[turn] = scores.get(turn, 0.0) + 1.0 / (60 + rank)
    return sorted(scores, key=lambda turn: (-scores[turn], turn))


def share(found: list[int], evidence: set[int]) -> float:
    return len(evidence & set(found)) / len(evidence)


def dataset() -> Any:
    """The conversations' module: two friends talking (the default), or ``BENCH_MEMORY_DATA=
    assistant``, the former data of a user talking with an assistant."""
    name = os.environ.get("BENCH_MEMORY_DATA", "friends")
    if name not in ("friends", "assistant"):
        raise ValueError(f"BENCH_MEMORY_DATA must be friends or assistant, not {name!r}")
    return bench_memory_recall_assistant_data if name == "assistant" else bench_memory_recall_data


def sample(quick: bool, seed: int | None = None) -> list[Any]:
    """The conversations measured (``BENCH_QUICK``: three of six sessions)."""
    shape: dict[str, int] = {"count": 3, "sessions": 6} if quick else {"count": 10}
    if seed is not None:
        shape["seed"] = seed
    conversations: list[Any] = dataset().conversations(**shape)
    return conversations


def store_conversation(user: str, conversation: Any, vectors: np.ndarray) -> list[int]:
    """Every turn as one memory of ``user`` (dated by its session); the memories' ids in turn
    order. Bulk-written: the bench measures recall, not the write path."""
    from django.contrib.postgres.search import SearchVector

    from memory.models import Memory
    from memory.selectors import TEXT_CONFIG

    rows = Memory.objects.bulk_create(
        [
            Memory(
                user_id=user,
                content=turn.text,
                embedding=vector.tolist(),
                embedder="bench",
                observed_at=turn.said_at,
            )
            for turn, vector in zip(conversation.turns, vectors, strict=True)
        ]
    )
    ids = [row.pk for row in rows]
    for turn, memory_id in zip(conversation.turns, ids, strict=True):
        Memory.objects.filter(pk=memory_id).update(created_at=turn.said_at)
    Memory.objects.filter(user_id=user).update(
        search_vector=SearchVector("content", config=TEXT_CONFIG)
    )
    analyze()
    return ids


def analyze() -> None:
    """What autovacuum does after a bulk load, so the planner plans for the rows as loaded."""
    from django.db import connection

    from memory.models import Memory

    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(Memory._meta.db_table)}")


def source_items(user: str, question: str) -> list[Any]:
    from asgiref.sync import async_to_sync

    from memory.source import MemorySettings, MemorySource
    from sources.base import ContextRequest

    source = MemorySource(MemorySettings(type="memory", name="memories"))
    request = ContextRequest(
        request_id=uuid.uuid4().hex,
        tenant=TENANT,
        route="bench",
        user=user,
        session=None,
        query=question,
        dry_run=True,
    )
    return list(async_to_sync(source.fetch)(request).items)


def measure_quality(results: RecallResults, quick: bool, embedder: Any) -> None:
    from contextplatform.core.bm25 import bm25_scores
    from contextplatform.core.estimation import default_estimator
    from memory.stores import get_store
    from memory.views import SearchBody, search

    estimator = default_estimator()
    store = get_store()
    data = sample(quick)
    totals: dict[str, list[float]] = {"dense": [], "bm25": [], "rrf": [], "search": []}
    kinds: dict[str, dict[str, list[float]]] = {}
    reached, tokens = [], []
    for number, conversation in enumerate(data):
        user = f"conversation-{number}"
        texts = [turn.text for turn in conversation.turns]
        ids = store_conversation(user, conversation, np.asarray(embedder.embed(texts)))
        turn_of = {memory_id: index for index, memory_id in enumerate(ids)}
        documents = [terms(text) for text in texts]
        for question in conversation.questions:
            vector = embedder.embed_query(question.text)
            dense = store.recall(user, question.text, vector, RRF_POOL, mode="dense")
            scores = bm25_scores(terms(question.text), documents)
            bm25 = [
                i for i in sorted(range(len(texts)), key=lambda i: (-scores[i], i)) if scores[i] > 0
            ][:RRF_POOL]
            default = search(user, SearchBody(query=question.text, limit=K), vector)
            dense_turns = [turn_of[h.id] for h in dense]
            found = {
                "dense": dense_turns[:K],
                "bm25": bm25[:K],
                "rrf": rrf(dense_turns, bm25)[:K],
                "search": [turn_of[h.id] for h in default],
            }
            for name, turns in found.items():
                value = share(turns, question.evidence)
                totals[name].append(value)
                kinds.setdefault(question.kind, {}).setdefault(name, []).append(value)
            items = source_items(user, question.text)
            injected = [turn_of[int(item.metadata["memory_id"])] for item in items]
            reached.append(share(injected, question.evidence))
            tokens.append(sum(estimator.count(item.content) for item in items))
        results.turns += len(texts)
        results.questions += len(conversation.questions)
    results.conversations = len(data)
    results.recall = {name: float(np.mean(values)) for name, values in totals.items()}
    results.by_kind = {
        kind: {name: float(np.mean(values)) for name, values in named.items()}
        for kind, named in kinds.items()
    }
    results.to_model = float(np.mean(reached))
    results.injected_tokens = float(np.mean(tokens))


def measure_latency(results: RecallResults, quick: bool, embedder: Any) -> None:
    """One user with ``SCALE_MEMORIES`` memories: the turns of the conversations again and again,
    each copy's vector moved a little (so neither retriever sees exact ties), then the search
    API's default recall for the questions, timed with the query's embedding."""
    from django.contrib.postgres.search import SearchVector

    from memory.models import Memory
    from memory.selectors import TEXT_CONFIG
    from memory.views import SearchBody, search

    data = sample(False, seed=11)
    texts = [turn.text for c in data for turn in c.turns]
    vectors = np.asarray(embedder.embed(texts), dtype=np.float64)
    rng = np.random.default_rng(3)
    user = "scale"
    rows = []
    for index in range(SCALE_MEMORIES):
        vector = vectors[index % len(texts)] + rng.normal(0, 0.02, vectors.shape[1])
        rows.append(
            Memory(
                user_id=user,
                content=f"{texts[index % len(texts)]} ({index // len(texts)})",
                embedding=(vector / np.linalg.norm(vector)).tolist(),
                embedder="bench",
            )
        )
    Memory.objects.bulk_create(rows, batch_size=2_000)
    Memory.objects.filter(user_id=user).update(
        search_vector=SearchVector("content", config=TEXT_CONFIG)
    )
    analyze()
    results.scale_memories = Memory.objects.filter(user_id=user).count()
    questions = [q.text for c in data for q in c.questions]
    runs = questions[:60] if quick else questions * 2
    for warm in questions[:10]:
        search(user, SearchBody(query=warm, limit=K), embedder.embed_query(warm))
    for question in runs:
        # The query's embedding outside the embedder's query cache (texts repeat here, a user's
        # questions mostly do not), then the search with it.
        started = time.perf_counter()
        vector = embedder.embed([question])[0]
        search(user, SearchBody(query=question, limit=K), vector)
        results.search_ms.append((time.perf_counter() - started) * 1000)


def run_memory_recall(quick: bool) -> RecallResults:
    from django_tenants.utils import schema_context

    from memory.models import Memory
    from sources.embedding import get_embedder

    started = time.perf_counter()
    results = RecallResults(
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        quick=quick,
        data=os.environ.get("BENCH_MEMORY_DATA", "friends"),
    )
    ensure_tenant(TENANT)
    embedder = get_embedder()
    with schema_context(TENANT):
        Memory.objects.all().delete()
        log("memory recall: long conversations …")
        measure_quality(results, quick, embedder)
        log("memory recall: search latency at 10,000 memories …")
        measure_latency(results, quick, embedder)
        Memory.objects.all().delete()
    results.runtime_s = time.perf_counter() - started
    return results


def section(results: RecallResults, commit: str) -> str:
    latency = summarize(results.search_ms)
    rows = "\n".join(
        f"| {name} | {results.recall[name]:.3f} | "
        + " | ".join(f"{results.by_kind[kind][name]:.3f}" for kind in sorted(results.by_kind))
        + " |"
        for name in ("dense", "bm25", "rrf", "search")
    )
    kinds = " | ".join(sorted(results.by_kind))
    quick = " (BENCH_QUICK: shrunk, not for comparison)" if results.quick else ""
    return "\n\n".join(
        [
            START,
            f"## Memory recall over long conversations{quick}",
            f"{results.date}, commit `{commit}`, runtime {results.runtime_s:.0f} s "
            f"(`scripts/bench_memory_recall.py`, data `{results.data}`). "
            + DATA_TEXT[results.data].format(
                conversations=results.conversations,
                turns=results.turns,
                questions=results.questions,
            )
            + " Evidence recall@10 is the share of a question's evidence turns among the first "
            "10, averaged over the questions.",
            f"| retriever | all | {kinds} |\n|---|---|"
            + "---|" * len(results.by_kind)
            + f"\n{rows}",
            "dense: the store's recall by cosine; bm25: Okapi BM25 over the user's turns; rrf: "
            "the two fused by reciprocal rank (k 60, 64 candidates each, no duplicate collapsed), "
            "for reference; search: the search API's default (no `hybrid` written).",
            f"Through the default `memory` source (no match block): {results.to_model:.3f} of the "
            f"evidence reaches the model, in {results.injected_tokens:.0f} injected tokens per "
            "question on average.",
            f"Search API latency (query embedding + the default recall) for one user with "
            f"{results.scale_memories:,} memories: p50 {latency.p50:.1f} ms, p95 "
            f"{latency.p95:.1f} ms, p99 {latency.p99:.1f} ms (n {latency.count}).",
            END,
        ]
    )


def write_memory_recall(results: RecallResults, docs_dir: Path, commit: str) -> list[Path]:
    return [report.write_section(docs_dir, section(results, commit), START, END)]


def print_memory_recall(results: RecallResults) -> None:
    latency = summarize(results.search_ms)
    print()
    print("Memory recall over long conversations")
    print(
        f"  {results.conversations} conversations, {results.turns} turns, "
        f"{results.questions} questions"
    )
    for name, value in results.recall.items():
        print(f"  evidence recall@{K} {name:<8} {value:.3f}  {results.by_kind}"[:200])
    print(f"  evidence to the model {results.to_model:.3f} in {results.injected_tokens:.0f} tokens")
    print(
        f"  search p50 {latency.p50:.1f} ms p95 {latency.p95:.1f} ms at "
        f"{results.scale_memories} memories"
    )
