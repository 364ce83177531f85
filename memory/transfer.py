"""A user's memories imported from the lines the export writes (JSON Lines, or a JSON array of the
same objects).

The rules: the path's user wins over a line's ``user``; a line is skipped when the user already
holds a memory with the same content (at the line's id or under another id: importing a file
twice, into the same user or another, duplicates nothing); a line's id is kept where no memory of
the tenant holds it, otherwise the memory gets a new id (the id belongs to another memory, of
this user or of another). A line's kind, metadata, times and whether it was superseded are kept,
and ``superseded_by`` follows the ids as they were assigned. Every imported memory is embedded
(in batches) by the tenant's embedder.

The import is atomic (the caller's transaction): a malformed line refuses the whole body with
its line number, and nothing is half-written.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from contextplatform.core import text_limits
from contextplatform.core.errors import invalid_request
from memory.models import Memory
from memory.selectors import MAX_ID
from memory.services import MAX_STRENGTH, aware_datetime, content_problem
from memory.stores import get_store
from sources.embedding import Embedder

MAX_IMPORT_LINES = 10_000
EMBED_BATCH = 64


class ImportLine(BaseModel):
    """One memory as the export writes it; what the export adds beyond these is read past."""

    model_config = ConfigDict(extra="ignore")

    id: int | None = Field(default=None, ge=1, le=MAX_ID)
    content: str
    kind: Literal["fact", "preference", "event", "summary"] = "fact"
    metadata: dict[str, Any] = Field(default_factory=dict)
    source_request_id: str | None = Field(default=None, max_length=40)
    source_turn: str | None = Field(default=None, max_length=80)
    strength: float = Field(default=1.0, ge=0.0, le=MAX_STRENGTH)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    last_used_at: datetime | None = None
    expires_at: datetime | None = None
    observed_at: datetime | None = None
    superseded_at: datetime | None = None
    superseded_by: int | None = Field(default=None, ge=1, le=MAX_ID)

    @field_validator("content")
    @classmethod
    def content_text(cls, content: str) -> str:
        problem = content_problem(content)
        if problem:
            raise ValueError(problem)
        return content

    @field_validator(
        "created_at",
        "updated_at",
        "last_used_at",
        "expires_at",
        "observed_at",
        "superseded_at",
        mode="before",
    )
    @classmethod
    def aware(cls, value: Any) -> Any:
        return aware_datetime(value)


def raw_lines(body: bytes) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of a JSON Lines body, or of each element of a JSON array (its
    position then counts from 1). Blank lines are left out, but counted."""
    text = body.lstrip()
    if text.startswith(b"["):
        try:
            values = text_limits.loads(body)
        except text_limits.MalformedJson as error:
            raise invalid_request(f"body: not a JSON array: {error}", "body") from None
        yield from enumerate(values if isinstance(values, list) else [values], start=1)
        return
    for number, line in enumerate(body.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, text_limits.loads(line)
        except text_limits.MalformedJson as error:
            raise invalid_request(f"line {number}: not JSON: {error}", "line") from None


def parse_lines(body: bytes) -> list[tuple[int, ImportLine]]:
    lines: list[tuple[int, ImportLine]] = []
    for number, value in raw_lines(body):
        if len(lines) >= MAX_IMPORT_LINES:
            raise invalid_request(
                f"body: more than {MAX_IMPORT_LINES} memories; import them in parts", "body"
            )
        if not isinstance(value, dict):
            raise invalid_request(f"line {number}: expected a JSON object", "line")
        try:
            lines.append((number, ImportLine.model_validate(value)))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "line"
            raise invalid_request(f"line {number}: {where}: {first['msg']}", "line") from None
    if not lines:
        raise invalid_request("body: no memory to import (JSON Lines, one memory a line)", "body")
    return lines


@dataclass
class ImportResult:
    imported: int = 0
    skipped: int = 0
    # A line's id as written -> the id its memory has now (kept, new, or the one it duplicates).
    ids: dict[int, int] = field(default_factory=dict)


def import_memories(user_id: str, body: bytes, embedder: Embedder) -> ImportResult:
    """Import the body's memories into ``user_id``'s (see the module's rules). Call inside a
    transaction: a failure leaves nothing behind."""
    lines = parse_lines(body)
    result = ImportResult()
    # The user's memories with a content the body holds (only those: a user may have many).
    contents = {line.content for _, line in lines}
    held: dict[str, int] = dict(
        Memory.objects.filter(user_id=user_id, content__in=contents).values_list("content", "id")
    )
    fresh: list[tuple[int, ImportLine]] = []
    for number, line in lines:
        existing = held.get(line.content)
        if existing is not None:
            result.skipped += 1
            if line.id is not None:
                result.ids[line.id] = existing
            continue
        held[line.content] = -number  # a later line with the same content duplicates this one
        fresh.append((number, line))
    taken = set(
        Memory.objects.filter(pk__in=[line.id for _, line in fresh if line.id]).values_list(
            "id", flat=True
        )
    )
    # Lines keeping their id first: an id the sequence hands a line without one never takes the
    # id a later line keeps.
    fresh.sort(key=lambda pair: pair[1].id is None or pair[1].id in taken)
    written: list[tuple[ImportLine, Memory]] = []
    for start in range(0, len(fresh), EMBED_BATCH):
        batch = fresh[start : start + EMBED_BATCH]
        vectors = embedder.embed([line.content for _, line in batch])
        for (_, line), vector in zip(batch, vectors, strict=True):
            kept_id = line.id if line.id is not None and line.id not in taken else None
            memory = get_store().write(
                user_id=user_id,
                content=line.content,
                kind=line.kind,
                metadata=line.metadata,
                source_request_id=line.source_request_id or "",
                source_turn=line.source_turn or "",
                strength=line.strength,
                expires_at=line.expires_at,
                observed_at=line.observed_at,
                embedder=embedder,
                vector=vector,
                id=kept_id,
                created_at=line.created_at,
                updated_at=line.updated_at,
                last_used_at=line.last_used_at,
                superseded_at=line.superseded_at,
            )
            taken.add(memory.pk)
            if line.id is not None:
                result.ids[line.id] = memory.pk
            written.append((line, memory))
            result.imported += 1
    for line, memory in written:  # the replacement, by the id it has now
        if line.superseded_by is not None:
            by = result.ids.get(line.superseded_by, line.superseded_by)
            Memory.objects.filter(pk=memory.pk, user_id=user_id).update(superseded_by=by)
    return result
