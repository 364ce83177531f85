"""Reads of profiles and session messages, always scoped by user in the query itself."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from contextplatform.core.config_cache import ProcessCache
from sources.models import (
    ChatMessage,
    ChatSession,
    Chunk,
    Collection,
    Document,
    IngestionJob,
    UserProfile,
)
from sources.signals import PROFILES_CACHE


def user_profile(user_id: str) -> UserProfile | None:
    return UserProfile.objects.filter(user_id=user_id).first()


_ATTRIBUTES_FIELD = UserProfile._meta.get_field("attributes")
_PROFILE_ATTRIBUTES_SQL = (
    f"SELECT {_ATTRIBUTES_FIELD.column} FROM {UserProfile._meta.db_table} WHERE user_id = %s"
)


# Every resolve of a route with a profile reads its user's attributes, and they are written
# rarely (PUT /users/{user}/profile, the admin): kept per process by schema and user, as the
# stored JSON text (decoded at each read, so no caller shares a mutable copy), and dropped in
# every process when any profile is saved or deleted (sources.signals).
PROFILES: ProcessCache[tuple[str, str], str | None] = ProcessCache(PROFILES_CACHE)


def user_attributes(user_id: str) -> dict[str, Any] | None:
    """The user's profile attributes, or None without a profile."""
    stored = PROFILES.get((connection.schema_name, user_id), lambda: _stored_attributes(user_id))
    if stored is None:
        return None
    # Decoded by the model's field, as the ORM would (Django has psycopg hand JSON over as text).
    return dict(_ATTRIBUTES_FIELD.from_db_value(stored, None, connection))


def _stored_attributes(user_id: str) -> str | None:
    """One SQL statement (building it through the ORM cost more than running it)."""
    with connection.cursor() as cursor:
        cursor.execute(_PROFILE_ATTRIBUTES_SQL, [user_id])
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def session_messages(*, session_key: str, user_id: str | None) -> QuerySet[ChatMessage]:
    return ChatMessage.objects.filter(
        session__key=session_key, session__user_id=user_id or ""
    ).order_by("seq")


# A session's turns are read by every resolve of a route with history (the source, then the turn's
# start): written as SQL once, since building the query through the ORM cost more than running it.
_SESSION_TURNS_SQL = (
    f"SELECT m.role, m.text FROM {ChatMessage._meta.db_table} m"
    f" JOIN {ChatSession._meta.db_table} s ON s.id = m.session_id"
    " WHERE s.key = %s AND s.user_id = %s ORDER BY m.seq"
)
_LAST_SESSION_TURN_SQL = f"{_SESSION_TURNS_SQL} DESC LIMIT 1"
_SESSION_TURNS_AS_OF_SQL = _SESSION_TURNS_SQL.replace(
    " ORDER BY", f" AND m.{ChatMessage._meta.get_field('created_at').column} <= %s ORDER BY"
)


def session_turns(
    *,
    session_key: str,
    user_id: str | None,
    for_resolve: str = "",
    as_of: datetime | None = None,
) -> list[tuple[str, str]]:
    """``(role, text)`` of each message of the user's session, oldest first. Read ``for_resolve``
    (its id), the turns are remembered on this thread for that resolve's own turn start. ``as_of``:
    only the messages written by then (a rerun of a recorded request)."""
    with connection.cursor() as cursor:
        if as_of is None:
            cursor.execute(_SESSION_TURNS_SQL, [session_key, user_id or ""])
        else:
            cursor.execute(_SESSION_TURNS_AS_OF_SQL, [session_key, user_id or "", as_of])
        turns = [(role, text) for role, text in cursor.fetchall()]
    if for_resolve:
        _READ_FOR_RESOLVE.key = _read_key(for_resolve, session_key, user_id)
        _READ_FOR_RESOLVE.last = turns[-1] if turns else None
    return turns


def last_session_turn(
    *, session_key: str, user_id: str | None, for_resolve: str = ""
) -> tuple[str, str] | None:
    """``(role, text)`` of the user's session's latest message; ``None`` for an empty session.
    ``for_resolve``: the resolve whose history source read the session's turns moments ago on
    this thread is answered from that read, not with a statement of its own."""
    if for_resolve and _READ_FOR_RESOLVE.key == _read_key(for_resolve, session_key, user_id):
        return _READ_FOR_RESOLVE.last
    with connection.cursor() as cursor:
        cursor.execute(_LAST_SESSION_TURN_SQL, [session_key, user_id or ""])
        row = cursor.fetchone()
    return None if row is None else (row[0], row[1])


class _SessionRead(threading.local):
    """The latest session read made for a resolve on this thread (a request's own thread).

    A resolve reads its session's turns for the history source, then, once accepted, reads the
    latest of them again to start the turn: a second statement for what the first had just read.
    Between the two, the resolve writes nothing to the session, so the first read answers the
    second; another request of the same session could append between them, as it could between
    the turn start's own read and write."""

    key: tuple[str, str, str, str] | None = None
    last: tuple[str, str] | None = None


_READ_FOR_RESOLVE = _SessionRead()


def _read_key(resolve_id: str, session_key: str, user_id: str | None) -> tuple[str, str, str, str]:
    return resolve_id, connection.schema_name, session_key, user_id or ""


def forget_session_read() -> None:
    """This thread's remembered session read no longer holds (its session was written)."""
    _READ_FOR_RESOLVE.key = None


def session_users(session_key: str, *, limit: int = 2) -> list[str]:
    """The users holding a session of this key (up to ``limit``; ``""`` is anonymous). A session
    belongs to one user, but the key alone does not make it unique: two users may name the same
    one, and each keeps their own."""
    users = ChatSession.objects.filter(key=session_key).order_by("user_id")
    return list(users.values_list("user_id", flat=True)[:limit])


def collection_by_name(name: str) -> Collection | None:
    return Collection.objects.filter(name=name).first()


def _count_per_collection(model: type[Document] | type[Chunk]) -> Coalesce:
    """A correlated count (one subquery per table, not a join of documents with chunks)."""
    rows = model.objects.filter(collection=OuterRef("pk")).order_by().values("collection")
    return Coalesce(Subquery(rows.annotate(n=Count("pk")).values("n")), 0)


def collections_with_counts() -> QuerySet[Collection]:
    return Collection.objects.annotate(
        document_count=_count_per_collection(Document), chunk_count=_count_per_collection(Chunk)
    ).order_by("name")


def collections_with_progress() -> QuerySet[Collection]:
    """Collections with their counts and their latest ingestion job's status and progress."""
    latest = IngestionJob.objects.filter(collection=OuterRef("pk")).order_by("-created_at", "-id")
    return collections_with_counts().annotate(
        **{
            f"latest_job_{field}": Subquery(latest.values(field)[:1])
            for field in ("id", "status", "processed", "total", "error")
        }
    )


def documents_page(*, collection: Collection, after: str | None, limit: int) -> list[Document]:
    documents = Document.objects.filter(collection=collection).order_by("external_id")
    if after:
        documents = documents.filter(external_id__gt=after)
    return list(documents[: limit + 1])


def collection_document(*, collection: Collection, external_id: str) -> Document | None:
    return Document.objects.filter(collection=collection, external_id=external_id).first()


def document_statuses(*, collection: Collection, external_ids: list[str]) -> dict[str, Document]:
    """The stored documents of ``external_ids``, by id (for the ingest answer's statuses)."""
    documents = Document.objects.filter(collection=collection, external_id__in=external_ids)
    return {document.external_id: document for document in documents}


def ingestion_job(job_id: str) -> IngestionJob | None:
    return IngestionJob.objects.select_related("collection").filter(pk=job_id).first()
