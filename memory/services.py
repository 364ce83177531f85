"""Writes of memories: create, edit, delete, erase one user, and retention.

Every write names the user (or the memory's own id, got through a user-scoped read) in SQL.
``erase_user`` is one ``DELETE ... WHERE user_id = %s``: it cannot reach another user's rows, and
a tenant's table lives in the tenant's own schema, so it cannot reach another tenant's either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from django.contrib.postgres.search import SearchVector
from django.db import connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Least
from django.utils import timezone

from contextplatform.core.errors import invalid_request
from memory.models import KINDS, Memory
from memory.selectors import MAX_ID, TEXT_CONFIG, require_user
from memory.signals import memories_deleted, memories_written, user_erased
from sources.embedding import Embedder
from sources.prewarm import invalidate_prewarm

logger = logging.getLogger("contextplatform.memory")

MAX_CONTENT_CHARS = 10_000
KIND_NAMES: tuple[str, ...] = tuple(name for name, _ in KINDS)


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()


def content_problem(content: object) -> str | None:
    """What is wrong with a memory's content, in the words every entry point reports, or None."""
    if not isinstance(content, str) or not content.strip():
        return "must contain text"
    if len(content) > MAX_CONTENT_CHARS:
        return f"has {len(content)} characters; the limit is {MAX_CONTENT_CHARS}"
    return None


def aware_datetime(value: Any) -> Any:
    """ISO 8601 text with a time zone (JSON has no datetime type)."""
    if value is None or isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise ValueError("expected an ISO 8601 date-time string or null")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("expected an ISO 8601 date-time string") from None
    offset = parsed.utcoffset()
    if offset is None:
        raise ValueError("the date-time needs a time zone (e.g. Z or +00:00)")
    # Real time zones lie within ±14 hours; PostgreSQL refuses larger offsets (ISO 8601 allows
    # up to ±23:59), and years before 1 AD or past 9999 do not survive the conversion to UTC.
    if abs(offset) > timedelta(hours=14):
        raise ValueError("the time zone offset must lie within ±14:00")
    try:
        parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError("the date-time is out of range") from None
    return parsed


def check_content(content: str) -> str:
    problem = content_problem(content)
    if problem:
        raise invalid_request(f"content: {problem}", "content")
    return content


def check_kind(kind: str) -> str:
    if kind not in KIND_NAMES:
        raise invalid_request(f"kind: must be one of {', '.join(KIND_NAMES)}", "kind")
    return kind


def ensure_tenant_schema() -> None:
    """Memories live in tenant schemas only; a write on the public schema is a bug."""
    if connection.schema_name == "public":
        raise RuntimeError("memory writes need a tenant schema, not public")


def table() -> str:
    return connection.ops.quote_name(Memory._meta.db_table)


def refresh_search_vector(memory_id: int) -> None:
    Memory.objects.filter(pk=memory_id).update(
        search_vector=SearchVector("content", config=TEXT_CONFIG)
    )


def embed(content: str, embedder: Embedder, vector: Sequence[float] | None = None) -> list[float]:
    """``content``'s embedding: ``vector`` when the caller already has it from ``embedder``."""
    return list(vector) if vector is not None else embedder.embed([content])[0]


def create_memory(
    *,
    user_id: str,
    content: str,
    kind: str = "fact",
    metadata: dict[str, Any] | None = None,
    source_request_id: str = "",
    source_turn: str = "",
    embedder: Embedder,
    expires_at: datetime | None = None,
    strength: float = 1.0,
    vector: Sequence[float] | None = None,
    observed_at: datetime | None = None,
    **history: Any,
) -> Memory:
    """Embed and store one memory of the user (with its full-text vector and embedder identity).
    ``vector``: the content's embedding by ``embedder``, when the caller has it already;
    ``observed_at``: when the user said it (the turn's time). ``history``: what an imported
    memory keeps of its past (``HISTORY_FIELDS``: its id where free, its times, whether and by
    what it was superseded)."""
    require_user(user_id)
    ensure_tenant_schema()
    unknown = set(history) - HISTORY_FIELDS
    if unknown:
        raise TypeError(f"create_memory: unexpected fields {sorted(unknown)}")
    vector = embed(check_content(content), embedder, vector)
    kept = {name: value for name, value in history.items() if value is not None}
    stamps = {name: kept.pop(name) for name in ("created_at", "updated_at") if name in kept}
    with transaction.atomic():
        memory = Memory.objects.create(
            **kept,
            user_id=user_id,
            content=content,
            kind=check_kind(kind),
            metadata=metadata or {},
            embedding=vector,
            embedder=embedder.identity,
            source_request_id=source_request_id,
            source_turn=source_turn,
            expires_at=expires_at,
            strength=strength,
            observed_at=observed_at,
        )
        refresh_search_vector(memory.pk)
        if stamps:  # the auto times are set on save; an imported memory keeps its own
            Memory.objects.filter(pk=memory.pk).update(**stamps)
        if "id" in kept:
            advance_id_sequence()
    invalidate_prewarm(connection.schema_name, user=user_id)
    memories_written.send(Memory, ids=[memory.pk])
    memory.refresh_from_db()
    return memory


HISTORY_FIELDS = frozenset(
    {"id", "created_at", "updated_at", "last_used_at", "superseded_at", "superseded_by"}
)


def advance_id_sequence() -> None:
    """After a row written with its own id: the table's id sequence moved past every id, so the
    next memory written without one never collides (it never moves back)."""
    name = table()
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT setval(seq, GREATEST(
                    (SELECT COALESCE(MAX("id"), 1) FROM {name}),
                    COALESCE(pg_sequence_last_value(seq::regclass), 1)))
                FROM (SELECT pg_get_serial_sequence(%s, 'id') AS seq) AS sequence""",
            [name],
        )


def update_memory(
    *,
    memory: Memory,
    content: str | None = None,
    metadata: dict[str, Any] | None = None,
    kind: str | None = None,
    embedder: Embedder,
    expires_at: datetime | _Unset | None = UNSET,
    vector: Sequence[float] | None = None,
    observed_at: datetime | _Unset | None = UNSET,
) -> Memory:
    """Change what is given (``metadata`` replaces the whole object); a new content is embedded
    again (or given its ``vector``, see ``create_memory``) and its full-text vector rebuilt.
    ``expires_at=None`` clears the expiry, ``observed_at=None`` the date it was said."""
    ensure_tenant_schema()
    changes: dict[str, Any] = {}
    if content is not None and content != memory.content:
        changes["content"] = check_content(content)
        changes["embedding"] = embed(content, embedder, vector)
        changes["embedder"] = embedder.identity
    if metadata is not None:
        changes["metadata"] = metadata
    if kind is not None:
        changes["kind"] = check_kind(kind)
    if not isinstance(expires_at, _Unset):
        changes["expires_at"] = expires_at
    if not isinstance(observed_at, _Unset) and observed_at != memory.observed_at:
        changes["observed_at"] = observed_at
    if not changes:
        return memory
    changes["updated_at"] = timezone.now()
    with transaction.atomic():
        updated = Memory.objects.filter(pk=memory.pk, user_id=require_user(memory.user_id)).update(
            **changes
        )
        if updated and "content" in changes:
            refresh_search_vector(memory.pk)
    invalidate_prewarm(connection.schema_name, user=memory.user_id)
    if updated:
        memories_written.send(Memory, ids=[memory.pk])
    memory.refresh_from_db()
    return memory


def delete_memory(*, user_id: str, memory_id: int) -> bool:
    """Delete one memory if it is this user's. Returns whether one was deleted."""
    require_user(user_id)
    ensure_tenant_schema()
    if not 0 < memory_id <= MAX_ID:
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            f'DELETE FROM {table()} WHERE "user_id" = %s AND "id" = %s', [user_id, memory_id]
        )
        deleted = cursor.rowcount > 0
    if deleted:
        invalidate_prewarm(connection.schema_name, user=user_id)
        memories_deleted.send(Memory, ids=[memory_id])
    return deleted


def supersede_memories(
    *, user_id: str, memory_ids: Sequence[int | str], by: Memory, at: datetime | None = None
) -> int:
    """Mark these memories of the user replaced by ``by`` (a new home replaces the old one):
    kept as history, listed and exported and under retention, but no longer recalled. Those
    already superseded keep their first replacement. Returns how many were marked."""
    require_user(user_id)
    ensure_tenant_schema()
    ids = [int(memory_id) for memory_id in memory_ids if int(memory_id) != by.pk]
    if not ids:
        return 0
    marking = Memory.objects.filter(
        user_id=user_id, pk__in=ids, superseded_at__isnull=True
    ).exclude(pk=by.pk)
    marked_ids = list(marking.values_list("pk", flat=True))
    marked = Memory.objects.filter(pk__in=marked_ids, superseded_at__isnull=True).update(
        superseded_at=at or timezone.now(), superseded_by=by.pk
    )
    if marked:
        invalidate_prewarm(connection.schema_name, user=user_id)
        memories_written.send(Memory, ids=marked_ids)
    return marked


def revise_memory(
    *,
    memory: Memory,
    content: str,
    embedder: Embedder,
    kind: str | None = None,
    vector: Sequence[float] | None = None,
    observed_at: datetime | None = None,
    source_request_id: str = "",
    source_turn: str = "",
    write: Callable[..., Memory] | None = None,
) -> Memory:
    """A new wording of ``memory`` (the extractor's update: the same fact said better, or
    corrected): written as a new memory that supersedes the old one, so the old wording stays as
    the user's history (listed, exported, under retention and erasure) and is no longer recalled.
    The new memory takes the old one's kind unless ``kind`` is given, and keeps its metadata,
    expiry and strength (what the tenant set and what recall earned belong to the fact, not to
    its wording). ``write`` stores it (the route's store's ``write``; ``create_memory`` when not
    given). Said in the same words, nothing is lost: the memory is dated anew in place."""
    if content == memory.content:
        return update_memory(
            memory=memory,
            kind=kind,
            embedder=embedder,
            observed_at=observed_at if observed_at is not None else UNSET,
        )
    revised: Memory = (write or create_memory)(
        user_id=memory.user_id,
        content=content,
        kind=kind or memory.kind,
        metadata=dict(memory.metadata or {}),
        expires_at=memory.expires_at,
        strength=memory.strength,
        source_request_id=source_request_id,
        source_turn=source_turn,
        embedder=embedder,
        vector=vector,
        observed_at=observed_at,
    )
    supersede_memories(user_id=memory.user_id, memory_ids=[memory.pk], by=revised)
    return revised


def erase_user(*, user_id: str) -> int:
    """Delete every memory of one user, and nobody else's: one indexed ``DELETE ... WHERE
    user_id = %s`` in the current tenant's schema. Refuses an empty user id."""
    require_user(user_id)
    ensure_tenant_schema()
    with connection.cursor() as cursor:
        cursor.execute(f'DELETE FROM {table()} WHERE "user_id" = %s', [user_id])
        deleted = cursor.rowcount
    invalidate_prewarm(connection.schema_name, user=user_id)
    user_erased.send(Memory, user_id=user_id)
    logger.info("memory_user_erased", extra={"deleted": deleted, "schema": connection.schema_name})
    return deleted


def touch_used(ids: Sequence[int], *, user_id: str | None = None) -> int:
    """Record that these memories were just recalled: ``last_used_at``, and a little more strength
    (capped), so retention prunes what is never used first. With ``user_id``, only that user's."""
    if not ids:
        return 0
    memories = Memory.objects.filter(pk__in=list(ids))
    if user_id is not None:
        memories = memories.filter(user_id=require_user(user_id))
    return memories.update(
        last_used_at=timezone.now(),
        strength=Least(F("strength") + STRENGTH_PER_USE, Value(MAX_STRENGTH)),
    )


STRENGTH_PER_USE = 0.1
MAX_STRENGTH = 5.0


# --- retention -------------------------------------------------------------------------------------


def deleted_ids(sql: str, params: Sequence[Any]) -> int:
    """Run a ``DELETE ... RETURNING "id"``; the count, the ids announced (the external indexes
    drop their vectors)."""
    with connection.cursor() as cursor:
        cursor.execute(f'{sql} RETURNING "id"', params)
        ids = [row[0] for row in cursor.fetchall()]
    if ids:
        memories_deleted.send(Memory, ids=ids)
    return len(ids)


def delete_expired(*, now: datetime | None = None) -> int:
    return deleted_ids(
        f'DELETE FROM {table()} WHERE "expires_at" IS NOT NULL AND "expires_at" <= %s',
        [now or timezone.now()],
    )


def delete_older_than(*, max_age_days: int, now: datetime | None = None) -> int:
    """A memory's age counts from when it was last written: a fact the user stated again (and
    the write path merged into the old memory) is as fresh as a new one."""
    cutoff = (now or timezone.now()) - timedelta(days=max_age_days)
    return deleted_ids(f'DELETE FROM {table()} WHERE "updated_at" < %s', [cutoff])


def prune_weakest(*, max_per_user: int) -> int:
    """For each user with more than ``max_per_user`` memories, delete the weakest beyond that
    count: superseded history first (a past home must never push out a current fact), then lowest
    strength, then oldest."""
    name = table()
    return deleted_ids(
        f"""
            DELETE FROM {name} WHERE "id" IN (
                SELECT "id" FROM (
                    SELECT "id", row_number() OVER (
                        PARTITION BY "user_id"
                        ORDER BY ("superseded_at" IS NULL) DESC, "strength" DESC,
                                 "created_at" DESC, "id" DESC
                    ) AS "position"
                    FROM {name}
                    WHERE "user_id" IN (
                        SELECT "user_id" FROM {name} GROUP BY "user_id" HAVING count(*) > %s
                    )
                ) AS "ranked"
                WHERE "position" > %s
            )
            """,
        [max_per_user, max_per_user],
    )


def apply_retention(
    *, max_age_days: int | None, max_per_user: int | None, now: datetime | None = None
) -> dict[str, int]:
    """The current tenant's retention: expired memories, then those older than ``max_age_days``,
    then each user's weakest beyond ``max_per_user``. ``None`` (or 0: a typo must not wipe a
    tenant's memories every day) switches a rule off."""
    ensure_tenant_schema()
    counts = {"expired": 0, "aged": 0, "pruned": 0}
    with transaction.atomic():
        counts["expired"] = delete_expired(now=now)
        if max_age_days:
            counts["aged"] = delete_older_than(max_age_days=max_age_days, now=now)
        if max_per_user:
            counts["pruned"] = prune_weakest(max_per_user=max_per_user)
    if any(counts.values()):  # several users at once: every pre-warmed session of the tenant
        invalidate_prewarm(connection.schema_name)
    return counts
