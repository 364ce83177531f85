"""Write-after-response: the turn a resolve started is written to the user's memories by a task.

At resolve, a route whose memory source writes (``store.auto``, or a request that asks where the
route leaves it unset) queues the turn with the user's message. When the answer is handed back,
the task extracts memories and adds, updates or deletes them. An update keeps what it replaces:
the new wording is a new memory superseding the old one, kept as the user's history. Writes are
idempotent per turn: a turn is written once, however often it is handed back or the task is
retried.

A memory the turn adds or updates keeps the turn's time as its ``observed_at``: when the user said
it (the turn was queued at resolve), not when the task ran, so "when did I ..." has an answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from contextplatform.core.errors import ApiError
from contextplatform.core.llm import metered
from memory.extraction.llm import LLMExtractor
from memory.extraction.local import extract_local, topic_of
from memory.extraction.planning import plan_writes
from memory.extraction.types import SUPERSEDING_TOPICS, ExistingMemory, MemoryDecision
from memory.key_spend import charge_extraction
from memory.metrics import MEMORY_EXTRACTION, MEMORY_STORE_OPERATIONS
from memory.models import Memory, MemoryTurn
from memory.stores import get_store
from sources.embedding import Embedder, get_embedder

if TYPE_CHECKING:
    from memory.selectors import MemoryHit

logger = logging.getLogger("contextplatform.memory")
DEDUP_THRESHOLD = 0.9
EXISTING_FOR_DEDUP = 20
RELATED_FOR_LLM = 20
RELATED_MIN_SIMILARITY = 0.3


def queue_turn(
    *,
    resolve_id: str,
    route: str,
    user: str,
    user_text: str,
    extractor: str,
    key_id: int | None = None,
) -> MemoryTurn:
    turn, _ = MemoryTurn.objects.get_or_create(
        resolve_id=resolve_id,
        defaults={
            "route": route,
            "user_id": user,
            "user_text": user_text,
            "extractor": extractor,
            "key_id": key_id,
        },
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
    seen: dict[int, ExistingMemory] = {}
    for vector in vectors:
        for hit in get_store().recall(
            user_id, "", vector, EXISTING_FOR_DEDUP, mode="dense", min_similarity=DEDUP_THRESHOLD
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
    if not user_text.strip():
        return []
    hits = get_store().recall(
        user_id,
        user_text,
        embedder.embed_query(user_text),
        RELATED_FOR_LLM,
        mode="dense",
        min_similarity=RELATED_MIN_SIMILARITY,
    )
    return [existing_memory(hit) for hit in hits]


def extractor_kind(extractor: str) -> str:
    """The metrics' name of an extractor: ``local``, or ``llm`` for any deployment."""
    return "local" if extractor == "local" else "llm"


def decide(
    *,
    user_id: str,
    user_text: str,
    assistant_text: str,
    extractor: str,
    observed_at: datetime | None,
    embedder: Embedder,
) -> tuple[list[MemoryDecision], dict[str, list[float]]]:
    """What a turn leaves in the user's memory: the decisions, and the embeddings of the contents
    already computed (the local extractor's statements are embedded once, for dedup and for
    storing them). Raises whatever the extractor raises."""
    if extractor_kind(extractor) == "llm":
        decisions = LLMExtractor(extractor).decide(
            user_text,
            assistant_text,
            related_memories(user_id, user_text, embedder),
            observed_at=observed_at,
        )
        return decisions, {}
    extracted = extract_local(user_text, assistant_text, observed_at=observed_at)
    vectors = embedder.embed([e.content for e in extracted]) if extracted else []
    known_vectors = {e.content: v for e, v in zip(extracted, vectors, strict=True)}
    topics = {e.topic for e in extracted if e.topic in SUPERSEDING_TOPICS and e.topic}
    decisions = plan_writes(
        extracted,
        existing_memories(user_id, vectors),
        vectors,
        DEDUP_THRESHOLD,
        current=current_memories(user_id, topics),
    )
    return decisions, known_vectors


@dataclass(frozen=True)
class TurnOrigin:
    """Where the memories a turn writes come from: the user, when it was said, which resolve."""

    user_id: str
    observed_at: datetime | None
    source_request_id: str = ""
    source_turn: str = ""


def apply_decisions(
    origin: TurnOrigin,
    decisions: list[MemoryDecision],
    embedder: Embedder,
    known_vectors: dict[str, list[float]],
    *,
    label: str,
) -> tuple[dict[str, int], list[Memory]]:
    """Apply the decisions (one refused, e.g. over the content limit, is skipped and logged):
    the counts by action, and the memories added or updated."""
    counts = {"add": 0, "update": 0, "delete": 0}
    written: list[Memory] = []
    for decision in decisions:
        try:
            applied = apply_decision(
                origin, decision, embedder, known_vectors.get(decision.content)
            )
        except ApiError as error:
            logger.info("memory_decision_skipped", extra={"turn": label, "error": error.message})
            continue
        if applied is False:
            continue
        counts[decision.action] += 1
        MEMORY_STORE_OPERATIONS.labels(operation=decision.action).inc()
        if isinstance(applied, Memory):
            written.append(applied)
    return counts, written


def write_turn(resolve_id: str, embedder: Embedder) -> MemoryTurn:
    with transaction.atomic():
        turn = MemoryTurn.objects.select_for_update().filter(resolve_id=resolve_id).first()
        if turn is None or turn.status != "pending":
            return turn  # already written (or never queued): idempotent
        extractor = extractor_kind(turn.extractor)
        try:
            with metered() as usage:
                decisions, known_vectors = decide(
                    user_id=turn.user_id,
                    user_text=turn.user_text,
                    assistant_text=turn.assistant_text,
                    extractor=turn.extractor,
                    observed_at=turn.created_at,
                    embedder=embedder,
                )
        except Exception as error:
            # An answer the extractor refused was still paid for; charged with the turn's outcome,
            # so a write rolled back (and retried) charges nothing twice.
            charge_extraction(key_id=turn.key_id, extractor=turn.extractor, usage=usage)
            MEMORY_EXTRACTION.labels(extractor=extractor, status="error").inc()
            turn.status, turn.error = "failed", f"{type(error).__name__}: {error}"[:2000]
            turn.save(update_fields=["status", "error"])
            logger.warning(
                "memory_extraction_failed", extra={"resolve_id": resolve_id, "error": turn.error}
            )
            return turn
        charge_extraction(key_id=turn.key_id, extractor=turn.extractor, usage=usage)
        origin = TurnOrigin(turn.user_id, turn.created_at, turn.resolve_id, f"{turn.resolve_id}#0")
        counts, _ = apply_decisions(origin, decisions, embedder, known_vectors, label=resolve_id)
        MEMORY_EXTRACTION.labels(extractor=extractor, status="ok").inc()
        turn.status = "written" if any(counts.values()) else "skipped"
        turn.added, turn.updated, turn.deleted = counts["add"], counts["update"], counts["delete"]
        turn.user_text = turn.assistant_text = ""  # nothing of the turn is kept beyond its memories
        turn.written_at = timezone.now()
        turn.save()
    return turn


def apply_decision(
    origin: TurnOrigin,
    decision: MemoryDecision,
    embedder: Embedder,
    vector: list[float] | None = None,
) -> Memory | bool:
    """Apply one decision; ``vector`` is the decision's content embedded by ``embedder``, if known.
    The memory added or written by the update (``revise_memory``: the old wording superseded,
    not overwritten); for a delete, whether one was deleted."""
    from memory.selectors import live_memories
    from memory.services import delete_memory, revise_memory, supersede_memories

    if decision.action == "add":
        added = get_store().write(
            user_id=origin.user_id,
            content=decision.content,
            kind=decision.kind,
            source_request_id=origin.source_request_id,
            source_turn=origin.source_turn,
            embedder=embedder,
            vector=vector,
            observed_at=origin.observed_at,
        )
        if decision.supersedes:  # the replaced memories stay as history, no longer recalled
            supersede_memories(user_id=origin.user_id, memory_ids=decision.supersedes, by=added)
        return added
    if decision.action == "update":
        # Only a live memory is revised: one superseded meanwhile is history already, and a new
        # wording of it would bring back what the user has since replaced.
        memory = live_memories(origin.user_id).filter(pk=decision.target_id).first()
        if memory is None:
            return False
        return revise_memory(
            memory=memory,
            content=decision.content,
            kind=decision.kind,
            embedder=embedder,
            vector=vector,
            observed_at=origin.observed_at,  # said again: dated by the latest turn
            source_request_id=origin.source_request_id,
            source_turn=origin.source_turn,
            write=get_store().write,
        )
    return delete_memory(user_id=origin.user_id, memory_id=decision.target_id)


@shared_task(name="memory.write_turn", acks_late=True)
def write_turn_task(resolve_id: str) -> str | None:
    turn = write_turn(resolve_id, get_embedder())
    return turn.status if turn else None


@dataclass
class ConversationWrite:
    """What a conversation posted to a user's memories left: the memories added or updated, the
    counts by action, and why nothing was written when nothing was."""

    memories: list[Memory]
    counts: dict[str, int]
    reason: str | None = None


def write_conversation(
    *,
    user_id: str,
    user_text: str,
    assistant_text: str,
    extractor: str,
    observed_at: datetime,
    embedder: Embedder,
) -> ConversationWrite:
    """A conversation given through the API, written as a handed-back turn is: the same
    extractor, the same planning against the user's memories, dated ``observed_at``. Raises the
    extractor's error (``ExtractionError``) and the embedder's."""
    kind = extractor_kind(extractor)
    try:
        decisions, known_vectors = decide(
            user_id=user_id,
            user_text=user_text,
            assistant_text=assistant_text,
            extractor=extractor,
            observed_at=observed_at,
            embedder=embedder,
        )
    except Exception:
        MEMORY_EXTRACTION.labels(extractor=kind, status="error").inc()
        raise
    MEMORY_EXTRACTION.labels(extractor=kind, status="ok").inc()
    if not decisions:
        return ConversationWrite([], {"add": 0, "update": 0, "delete": 0}, "nothing_extracted")
    origin = TurnOrigin(user_id, observed_at)
    counts, written = apply_decisions(origin, decisions, embedder, known_vectors, label="api")
    reason = None if any(counts.values()) else "nothing_written"
    return ConversationWrite(written, counts, reason)
