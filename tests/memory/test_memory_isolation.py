"""Memories never cross users or tenants: erase, scoped delete and search are filtered by user in
SQL (the mem0 #3928 bug, a scoped delete that wiped other users, must be impossible here)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_tenants.utils import schema_context

from memory.models import Memory
from memory.selectors import MemoryScopeError, search_memories
from memory.services import create_memory, delete_memory, erase_user
from sources.embedding import Embedder
from tests.conftest import ApiClient, TenantFixture

DIMENSIONS = 384


def axis(index: int) -> list[float]:
    vector = [0.0] * DIMENSIONS
    vector[index] = 1.0
    return vector


def blend(index: int, other: int, similarity: float) -> list[float]:
    """A unit vector whose cosine with ``axis(index)`` is ``similarity``."""
    vector = [0.0] * DIMENSIONS
    vector[index] = similarity
    vector[other] = math.sqrt(1.0 - similarity * similarity)
    return vector


class FakeEmbedder(Embedder):
    """Vectors chosen by the test, by text (others get the last axis)."""

    identity = "test:fake"
    dimensions = DIMENSIONS

    def __init__(self, vectors: dict[str, list[float]] | None = None):
        self.vectors = vectors or {}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vectors.get(text, axis(DIMENSIONS - 1)) for text in texts]


def remember(
    schema: str, user: str, content: str, vector: list[float] | None = None, **fields: Any
) -> int:
    with schema_context(schema):
        memory = create_memory(
            user_id=user,
            content=content,
            embedder=FakeEmbedder({content: vector or axis(0)}),
            **fields,
        )
    return memory.pk


def contents(schema: str, user: str) -> list[str]:
    with schema_context(schema):
        return sorted(Memory.objects.filter(user_id=user).values_list("content", flat=True))


def search(schema: str, user: str, **kwargs: Any) -> list[str]:
    with schema_context(schema):
        return [hit.content for hit in search_memories(user_id=user, **kwargs)]


@pytest.fixture
def three_users(acme: TenantFixture, globex: TenantFixture) -> dict[str, int]:
    return {
        "acme/u1/a": remember(acme.schema, "u1", "u1 likes tea"),
        "acme/u1/b": remember(acme.schema, "u1", "u1 lives in Lisbon"),
        "acme/u2": remember(acme.schema, "u2", "u2 likes coffee"),
        "globex/u1": remember(globex.schema, "u1", "globex u1 likes chess"),
    }


# --- erase -------------------------------------------------------------------------------------


def test_erase_is_one_delete_filtered_by_user_and_touches_nobody_else(
    acme: TenantFixture, globex: TenantFixture, three_users: dict[str, int]
) -> None:
    with schema_context(acme.schema), CaptureQueriesContext(connection) as captured:
        assert erase_user(user_id="u1") == 2
    # Besides the DELETE, only the read of which external indexes (Milvus, Qdrant) to erase the
    # user from too: never a read of the memories themselves.
    statements = [
        query["sql"]
        for query in captured.captured_queries
        if not query["sql"].startswith("SET search_path")
        and '"memory_externalindex"' not in query["sql"]
    ]
    deletes = [sql for sql in statements if sql.lstrip().upper().startswith("DELETE")]
    assert len(deletes) == 1, statements
    assert "WHERE \"user_id\" = 'u1'" in deletes[0], deletes[0]
    assert len(statements) == 1, statements  # no select-then-delete, nothing else
    assert contents(acme.schema, "u1") == []
    assert contents(acme.schema, "u2") == ["u2 likes coffee"]
    assert contents(globex.schema, "u1") == ["globex u1 likes chess"]


def test_erase_through_the_api_touches_nobody_else(
    acme_api: ApiClient, acme: TenantFixture, globex: TenantFixture, three_users: dict[str, int]
) -> None:
    response = acme_api.delete("/api/v1/users/u1/memories")
    assert response.status_code == 200
    assert response.json() == {"deleted": 2}
    assert acme_api.delete("/api/v1/users/u1/memories").json() == {"deleted": 0}
    assert contents(acme.schema, "u2") == ["u2 likes coffee"]
    assert contents(globex.schema, "u1") == ["globex u1 likes chess"]


@pytest.mark.parametrize("user", ["", "   ", None])
def test_erase_refuses_a_missing_user(
    acme: TenantFixture, three_users: dict[str, int], user: Any
) -> None:
    with schema_context(acme.schema):
        with pytest.raises(MemoryScopeError):
            erase_user(user_id=user)
        assert Memory.objects.count() == 3


def test_erase_refuses_the_public_schema(db: Any) -> None:
    connection.set_schema_to_public()
    with pytest.raises(RuntimeError, match="tenant schema"):
        erase_user(user_id="u1")


# --- scoped delete and reads of one memory ------------------------------------------------------


def test_a_scoped_delete_never_reaches_another_users_memory(
    acme: TenantFixture, three_users: dict[str, int]
) -> None:
    with schema_context(acme.schema), CaptureQueriesContext(connection) as captured:
        assert delete_memory(user_id="u1", memory_id=three_users["acme/u2"]) is False
    deletes = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("DELETE")]
    assert len(deletes) == 1 and "\"user_id\" = 'u1'" in deletes[0], deletes
    assert contents(acme.schema, "u2") == ["u2 likes coffee"]


def test_another_users_memory_id_answers_404_everywhere(
    acme_api: ApiClient, acme: TenantFixture, three_users: dict[str, int]
) -> None:
    path = f"/api/v1/users/u1/memories/{three_users['acme/u2']}"
    assert acme_api.get(path).status_code == 404
    assert acme_api.patch(path, {"content": "hijacked"}).status_code == 404
    response = acme_api.delete(path)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert contents(acme.schema, "u2") == ["u2 likes coffee"]


def test_another_tenants_memory_id_answers_404(
    globex_api: ApiClient, acme: TenantFixture, three_users: dict[str, int]
) -> None:
    path = f"/api/v1/users/u2/memories/{three_users['acme/u2']}"  # globex has no u2 at all
    assert globex_api.get(path).status_code == 404
    assert globex_api.delete(path).status_code == 404
    assert globex_api.get("/api/v1/users/u2/memories").json()["data"] == []
    assert contents(acme.schema, "u2") == ["u2 likes coffee"]


# --- search --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode",
    [
        {"hybrid": False},
        {"hybrid": True, "hybrid_mode": "weighted"},
        {"hybrid": True, "hybrid_mode": "rrf"},
    ],
)
def test_search_never_returns_another_users_memories_even_when_more_similar(
    acme: TenantFixture, globex: TenantFixture, mode: dict[str, Any]
) -> None:
    query = "peanut allergy"
    remember(acme.schema, "u2", "severe peanut allergy", axis(0))  # the perfect match
    remember(globex.schema, "u1", "peanut allergy too", axis(0))  # same user id, other tenant
    remember(acme.schema, "u1", "plays the cello", blend(0, 1, 0.3))
    found = search(
        acme.schema, "u1", query=query, vector=axis(0), limit=5, min_similarity=-1.0, **mode
    )
    assert found == ["plays the cello"]


def test_every_search_query_names_the_user(acme: TenantFixture) -> None:
    remember(acme.schema, "u1", "tea with lemon", axis(0))
    remember(acme.schema, "u2", "tea with milk", axis(0))
    with schema_context(acme.schema), CaptureQueriesContext(connection) as captured:
        for mode in ("weighted", "rrf"):
            search_memories(
                user_id="u1",
                query="tea",
                vector=axis(0),
                limit=5,
                min_similarity=0.0,
                hybrid=True,
                hybrid_mode=mode,
            )
        search_memories(user_id="u1", query="tea", vector=axis(0), limit=5, min_similarity=0.0)
    statements = [q["sql"] for q in captured.captured_queries if "memory_memory" in q["sql"]]
    assert statements
    for sql in statements:
        assert '"memory_memory"."user_id" = \'u1\'' in sql, sql


def test_search_through_the_api_is_user_and_tenant_scoped(
    acme_api: ApiClient, globex_api: ApiClient
) -> None:
    for api, user, content in [
        (acme_api, "u2", "I am allergic to peanuts"),
        (globex_api, "u1", "I am allergic to peanuts and shellfish"),
        (acme_api, "u1", "I play jazz piano on weekends"),
    ]:
        assert api.post(f"/api/v1/users/{user}/memories", {"content": content}).status_code == 201
    for body in (
        {"query": "allergic to peanuts"},
        {"query": "allergic to peanuts", "hybrid": True},
        {"query": "allergic to peanuts", "hybrid": True, "hybrid_mode": "rrf"},
    ):
        data = acme_api.post("/api/v1/users/u1/memories/search", body).json()["data"]
        assert [hit["content"] for hit in data] == ["I play jazz piano on weekends"]


def test_a_search_without_a_user_is_refused(acme: TenantFixture) -> None:
    with schema_context(acme.schema), pytest.raises(MemoryScopeError):
        search_memories(user_id="", query="x", vector=axis(0), limit=5, min_similarity=0.0)
