"""Measure the memory source's defaults for the platform's embedder on the memory bench's data.

The memory source's default recall (``top_k`` and ``min_similarity``, see
``sources.embedding.EmbedderDefaults``) is chosen here, for the embedder the process runs (the
local MiniLM unless ``EMBEDDING_URL`` is set). The data are the memory bench's
(``scripts/bench_memory_data.py``, its full size and seed: 24 conversations of 40 turns, 5
planted facts each), in two stores, so that the extractor's share and the embedder's are seen
apart:

* ``extracted``: every turn written through the real write path (``queue_turn`` +
  ``write_turn``, the local extractor), as the bench does; a planted fact the extractor does not
  store cannot be recalled at all.
* ``statements``: the same users' other memories, and each planted fact's own sentence ("My dog is
  called Biscuit.") stored as it was said.

For every question (one paraphrased, one direct per fact) it reads the cosine of the question to
its fact's memory and to the user's other memories, the fact's rank by cosine, then the recall at
every (limit, threshold) pair through ``memory.selectors.search_memories`` (embedding and hybrid,
``weighted`` and ``rrf``), the tokens the real ``memory`` source injects (reflection gate
included) for the candidates, and what the source does on its defaults (no match block). Then the
noise: how many of the user's memories a question about nothing they said would get injected, per
threshold. Nothing here is a judge: the default memory match block recalls only.

How the local values (``sources/embedding.py``) were chosen: the highest threshold and the
smallest limit whose recall@5 on the paraphrased questions over the extracted store stays at
least 0.90, injecting at most 300 tokens per question; among those with the same recall, the one
injecting the fewest memories for an off-topic question. ``hybrid_search`` becomes the local
store's default only if it recalls more than embedding alone at the chosen pair.

Run (the embedded PostgreSQL of a data folder of its own)::

    PGSERVER_DATADIR=/tmp/pgdata-measure .venv/bin/python -m scripts.measure_memory_defaults

It prints the tables and writes var/bench/memory_defaults.json.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from scripts import bench_memory_data as data
from scripts.bench_setup import ROOT, ensure_tenant, log, manage, setup_django

TENANT = "measure_memory_defaults"
ROUTE = "memory-defaults"
SEED = 20_261_206  # the memory bench's (scripts/bench_memory.py QUALITY_SEED)
CONVERSATIONS, TURNS, FACTS = 24, 40, 5  # the bench's full size
LIMITS = (1, 2, 3, 5, 8)
THRESHOLDS = tuple(round(0.05 * step, 2) for step in range(0, 15))  # 0.0 .. 0.7
STYLES = ("paraphrased", "direct")
STORES = ("extracted", "statements")
MODES = ("embedding", "weighted", "rrf")
# Questions about nothing the users said: what the threshold lets in for them is noise.
OFF_TOPIC = (
    "Why is the sky blue?",
    "How do I fold a fitted sheet?",
    "Tell me a joke about penguins.",
    "What's the capital of Australia?",
    "Explain how a refrigerator works.",
    "Summarise this email for me.",
    "Write a haiku about autumn.",
    "How many ounces are in a pound?",
    "Translate 'good morning' into French.",
    "What is a black hole?",
)
NOISE_LIMIT = 5
TARGET_RECALL = 0.90
TARGET_TOKENS = 300
HYBRID_THRESHOLDS = (0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.5)
OUT = ROOT / "var" / "bench" / "memory_defaults.json"


@dataclass
class Asked:
    store: str
    user: str
    key: str
    style: str
    question: str
    stored: bool  # the store holds a memory of the fact
    fact_cosine: float | None
    best_other_cosine: float | None  # the closest memory of the user that is not the fact
    rank: int | None  # the fact's rank by cosine among the user's memories (1-based)
    memories: int
    # (mode, limit, threshold) -> recalled; and the candidates' injected tokens by the source
    recalled: dict[str, bool] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    # The source on its defaults (no match block): the fact injected, the tokens, the notes
    default_injected: bool = False
    default_tokens: int = 0
    default_notes: dict[str, Any] = field(default_factory=dict)


def key(mode: str, limit: int, threshold: float) -> str:
    return f"{mode}|{limit}|{threshold:g}"


# Stores ------------------------------------------------------------------------------------------


def write_extracted(conversations: list[data.Conversation], embedder: Any) -> None:
    from scripts.bench_memory import write_conversation

    for conversation in conversations:
        write_conversation(conversation, embedder)


def write_statements(
    conversations: list[data.Conversation], embedder: Any
) -> dict[tuple[str, str], set[int]]:
    """``stmt-<user>``: the user's memories of the other turns, and each fact's sentence as said."""
    from memory.models import Memory
    from memory.services import create_memory
    from scripts.bench_memory import turn_id

    targets: dict[tuple[str, str], set[int]] = {}
    for conversation in conversations:
        user = f"stmt-{conversation.user}"
        fact_turns = {turn_id(conversation.user, fact.turn) for fact in conversation.facts}
        for memory in Memory.objects.filter(user_id=conversation.user).exclude(
            source_request_id__in=fact_turns
        ):
            create_memory(
                user_id=user,
                content=memory.content,
                kind=memory.kind,
                embedder=embedder,
                vector=list(memory.embedding),
                source_request_id=memory.source_request_id,
            )
        for fact in conversation.facts:
            sentence = fact.template.statement.format(value=fact.value)
            made = create_memory(user_id=user, content=sentence, embedder=embedder)
            targets[(user, fact.template.key)] = {made.pk}
    return targets


# Questions ---------------------------------------------------------------------------------------


def through_source(
    user: str, question: str, limit: int | None, threshold: float | None, mode: str
) -> Any:
    """The real memory source's result (reflection gate included); ``None`` values are left
    unwritten, so the source's defaults apply."""
    from memory.source import MemorySettings, MemorySource
    from scripts.bench_memory import fetch_memories
    from sources.matching import MatchConfig, RecallConfig

    written = limit is not None or threshold is not None
    settings = MemorySettings(
        type="memory",
        name="memories",
        match=MatchConfig(recall=RecallConfig(top_k=limit, min_similarity=threshold))
        if written
        else None,
        hybrid_search=mode != "embedding",
        hybrid_mode="rrf" if mode == "rrf" else "weighted",
    )
    # dry run: measuring must not reinforce what it recalls
    return fetch_memories(MemorySource(settings), TENANT, ROUTE, user, question, dry_run=True)


def ask(
    store: str, user: str, fact: data.PlantedFact, style: str, targets: set[int], embedder: Any
) -> Asked:
    from memory.selectors import cosine, live_memories, search_memories

    text = fact.template.question if style == "paraphrased" else fact.template.direct
    vector = embedder.embed_query(text)
    memories = list(live_memories(user).values_list("pk", "embedding"))
    scored = sorted(((cosine(e, vector), pk) for pk, e in memories), key=lambda p: (-p[0], p[1]))
    fact_cos = [c for c, pk in scored if pk in targets]
    other_cos = [c for c, pk in scored if pk not in targets]
    rank = next((i + 1 for i, (_, pk) in enumerate(scored) if pk in targets), None)
    asked = Asked(
        store=store,
        user=user,
        key=fact.template.key,
        style=style,
        question=text,
        stored=bool(targets),
        fact_cosine=max(fact_cos) if fact_cos else None,
        best_other_cosine=other_cos[0] if other_cos else None,
        rank=rank,
        memories=len(memories),
    )
    for limit in LIMITS:  # embedding search is the top ``limit`` by cosine, cut at the threshold
        top = scored[:limit]
        for threshold in THRESHOLDS:
            asked.recalled[key("embedding", limit, threshold)] = any(
                pk in targets and c >= threshold for c, pk in top
            )
    for mode in MODES[1:]:
        for limit in LIMITS:
            # The store cuts by cosine before fusion (memory.selectors), so each pair is a read.
            for threshold in HYBRID_THRESHOLDS:
                hits = search_memories(
                    user_id=user,
                    query=text,
                    vector=vector,
                    limit=limit,
                    min_similarity=threshold,
                    hybrid=mode != "embedding",
                    hybrid_mode="rrf" if mode == "rrf" else "weighted",
                )
                asked.recalled[key(mode, limit, threshold)] = any(h.id in targets for h in hits)
    return asked


def add_tokens(asked: Asked, candidates: list[tuple[str, int, float]]) -> None:
    from contextplatform.core.estimation import default_estimator

    estimator = default_estimator()
    for mode, limit, threshold in candidates:
        items = through_source(asked.user, asked.question, limit, threshold, mode).items
        asked.tokens[key(mode, limit, threshold)] = sum(estimator.count(i.content) for i in items)


def on_defaults(asked: Asked, targets: set[int]) -> None:
    """The source as a route that writes no match block runs it: its defaults."""
    from contextplatform.core.estimation import default_estimator

    result = through_source(asked.user, asked.question, None, None, "embedding")
    injected = {int(item.metadata["memory_id"]) for item in result.items}
    asked.default_injected = bool(injected & targets)
    asked.default_tokens = sum(default_estimator().count(i.content) for i in result.items)
    asked.default_notes = {
        k: v for k, v in result.notes.items() if k.startswith(("min_similarity", "top_k", "emb"))
    }


# Summaries ---------------------------------------------------------------------------------------


def rate(values: list[bool]) -> float:
    return float(np.mean(values)) if values else float("nan")


def cosine_summary(questions: list[Asked]) -> dict[str, Any]:
    facts = [q.fact_cosine for q in questions if q.fact_cosine is not None]
    others = [q.best_other_cosine for q in questions if q.best_other_cosine is not None]
    ranks = [q.rank for q in questions if q.rank is not None]
    return {
        "questions": len(questions),
        "stored": sum(q.stored for q in questions),
        "fact_cosine_p10_p50_p90": [round(float(np.percentile(facts, p)), 3) for p in (10, 50, 90)]
        if facts
        else None,
        "fact_cosine_min": round(min(facts), 3) if facts else None,
        "best_other_cosine_p10_p50_p90": [
            round(float(np.percentile(others, p)), 3) for p in (10, 50, 90)
        ]
        if others
        else None,
        "rank_le": {
            n: rate([r is not None and r <= n for r in [q.rank for q in questions]])
            for n in (1, 3, 5, 8, 10)
        },
        "ranks": ranks,
    }


def thresholds(mode: str) -> tuple[float, ...]:
    return THRESHOLDS if mode == "embedding" else HYBRID_THRESHOLDS


def recall_table(questions: list[Asked], mode: str) -> dict[str, float]:
    return {
        key(mode, limit, t): rate([q.recalled[key(mode, limit, t)] for q in questions])
        for limit in LIMITS
        for t in thresholds(mode)
    }


def main() -> None:
    log("migrate_schemas …")
    manage("migrate_schemas", "--noinput", "-v", "0")
    setup_django()
    from django_tenants.utils import schema_context

    from memory.models import Memory, MemoryTurn
    from scripts.bench_memory import fact_memories
    from sources.embedding import get_embedder

    ensure_tenant(TENANT)
    started = time.perf_counter()
    embedder = get_embedder()
    embedder.embed_query("warm-up")
    conversations = data.conversations(CONVERSATIONS, TURNS, FACTS, SEED)
    questions: list[Asked] = []
    with schema_context(TENANT):
        Memory.objects.all().delete()
        MemoryTurn.objects.all().delete()
        log(f"writing {len(conversations)} conversations (local extractor) …")
        write_extracted(conversations, embedder)
        log("storing the planted facts' sentences …")
        statement_targets = write_statements(conversations, embedder)
        log("asking …")
        for conversation in conversations:
            for fact in conversation.facts:
                user = f"stmt-{conversation.user}"
                for store, who, targets in (
                    ("extracted", conversation.user, fact_memories(conversation, fact)),
                    ("statements", user, statement_targets[(user, fact.template.key)]),
                ):
                    for style in STYLES:
                        asked = ask(store, who, fact, style, targets, embedder)
                        on_defaults(asked, targets)
                        questions.append(asked)
        noise = off_topic_noise([c.user for c in conversations], embedder)
        # Tokens through the real source, for the paraphrased questions.
        log("injected tokens through the memory source …")
        candidates = [(m, n, t) for m in MODES for n in (3, 5, 8) for t in (0.0, 0.1, 0.2, 0.3)]
        for q in questions:
            if q.style == "paraphrased":
                add_tokens(q, candidates)
    summary: dict[str, Any] = {"embedder": embedder.identity, "stores": {}, "noise": noise}
    for store in STORES:
        for style in STYLES:
            asked = [q for q in questions if q.store == store and q.style == style]
            stored = [q for q in asked if q.stored]
            part: dict[str, Any] = {
                "cosines": cosine_summary(asked),
                "recall": {mode: recall_table(asked, mode) for mode in MODES},
                "recall_stored_only": {mode: recall_table(stored, mode) for mode in MODES},
                "defaults": {
                    "notes": asked[0].default_notes if asked else {},
                    "recall": rate([q.default_injected for q in asked]),
                    "recall_stored_only": rate([q.default_injected for q in stored]),
                    "tokens_mean": round(float(np.mean([q.default_tokens for q in asked])), 1),
                    "tokens_max": max(q.default_tokens for q in asked),
                },
            }
            if style == "paraphrased":
                part["tokens"] = {
                    key(*c): {
                        "mean": round(float(np.mean([q.tokens[key(*c)] for q in asked])), 1),
                        "max": int(max(q.tokens[key(*c)] for q in asked)),
                    }
                    for c in candidates
                }
            summary["stores"][f"{store}/{style}"] = part
    summary["runtime_s"] = round(time.perf_counter() - started, 1)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps({"summary": summary, "questions": [asdict(q) for q in questions]}, indent=1)
    )
    show(summary)


def off_topic_noise(users: list[str], embedder: Any) -> dict[str, dict[str, float]]:
    """Per threshold: the memories (of the top ``NOISE_LIMIT`` by cosine) an off-topic question
    gets, on average, and how often it gets any (the extracted store's users)."""
    from memory.selectors import cosine, live_memories

    counts: dict[float, list[int]] = {t: [] for t in THRESHOLDS}
    for user in users:
        vectors = [list(e) for e in live_memories(user).values_list("embedding", flat=True)]
        for question in OFF_TOPIC:
            vector = embedder.embed_query(question)
            top = sorted((cosine(v, vector) for v in vectors), reverse=True)[:NOISE_LIMIT]
            for threshold in THRESHOLDS:
                counts[threshold].append(sum(c >= threshold for c in top))
    return {
        f"{t:g}": {"mean": round(float(np.mean(n)), 2), "any": rate([x > 0 for x in n])}
        for t, n in counts.items()
    }


def show(summary: dict[str, Any]) -> None:
    print(f"embedder {summary['embedder']}  ({summary['runtime_s']} s)")
    print(f"off-topic questions, memories injected of the top {NOISE_LIMIT} (mean, any):")
    for threshold, value in summary["noise"].items():
        print(f"  {threshold:>5}: {value['mean']:.2f}, {value['any']:.2f}")
    for name, part in summary["stores"].items():
        cos = part["cosines"]
        print(f"\n== {name}: {cos['stored']}/{cos['questions']} facts stored")
        print(
            f"  fact cosine p10/p50/p90 {cos['fact_cosine_p10_p50_p90']} "
            f"(min {cos['fact_cosine_min']}); best other memory p10/p50/p90 "
            f"{cos['best_other_cosine_p10_p50_p90']}"
        )
        print(f"  fact rank by cosine <= n: {cos['rank_le']}")
        on = part["defaults"]
        print(
            f"  the source's defaults {on['notes']}: recall {on['recall']:.3f} "
            f"(stored facts {on['recall_stored_only']:.3f}), tokens mean {on['tokens_mean']} "
            f"max {on['tokens_max']}"
        )
        for label, tables in (("", part["recall"]), (", stored facts", part["recall_stored_only"])):
            for mode in MODES:
                table = tables[mode]
                print(f"  recall{label}, {mode} (rows: limit; columns: min_similarity)")
                print("        " + " ".join(f"{t:>5g}" for t in thresholds(mode)))
                for limit in LIMITS:
                    print(
                        f"   {limit:>3}  "
                        + " ".join(f"{table[key(mode, limit, t)]:>5.2f}" for t in thresholds(mode))
                    )
        if "tokens" in part:
            print("  injected tokens through the source, mean / max:")
            for name_, value in part["tokens"].items():
                print(f"    {name_}: {value['mean']} / {value['max']}")


if __name__ == "__main__":
    main()
