"""HTTP endpoints of a user's memories: list, create, read, edit, delete, search, erase, export.

The user is in the path; every read and write below is scoped by it in SQL, so another user's
memory id answers 404 exactly like a missing one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from django.utils import timezone
from django_tenants.utils import schema_context
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator
from rest_framework import status
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.errors import ApiError, invalid_request, not_found
from contextplatform.core.views import ApiView
from memory.extraction.types import ExtractionError
from memory.models import Memory
from memory.selectors import InvalidCursor, MemoryHit, memory_for_user
from memory.services import (
    MAX_CONTENT_CHARS,
    UNSET,
    aware_datetime,
    content_problem,
    delete_memory,
    update_memory,
)
from memory.stores import get_store
from memory.transfer import import_memories
from memory.writing import write_conversation
from sources.embedding import EmbeddingError, get_embedder

Kind = Literal["fact", "preference", "event", "summary"]
MAX_USER_CHARS = 200
MAX_LIST_LIMIT = 500
MAX_SEARCH_LIMIT = 100
EXPORT_PAGE = 500


def check_text(content: str) -> str:
    problem = content_problem(content)
    if problem:
        raise ValueError(problem)
    return content


class MemoryBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    kind: Kind = "fact"
    expires_at: datetime | None = None
    observed_at: datetime | None = None  # when the user said it

    @field_validator("content")
    @classmethod
    def content_text(cls, content: str) -> str:
        return check_text(content)

    @field_validator("expires_at", "observed_at", mode="before")
    @classmethod
    def expiry(cls, value: Any) -> Any:
        return aware_datetime(value)


MAX_MESSAGES = 200
MAX_MESSAGE_CHARS = 50_000
MAX_PARTS = 100
Role = Literal["user", "assistant", "system", "tool"]


class ContentPart(BaseModel):
    """One part of a message's content, in OpenAI's or Anthropic's shape: its text is read from a
    ``text`` part; other parts (images, tool calls, tool results) carry nothing to remember."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(min_length=1, max_length=64)
    text: str | None = Field(default=None, max_length=MAX_MESSAGE_CHARS)


class ConversationMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_call_id, tool_calls: read past

    role: Role
    content: str | list[ContentPart] | None = None
    timestamp: datetime | None = None  # when it was said; the latest given dates the memories

    @field_validator("content")
    @classmethod
    def content_size(cls, content: Any) -> Any:
        if isinstance(content, str) and len(content) > MAX_MESSAGE_CHARS:
            raise ValueError(f"has {len(content)} characters; the limit is {MAX_MESSAGE_CHARS}")
        if isinstance(content, list) and len(content) > MAX_PARTS:
            raise ValueError(f"has {len(content)} parts; the limit is {MAX_PARTS}")
        return content

    @field_validator("timestamp", mode="before")
    @classmethod
    def said_at(cls, value: Any) -> Any:
        return aware_datetime(value)

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        parts = self.content or []
        return "\n".join(part.text for part in parts if part.type == "text" and part.text)


class ConversationBody(BaseModel):
    """A conversation the extractor turns into memories, as after a turn. ``extractor``: ``local``
    (the rule-based extractor: no model call) or the name of a deployment for the LLM extractor;
    unset, the tenant's default (``MemoryListView.default_extractor``), since no route is
    involved in this call."""

    model_config = ConfigDict(extra="forbid")

    messages: list[ConversationMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    extractor: str | None = Field(default=None, min_length=1, max_length=100)

    def said(self, role: str) -> str:
        return "\n".join(text for m in self.messages if m.role == role and (text := m.text()))

    def observed_at(self) -> datetime:
        stamps = [m.timestamp for m in self.messages if m.timestamp is not None]
        return max(stamps) if stamps else timezone.now()


class MemoryPatchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str | None = None
    metadata: dict[str, Any] | None = None
    kind: Kind | None = None
    expires_at: datetime | None = None
    observed_at: datetime | None = None

    @field_validator("content")
    @classmethod
    def content_text(cls, content: str | None) -> str | None:
        return None if content is None else check_text(content)

    @field_validator("expires_at", "observed_at", mode="before")
    @classmethod
    def expiry(cls, value: Any) -> Any:
        return aware_datetime(value)


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    limit: int = Field(default=5, ge=1, le=MAX_SEARCH_LIMIT)
    min_similarity: float | None = Field(default=None, ge=-1.0, le=1.0)
    # Unset: the store's hybrid recall (embedding and any-word text fused by rank); false: by
    # embedding only; true: the classic fusion of ``hybrid_mode`` over the embedding pool.
    hybrid: bool | None = None
    hybrid_mode: Literal["weighted", "rrf"] = "weighted"

    @field_validator("query")
    @classmethod
    def query_text(cls, query: str) -> str:
        if not query.strip():
            raise ValueError("must contain text")
        return query


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


# What a memory's representation adds to what it writes; a write ignores them (core/read_back.py),
# so a memory read from one user posts to another as it is.
READ_ONLY = frozenset(
    {
        "id",
        "user",
        "source_request_id",
        "source_turn",
        "created_at",
        "updated_at",
        "last_used_at",
        "strength",
        "superseded_at",
        "superseded_by",
    }
)


def memory_representation(memory: Memory) -> dict[str, Any]:
    return {
        "id": memory.pk,
        "user": memory.user_id,
        "content": memory.content,
        "kind": memory.kind,
        "metadata": memory.metadata,
        "source_request_id": memory.source_request_id or None,
        "source_turn": memory.source_turn or None,
        "created_at": iso(memory.created_at),
        "updated_at": iso(memory.updated_at),
        "last_used_at": iso(memory.last_used_at),
        "strength": memory.strength,
        "expires_at": iso(memory.expires_at),
        "observed_at": iso(memory.observed_at),
        "superseded_at": iso(memory.superseded_at),
        "superseded_by": memory.superseded_by,
    }


@contextmanager
def embedding_errors() -> Iterator[None]:
    """The embedder failing (remote deployment down, local model missing) is the upstream's
    error, reported in the envelope."""
    try:
        yield
    except EmbeddingError as error:
        raise ApiError("upstream_error", f"embedding failed: {error}", status=502) from None


def named_deployment_missing(name: str) -> bool:
    from contextplatform.core.llm import LLMError
    from contextplatform.deployments.llm import named_deployment

    try:
        return named_deployment(name) is None
    except LLMError:
        return False


def checked_user(user: str) -> str:
    if not user.strip() or len(user) > MAX_USER_CHARS:
        raise invalid_request(f"user: must be 1 to {MAX_USER_CHARS} characters", "user")
    return user


def existing_memory(user: str, memory_id: int) -> Memory:
    memory = memory_for_user(checked_user(user), memory_id)
    if memory is None:
        raise not_found(f"user {user!r} has no memory {memory_id}", "id")
    return memory


def local_extractor() -> str:
    return "local"


class MemoryCreateBody(RootModel[MemoryBody | ConversationBody]):
    """What ``POST .../memories`` takes, as the schema shows it: one memory, or a conversation."""


class MemoryListView(ApiView):
    required_scopes = {"GET": "memory.read", "POST": "memory.write", "DELETE": "memory.write"}
    # The extractor of a conversation that names none: given by the URL configuration (the
    # tenant's defaults live in the routes app, above this one); the local one otherwise.
    default_extractor: Callable[[], str] = staticmethod(local_extractor)

    @extend_schema(
        parameters=[
            OpenApiParameter("q", str, required=False),
            OpenApiParameter("limit", int, required=False),
            OpenApiParameter("cursor", str, required=False),
        ],
        responses={200: dict},
        summary="A user's memories, newest first",
        operation_id="memories_list",
    )
    def get(self, request: Request, user: str) -> Response:
        limit = self.query_int(request, "limit", default=50, high=MAX_LIST_LIMIT)
        try:
            page = get_store().list(
                checked_user(user),
                q=request.query_params.get("q") or None,
                limit=limit,
                cursor=request.query_params.get("cursor") or None,
            )
        except InvalidCursor as error:
            raise invalid_request(f"cursor: {error}", "cursor") from None
        return Response(
            {
                "data": [memory_representation(m) for m in page.items],
                "next_cursor": page.next_cursor,
            }
        )

    @extend_schema(
        request=MemoryCreateBody,
        responses={201: dict},
        summary="Add a memory, or the memories a conversation holds",
        operation_id="memories_create",
    )
    def post(self, request: Request, user: str) -> Response:
        data = request.data
        if isinstance(data, dict) and "messages" in data:
            if "content" in data:
                raise invalid_request("give exactly one of content or messages", "messages")
            body = self.body(request, ConversationBody)
            extractor = body.extractor or self.default_extractor()
            return self.from_conversation(checked_user(user), body, extractor)
        if isinstance(data, dict) and "content" not in data:
            raise invalid_request(
                "content: give content (one memory) or messages (a conversation)", "content"
            )
        body = self.body(request, MemoryBody, READ_ONLY)
        with embedding_errors():
            memory = get_store().write(
                user_id=checked_user(user),
                content=body.content,
                kind=body.kind,
                metadata=body.metadata,
                expires_at=body.expires_at,
                observed_at=body.observed_at,
                embedder=get_embedder(),
            )
        return Response(memory_representation(memory), status=status.HTTP_201_CREATED)

    @staticmethod
    def from_conversation(user_id: str, body: ConversationBody, extractor: str) -> Response:
        """The conversation written as a handed-back turn is: 201 with the memories added or
        updated, or 200 with none and the reason."""
        if not body.said("user").strip():
            raise invalid_request("messages: no user message with text to remember", "messages")
        with embedding_errors():
            try:
                result = write_conversation(
                    user_id=user_id,
                    user_text=body.said("user"),
                    assistant_text=body.said("assistant"),
                    extractor=extractor,
                    observed_at=body.observed_at(),
                    embedder=get_embedder(),
                )
            except ExtractionError as error:
                if extractor != "local" and named_deployment_missing(extractor):
                    raise invalid_request(str(error), "extractor") from None
                raise ApiError("upstream_error", f"extraction failed: {error}", 502) from None
        answer = {
            "data": [memory_representation(m) for m in result.memories],
            "added": result.counts["add"],
            "updated": result.counts["update"],
            "deleted": result.counts["delete"],
            "reason": result.reason,
        }
        written = any(result.counts.values())
        return Response(answer, status=status.HTTP_201_CREATED if written else status.HTTP_200_OK)

    @extend_schema(
        responses={200: dict},
        summary="Erase every memory of one user (nobody else)",
        operation_id="memories_erase",
    )
    def delete(self, request: Request, user: str) -> Response:
        return Response({"deleted": get_store().erase(checked_user(user))})


class MemoryDetailView(ApiView):
    required_scopes = {"GET": "memory.read", "PATCH": "memory.write", "DELETE": "memory.write"}

    @extend_schema(responses={200: dict}, summary="One memory", operation_id="memory_retrieve")
    def get(self, request: Request, user: str, memory_id: int) -> Response:
        return Response(memory_representation(existing_memory(user, memory_id)))

    @extend_schema(
        request=MemoryPatchBody,
        responses={200: dict},
        summary="Edit a memory",
        operation_id="memory_update",
    )
    def patch(self, request: Request, user: str, memory_id: int) -> Response:
        body = self.body(request, MemoryPatchBody, READ_ONLY)
        if not body.model_fields_set:
            raise invalid_request(
                "give at least one of content, metadata, kind, expires_at, observed_at"
            )
        for name in ("content", "metadata", "kind"):
            if name in body.model_fields_set and getattr(body, name) is None:
                raise invalid_request(f"{name}: may not be null", name)
        memory = existing_memory(user, memory_id)
        with embedding_errors():
            memory = update_memory(
                memory=memory,
                content=body.content,
                metadata=body.metadata,
                kind=body.kind,
                expires_at=body.expires_at if "expires_at" in body.model_fields_set else UNSET,
                observed_at=body.observed_at if "observed_at" in body.model_fields_set else UNSET,
                embedder=get_embedder(),
            )
        return Response(memory_representation(memory))

    @extend_schema(responses={200: dict}, summary="Delete a memory", operation_id="memory_delete")
    def delete(self, request: Request, user: str, memory_id: int) -> Response:
        if not delete_memory(user_id=checked_user(user), memory_id=memory_id):
            raise not_found(f"user {user!r} has no memory {memory_id}", "id")
        return Response({"deleted": 1})


def search(user_id: str, body: SearchBody, vector: list[float]) -> list[MemoryHit]:
    threshold = -1.0 if body.min_similarity is None else body.min_similarity
    if body.hybrid is not None:
        return get_store().recall(
            user_id,
            body.query,
            vector,
            body.limit,
            mode="hybrid" if body.hybrid else "dense",
            min_similarity=threshold,
            fusion=body.hybrid_mode if body.hybrid else None,
        )
    hits = get_store().recall(
        user_id, body.query, vector, body.limit, mode="hybrid", min_similarity=threshold
    )
    # A threshold the client writes is a floor on every result's cosine, text matches included:
    # that is what ``min_similarity`` has always meant on this endpoint.
    return [hit for hit in hits if (hit.cosine or 0.0) >= threshold]


class MemorySearchView(ApiView):
    required_scopes = {"POST": "memory.read"}

    @extend_schema(
        request=SearchBody,
        responses={200: dict},
        summary="Search a user's memories",
        operation_id="memories_search",
    )
    def post(self, request: Request, user: str) -> Response:
        body = self.body(request, SearchBody)
        with embedding_errors():
            vector = get_embedder().embed_query(body.query)
        hits = search(checked_user(user), body, vector)
        return Response(
            {
                "data": [
                    {
                        "id": hit.id,
                        "content": hit.content,
                        "kind": hit.kind,
                        "metadata": hit.metadata,
                        "score": hit.score,
                        "similarity": hit.cosine,
                        "lexical": hit.lexical,
                        "created_at": iso(hit.created_at),
                        "updated_at": iso(hit.updated_at),
                        "last_used_at": iso(hit.last_used_at),
                        "strength": hit.strength,
                        "observed_at": iso(hit.observed_at),
                    }
                    for hit in hits
                ]
            }
        )


class NDJSONRenderer(BaseRenderer):
    """JSON Lines; an error envelope negotiated to it is one line of JSON."""

    media_type = "application/x-ndjson"
    format = "jsonl"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> bytes:
        return (json.dumps(data, ensure_ascii=False) + "\n").encode()


def export_page(schema: str, user_id: str, cursor: str | None) -> tuple[bytes, str | None]:
    """One page of the export, read inside the tenant's schema (a streamed body is consumed after
    the view), and the cursor of the next page (None after the last)."""
    with schema_context(schema):
        page = get_store().list(user_id, limit=EXPORT_PAGE, cursor=cursor)
    lines = (
        json.dumps(memory_representation(memory), ensure_ascii=False) + "\n"
        for memory in page.items
    )
    return "".join(lines).encode(), page.next_cursor


def export_lines(schema: str, user_id: str) -> Iterator[bytes]:
    """One JSON object per memory, page by page (served under WSGI)."""
    cursor: str | None = None
    while True:
        chunk, cursor = export_page(schema, user_id, cursor)
        if chunk:
            yield chunk
        if cursor is None:
            return


async def export_lines_async(schema: str, user_id: str) -> AsyncIterator[bytes]:
    """The same pages under ASGI, where Django would otherwise read a synchronous iterator to its
    end into memory (and warn): each page is read on the request's thread, where its database
    connection is, and sent before the next is read."""
    read = sync_to_async(export_page)
    cursor: str | None = None
    while True:
        chunk, cursor = await read(schema, user_id, cursor)
        if chunk:
            yield chunk
        if cursor is None:
            return


class MemoryExportView(ApiView):
    required_scopes = {"GET": "memory.read"}
    renderer_classes = [JSONRenderer, NDJSONRenderer]

    @extend_schema(
        # JSON Lines only (one memory representation a line); errors are the JSON envelope.
        responses={(200, "application/x-ndjson"): OpenApiTypes.STR},
        summary="All of one user's memories as JSON Lines",
        operation_id="memories_export",
    )
    def get(self, request: Request, user: str) -> StreamingHttpResponse:
        user_id = checked_user(user)
        schema = self.tenant(request).schema_name
        served_async = isinstance(request._request, ASGIRequest)
        lines = (export_lines_async if served_async else export_lines)(schema, user_id)
        response = StreamingHttpResponse(lines, content_type="application/x-ndjson; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="memories.jsonl"'
        response["Cache-Control"] = "no-store"
        return response


class RawBodyParser(BaseParser):
    """The body as bytes, whatever its type: JSON Lines (``application/x-ndjson``,
    ``application/jsonl``, ``text/plain``) or a JSON array; ``memory.transfer`` reads it."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return stream.read() if stream is not None else b""


class MemoryImportView(ApiView):
    required_scopes = {"POST": "memory.write"}
    parser_classes = [RawBodyParser]

    @extend_schema(
        # JSON Lines is also taken as application/x-ndjson or application/jsonl (the parser reads
        # any type); the schema names the types its checkers can generate.
        request={
            "text/plain": OpenApiTypes.STR,
            "application/json": {"type": "array", "items": {"type": "object"}},
        },
        responses={200: dict},
        summary="Import a user's memories from the lines the export writes",
        operation_id="memories_import",
    )
    def post(self, request: Request, user: str) -> Response:
        user_id = checked_user(user)
        body = request.data if isinstance(request.data, bytes) else b""
        with embedding_errors():
            result = import_memories(user_id, body, get_embedder())
        return Response({"imported": result.imported, "skipped": result.skipped, "errors": []})
