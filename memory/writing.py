"""Write-after-response: the turn a resolve started is written to the user's memories by a task.

At resolve, a route whose memory source writes (``store.auto``, or a request that asks where the
route leaves it unset) queues the turn with the user's message. When the answer is handed back,
the task extracts memories and adds, updates or deletes them. Writes are idempotent per turn: a
turn is written once, however often it is handed back or the task is retried.

A memory the turn adds or updates keeps the turn's time as its ``observed_at``: when the user said
it (the turn was queued at resolve), not when the task ran, so "when did I ..." has an answer.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from contextplatform.core.errors import ApiError
from memory.extraction.llm import LLMExtractor
from memory.extraction.local import extract_local, topic_of
from memory.extraction.planning import SUPERSEDING_TOPICS, plan_writes
from memory.extraction.types import ExistingMemory, MemoryDecision
from memory.metrics import MEMORY_EXTRACTION, MEMORY_STORE_OPERATIONS
from memory.models import Memory, MemoryTurn
from sources.embedding import Embedder, get_embedder

if TYPE_CHECKING:
    from memory.selectors import MemoryHit

logger = logging.getLogger("contextplatform.memory")
DEDUP_THRESHOLD = 0.9
EXISTING_FOR_DEDUP = 20
RELATED_FOR_LLM = 20
RELATED_MIN_SIMILARITY = 0.3


def queue_turn(
    *, resolve_id: str, route: str, user: str, user_text: str, extractor: str
) -> MemoryTurn:
    turn, _ = MemoryTurn.objects.get_or_create(
        resolve_id=resolve_id,
        defaults={"route": route, "user_id": user, "user_text": user_text, "extractor": extractor},
    )
    return turn


def hand_back(*, resolve_id: str, assistant_text: str) -> bool:
    """Attach the answer and send the write; False when this resolve queued no turn."""
    updated = MemoryTurn.objects.filter(resolve_id=resolve_id, status="pending").update(
        assistant_text=assistant_text, handed_back_at=timezone.now()
    )
    if not updated:
        return False
    if write_turn_task.app.conf.task_always_eager:
        write_turn_task.apply(args=[resolve_id])
    else:
        # robust: a broker that cannot be reached is logged, not the hand-back's failure; the
        # turn stays pending and resend_stranded_turns sends it again once the broker is back.
        transaction.on_commit(lambda: write_turn_task.delay(resolve_id), robust=True)
    return True


RESEND_BATCH = 1000


def resend_stranded_turns() -> int:
    """Send again the writes of this schema's turns handed back long ago and still pending; how
    many. A write runs once however often it is sent, so a turn merely slow is no harm.

    "Long ago" is ``MEMORY_RESEND_AFTER_S``: longer than a queued write waits behind others plus
    the broker's redelivery of a killed worker's task (``visibility_timeout``)."""
    cutoff = timezone.now() - timedelta(seconds=settings.MEMORY_RESEND_AFTER_S)
    stranded = list(
        MemoryTurn.objects.filter(status="pending", handed_back_at__lt=cutoff)
        .order_by("handed_back_at")
        .values_list("resolve_id", flat=True)[:RESEND_BATCH]
    )
    for resolve_id in stranded:
        write_turn_task.delay(resolve_id)
    if stranded:
        logger.warning("memory_turns_resent", extra={"turns": len(stranded)})
    return len(stranded)


def existing_memory(hit: MemoryHit) -> ExistingMemory:
    return ExistingMemory(id=hit.id, content=hit.content, embedding=hit.embedding)


def existing_memories(user_id: str, vectors: list[list[float]]) -> list[ExistingMemory]:
    from memory.selectors import search_memories

    seen: dict[int, ExistingMemory] = {}
    for vector in vectors:
        for hit in search_memories(
            user_id=user_id,
            query="",
            vector=vector,
            limit=EXISTING_FOR_DEDUP,
            min_similarity=DEDUP_THRESHOLD,
        ):
            seen[hit.id] = existing_memory(hit)
    return list(seen.values())


CURRENT_FOR_SUPERSEDING = 200


def current_memories(user_id: str, topics: set[str]) -> list[ExistingMemory]:
    """The user's live memories that state one of ``topics`` (where they live, what they work
    as): those a new move or job supersedes."""
    from memory.selectors import live_memories

    if not topics:
        return []
    rows = live_memories(user_id).order_by("-created_at", "-id").values_list("id", "content")
    found = (
        ExistingMemory(id=memory_id, content=content, topic=topic_of(content))
        for memory_id, content in rows[:CURRENT_FOR_SUPERSEDING]
    )
    return [memory for memory in found if memory.topic in topics]


def related_memories(user_id: str, user_text: str, embedder: Embedder) -> list[ExistingMemory]:
    """The user's memories related to the turn, shown to the LLM extractor."""
    from memory.selectors import search_memories

    if not user_text.strip():
        return []
    hits = search_memories(
        user_id=user_id,
        query=user_text,
        vector=embedder.embed_query(user_text),
        limit=RELATED_FOR_LLM,
        min_similarity=RELATED_MIN_SIMILARITY,
    )
    return [existing_memory(hit) for hit in hits]


def write_turn(resolve_id: str, embedder: Embedder) -> MemoryTurn:
    with transaction.atomic():
        turn = MemoryTurn.objects.select_for_update().filter(resolve_id=resolve_id).first()
        if turn is None or turn.status != "pending":
            return turn  # already written (or never queued): idempotent
        extractor = "local" if turn.extractor == "local" else "llm"
        # The local extractor's statements are embedded once, for dedup and for storing them.
        known_vectors: dict[str, list[float]] = {}
        try:
            if extractor == "local":
                extracted = extract_local(
                    turn.user_text, turn.assistant_text, observed_at=turn.created_at
                )
                vectors = embedder.embed([e.content for e in extracted]) if extracted else []
                known_vectors = {e.content: v for e, v in zip(extracted, vectors, strict=True)}
                topics = {e.topic for e in extracted if e.topic in SUPERSEDING_TOPICS and e.topic}
                decisions = plan_writes(
                    extracted,
                    existing_memories(turn.user_id, vectors),
                    vectors,
                    DEDUP_THRESHOLD,
                    current=current_memories(turn.user_id, topics),
                )
            else:
                decisions = LLMExtractor(turn.extractor).decide(
                    turn.user_text,
                    turn.assistant_text,
                    related_memories(turn.user_id, turn.user_text, embedder),
                    observed_at=turn.created_at,
                )
        except Exception as error:
            MEMORY_EXTRACTION.labels(extractor=extractor, status="error").inc()
            turn.status, turn.error = "failed", f"{type(error).__name__}: {error}"[:2000]
            turn.save(update_fields=["status", "error"])
            logger.warning(
                "memory_extraction_failed", extra={"resolve_id": resolve_id, "error": turn.error}
            )
            return turn
        counts = {"add": 0, "update": 0, "delete": 0}
        for decision in decisions:
            try:
                applied = apply_decision(
                    turn, decision, embedder, known_vectors.get(decision.content)
                )
            except ApiError as error:  # e.g. an extracted statement over the content limit
                logger.info(
                    "memory_decision_skipped",
                    extra={"resolve_id": resolve_id, "error": error.message},
                )
                continue
            if applied:
                counts[decision.action] += 1
                MEMORY_STORE_OPERATIONS.labels(operation=decision.action).inc()
        MEMORY_EXTRACTION.labels(extractor=extractor, status="ok").inc()
        turn.status = "written" if any(counts.values()) else "skipped"
        turn.added, turn.updated, turn.deleted = counts["add"], counts["update"], counts["delete"]
        turn.user_text = turn.assistant_text = ""  # nothing of the turn is kept beyond its memories
        turn.written_at = timezone.now()
        turn.save()
    return turn


def apply_decision(
    turn: MemoryTurn,
    decision: MemoryDecision,
    embedder: Embedder,
    vector: list[float] | None = None,
) -> bool:
    """Apply one decision; ``vector`` is the decision's content embedded by ``embedder``, if known."""
    from memory.services import create_memory, delete_memory, supersede_memories, update_memory

    if decision.action == "add":
        added = create_memory(
            user_id=turn.user_id,
            content=decision.content,
            kind=decision.kind,
            source_request_id=turn.resolve_id,
            source_turn=f"{turn.resolve_id}#0",
            embedder=embedder,
            vector=vector,
            observed_at=turn.created_at,
        )
        if decision.supersedes:  # the replaced memories stay as history, no longer recalled
            supersede_memories(user_id=turn.user_id, memory_ids=decision.supersedes, by=added)
        return True
    if decision.action == "update":
        memory = Memory.objects.filter(user_id=turn.user_id, pk=decision.target_id).first()
        if memory is None:
            return False
        update_memory(
            memory=memory,
            content=decision.content,
            kind=decision.kind,
            embedder=embedder,
            vector=vector,
            observed_at=turn.created_at,  # said again: dated by the latest turn
        )
        return True
    return delete_memory(user_id=turn.user_id, memory_id=decision.target_id)


@shared_task(name="memory.write_turn", acks_late=True)
def write_turn_task(resolve_id: str) -> str | None:
    turn = write_turn(resolve_id, get_embedder())
    return turn.status if turn else None
