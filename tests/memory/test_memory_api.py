"""A user's memories through the API (create, list, read, edit, delete, search, export, erase), the
hybrid search's threshold, the scopes, and the tenant admin."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_tenants.utils import schema_context

from memory import views as memory_views
from memory.models import Memory
from memory.selectors import search_memories
from sources.embedding import get_embedder
from tenants.services import issue_api_key
from tests.conftest import ApiClient, TenantFixture, admin_object_url
from tests.memory.test_memory_isolation import FakeEmbedder, axis, blend, remember

REPRESENTATION = {
    "id",
    "user",
    "content",
    "kind",
    "metadata",
    "source_request_id",
    "created_at",
    "updated_at",
    "last_used_at",
    "strength",
    "expires_at",
}


def add(api: ApiClient, user: str, content: str, **fields: Any) -> dict[str, Any]:
    response = api.post(f"/api/v1/users/{user}/memories", {"content": content, **fields})
    assert response.status_code == 201, response.content
    return response.json()


def stored_embedding(schema: str, memory_id: int) -> np.ndarray:
    with schema_context(schema):
        return np.asarray(Memory.objects.get(pk=memory_id).embedding)


# --- create, read, edit, delete -------------------------------------------------------------------


def test_create_read_edit_delete(acme_api: ApiClient, acme: TenantFixture) -> None:
    created = add(acme_api, "u1", "I am vegetarian", metadata={"source": "chat"}, kind="preference")
    assert set(created) >= REPRESENTATION
    assert created["user"] == "u1" and created["kind"] == "preference"
    assert created["metadata"] == {"source": "chat"} and created["strength"] == 1.0
    assert created["last_used_at"] is None and created["expires_at"] is None
    path = f"/api/v1/users/u1/memories/{created['id']}"
    assert acme_api.get(path).json() == created
    with schema_context(acme.schema):
        memory = Memory.objects.get(pk=created["id"])
        assert memory.embedder == get_embedder().identity and memory.search_vector is not None

    before = stored_embedding(acme.schema, created["id"])
    edited = acme_api.patch(path, {"content": "I am vegan since 2020"}).json()
    assert edited["content"] == "I am vegan since 2020" and edited["metadata"] == {"source": "chat"}
    assert edited["updated_at"] > created["updated_at"]
    after = stored_embedding(acme.schema, created["id"])
    assert not np.allclose(before, after)  # embedded again
    expected = np.asarray(get_embedder().embed_query("I am vegan since 2020"))
    assert float(np.dot(after, expected)) == pytest.approx(1.0, abs=1e-5)
    hits = acme_api.post("/api/v1/users/u1/memories/search", {"query": "vegan"}).json()["data"]
    assert hits[0]["id"] == created["id"]

    edited = acme_api.patch(
        path, {"metadata": {"checked": True}, "kind": "fact", "expires_at": "2999-01-01T00:00:00Z"}
    ).json()
    assert edited["metadata"] == {"checked": True} and edited["kind"] == "fact"
    assert edited["expires_at"].startswith("2999-01-01")
    assert np.allclose(stored_embedding(acme.schema, created["id"]), after)  # content unchanged
    assert acme_api.patch(path, {"expires_at": None}).json()["expires_at"] is None

    assert acme_api.delete(path).json() == {"deleted": 1}
    assert acme_api.get(path).status_code == 404
    assert acme_api.delete(path).status_code == 404


def test_bad_bodies_are_refused_with_the_envelope(acme_api: ApiClient) -> None:
    memory_id = add(acme_api, "u1", "likes tea")["id"]
    cases = [
        ("POST", "/api/v1/users/u1/memories", {}, "content"),
        ("POST", "/api/v1/users/u1/memories", {"content": "   "}, "content"),
        ("POST", "/api/v1/users/u1/memories", {"content": "x" * 10_001}, "content"),
        ("POST", "/api/v1/users/u1/memories", {"content": "x", "kind": "gossip"}, "kind"),
        ("POST", "/api/v1/users/u1/memories", {"content": "x", "metadata": []}, "metadata"),
        ("POST", "/api/v1/users/u1/memories", {"content": "x", "colour": 1}, "colour"),
        (
            "POST",
            "/api/v1/users/u1/memories",
            {"content": "x", "expires_at": "2030-01-01"},
            "expires_at",
        ),
        ("PATCH", f"/api/v1/users/u1/memories/{memory_id}", {}, None),
        ("PATCH", f"/api/v1/users/u1/memories/{memory_id}", {"content": None}, "content"),
        ("PATCH", f"/api/v1/users/u1/memories/{memory_id}", {"content": "y" * 10_001}, "content"),
        ("POST", "/api/v1/users/u1/memories/search", {}, "query"),
        ("POST", "/api/v1/users/u1/memories/search", {"query": "x", "limit": 0}, "limit"),
        ("POST", "/api/v1/users/u1/memories/search", {"query": "x", "limit": "5"}, "limit"),
        (
            "POST",
            "/api/v1/users/u1/memories/search",
            {"query": "x", "hybrid_mode": "rerank"},
            "hybrid_mode",
        ),
        ("POST", f"/api/v1/users/{'u' * 201}/memories", {"content": "x"}, "user"),
    ]
    for method, path, body, param in cases:
        response = acme_api.send(method, path, body)
        assert response.status_code == 400, (method, path, body, response.content)
        error = response.json()["error"]
        assert error["code"] == "invalid_request" and error["param"] == param, (body, error)
    assert (
        "limit is 10000"
        in acme_api.post("/api/v1/users/u1/memories", {"content": "x" * 10_001}).json()["error"][
            "message"
        ]
    )
    for params, param in [
        ({"limit": "x"}, "limit"),
        ({"limit": 0}, "limit"),
        ({"cursor": "nope"}, "cursor"),
    ]:
        response = acme_api.get("/api/v1/users/u1/memories", params)
        assert response.status_code == 400 and response.json()["error"]["param"] == param
    assert acme_api.get("/api/v1/users/u1/memories/abc").status_code == 404
    assert acme_api.get(f"/api/v1/users/u1/memories/{2**70}").status_code == 404
    assert acme_api.delete(f"/api/v1/users/u1/memories/{2**70}").status_code == 404


# --- listing ------------------------------------------------------------------------------------


def test_listing_is_newest_first_with_a_cursor_and_a_text_filter(acme_api: ApiClient) -> None:
    created = [
        add(acme_api, "u1", f"note {i} about {'cats' if i % 2 else 'dogs'}") for i in range(5)
    ]
    add(acme_api, "u2", "note about cats from someone else")
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = acme_api.get("/api/v1/users/u1/memories", params).json()
        assert len(page["data"]) <= 2
        seen += [m["id"] for m in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [m["id"] for m in reversed(created)]
    cats = acme_api.get("/api/v1/users/u1/memories", {"q": "cat"}).json()
    assert [m["content"] for m in cats["data"]] == ["note 3 about cats", "note 1 about cats"]
    assert cats["next_cursor"] is None


# --- search --------------------------------------------------------------------------------------


def test_search_returns_id_content_metadata_and_score_best_first(acme_api: ApiClient) -> None:
    add(acme_api, "u1", "My daughter is called Alice", metadata={"topic": "family"})
    add(acme_api, "u1", "I drive a red bicycle to work")
    add(acme_api, "u1", "I prefer window seats on flights")
    response = acme_api.post(
        "/api/v1/users/u1/memories/search", {"query": "What is my daughter's name?", "limit": 2}
    )
    assert response.status_code == 200
    data = response.json()["data"]
    assert len(data) == 2
    assert {"id", "content", "metadata", "score"} <= set(data[0])
    assert data[0]["content"] == "My daughter is called Alice"
    assert data[0]["metadata"] == {"topic": "family"}
    assert data[0]["score"] >= data[1]["score"]
    strict = acme_api.post(
        "/api/v1/users/u1/memories/search",
        {"query": "What is my daughter's name?", "min_similarity": 0.99},
    ).json()["data"]
    assert strict == []


def test_search_skips_expired_memories(acme: TenantFixture) -> None:
    past = timezone.now() - timezone.timedelta(minutes=1)
    remember(acme.schema, "u1", "old address", axis(0), expires_at=past)
    remember(acme.schema, "u1", "new address", blend(0, 1, 0.9))
    with schema_context(acme.schema):
        for hybrid in (False, True):
            hits = search_memories(
                user_id="u1",
                query="address",
                vector=axis(0),
                limit=5,
                min_similarity=0.0,
                hybrid=hybrid,
            )
            assert [h.content for h in hits] == ["new address"]


@pytest.mark.parametrize("mode", ["weighted", "rrf"])
def test_hybrid_modes_apply_the_cosine_threshold_to_lexical_hits(
    acme: TenantFixture, mode: str
) -> None:
    remember(acme.schema, "u1", "green tea every morning", axis(0))
    remember(acme.schema, "u1", "tea ceremony in Kyoto", blend(0, 2, 0.2))  # text match, far
    remember(acme.schema, "u1", "runs marathons", blend(0, 3, 0.8))
    with schema_context(acme.schema):

        def found(threshold: float) -> dict[str, Any]:
            hits = search_memories(
                user_id="u1",
                query="tea",
                vector=axis(0),
                limit=5,
                min_similarity=threshold,
                hybrid=True,
                hybrid_mode=mode,
            )
            return {h.content: h for h in hits}

        kept = found(0.5)
        assert set(kept) == {"green tea every morning", "runs marathons"}
        assert all(h.cosine >= 0.5 for h in kept.values())
        everything = found(-1.0)
        far = everything["tea ceremony in Kyoto"]
        assert far.cosine == pytest.approx(0.2, abs=1e-5) and far.lexical > 0
        assert everything["runs marathons"].lexical == 0.0
        embedding_only = search_memories(
            user_id="u1", query="tea", vector=axis(0), limit=5, min_similarity=0.5
        )
        assert {h.content for h in embedding_only} == set(kept)


def test_hybrid_adds_text_candidates_beyond_the_embedding_pool(acme: TenantFixture) -> None:
    for i in range(25):  # all closer than the text match, none mentions it
        remember(acme.schema, "u1", f"hiking trip number {i}", blend(0, 10 + i, 0.9 - i * 0.01))
    remember(acme.schema, "u1", "oolong tea from Taiwan", blend(0, 50, 0.55))
    with schema_context(acme.schema):

        def top(mode: str, threshold: float) -> list[Any]:
            return search_memories(
                user_id="u1",
                query="oolong",
                vector=axis(0),
                limit=1,
                min_similarity=threshold,
                hybrid=True,
                hybrid_mode=mode,
            )

        rrf = top("rrf", 0.5)  # in both rankings: beats the nearest, which is in one only
        assert [h.content for h in rrf] == ["oolong tea from Taiwan"]
        assert rrf[0].cosine == pytest.approx(0.55, abs=1e-5) and rrf[0].lexical > 0
        assert rrf[0].score == pytest.approx(1 / 61 + 1 / 81)  # ranks 1 and 21 of 21
        assert [h.content for h in top("rrf", 0.6)] == ["hiking trip number 0"]
        assert [h.content for h in top("weighted", 0.5)] == ["hiking trip number 0"]


def test_hybrid_search_reads_each_retriever_once(acme: TenantFixture) -> None:
    """Two statements: the embedding candidates (with their text rank) and the text candidates."""
    remember(acme.schema, "u1", "green tea every morning", axis(0))
    remember(acme.schema, "u1", "tea ceremony in Kyoto", blend(0, 2, 0.2))
    remember(acme.schema, "u1", "runs marathons", blend(0, 3, 0.8))  # near, no text match
    with schema_context(acme.schema), CaptureQueriesContext(connection) as captured:
        hits = search_memories(
            user_id="u1",
            query="tea",
            vector=axis(0),
            limit=5,
            min_similarity=-1.0,
            hybrid=True,
        )
    lexical = {h.content: h.lexical for h in hits}
    assert lexical["runs marathons"] == 0.0
    assert lexical["green tea every morning"] > 0 and lexical["tea ceremony in Kyoto"] > 0
    assert len([q for q in captured.captured_queries if "memory_memory" in q["sql"]]) == 2


# --- export and erase ----------------------------------------------------------------------------


def test_export_is_json_lines_of_exactly_that_users_memories(
    acme_api: ApiClient, globex_api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_views, "EXPORT_PAGE", 2)  # several pages
    mine = [add(acme_api, "u1", f"fact {i}: naïve café ☕", metadata={"i": i}) for i in range(5)]
    add(acme_api, "u2", "someone else's fact")
    add(globex_api, "u1", "the same user id in another tenant")
    response = acme_api.get("/api/v1/users/u1/memories/export")
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"].startswith("application/x-ndjson")
    body = b"".join(response.streaming_content).decode()
    assert body.endswith("\n")
    lines = [json.loads(line) for line in body.splitlines()]
    assert sorted(line["id"] for line in lines) == sorted(m["id"] for m in mine)
    assert all(line["user"] == "u1" and "embedding" not in line for line in lines)
    assert {line["content"] for line in lines} == {m["content"] for m in mine}
    assert set(lines[0]) >= REPRESENTATION
    asked = acme_api.get(
        "/api/v1/users/u1/memories/export", headers={"Accept": "application/x-ndjson"}
    )
    assert asked.status_code == 200
    assert len(b"".join(asked.streaming_content).splitlines()) == 5
    empty = acme_api.get("/api/v1/users/nobody/memories/export")
    assert b"".join(empty.streaming_content) == b""


def test_erase_deletes_every_memory_of_the_user(acme_api: ApiClient) -> None:
    for i in range(3):
        add(acme_api, "u1", f"fact {i}")
    add(acme_api, "u2", "kept")
    assert acme_api.delete("/api/v1/users/u1/memories").json() == {"deleted": 3}
    assert acme_api.get("/api/v1/users/u1/memories").json()["data"] == []
    assert [m["content"] for m in acme_api.get("/api/v1/users/u2/memories").json()["data"]] == [
        "kept"
    ]


# --- scopes ---------------------------------------------------------------------------------------


def test_scopes(acme: TenantFixture, acme_api: ApiClient, anonymous_api: ApiClient) -> None:
    memory_id = add(acme_api, "u1", "likes tea")["id"]
    one = f"/api/v1/users/u1/memories/{memory_id}"
    reader = ApiClient(issue_api_key(tenant=acme.tenant, scopes="memory.read").plain_key)
    assert reader.get("/api/v1/users/u1/memories").status_code == 200
    assert reader.get(one).status_code == 200
    assert reader.post("/api/v1/users/u1/memories/search", {"query": "tea"}).status_code == 200
    assert reader.get("/api/v1/users/u1/memories/export").status_code == 200
    for response in (
        reader.post("/api/v1/users/u1/memories", {"content": "x"}),
        reader.patch(one, {"content": "x"}),
        reader.delete(one),
        reader.delete("/api/v1/users/u1/memories"),
    ):
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "forbidden"
    writer = ApiClient(issue_api_key(tenant=acme.tenant, scopes="memory.write").plain_key)
    assert writer.get("/api/v1/users/u1/memories").status_code == 403
    assert writer.get("/api/v1/users/u1/memories/export").status_code == 403
    assert writer.post("/api/v1/users/u1/memories/search", {"query": "tea"}).status_code == 403
    assert writer.patch(one, {"metadata": {"a": 1}}).status_code == 200
    other = ApiClient(issue_api_key(tenant=acme.tenant, scopes="resolve").plain_key)
    assert other.get("/api/v1/users/u1/memories").status_code == 403
    assert anonymous_api.get("/api/v1/users/u1/memories").status_code == 401
    assert acme_api.get(one).json()["content"] == "likes tea"


# --- the tenant admin -----------------------------------------------------------------------------


def test_admin_lists_searches_and_edits_with_a_new_embedding(
    acme: TenantFixture, acme_api: ApiClient
) -> None:
    memory = add(acme_api, "u1", "I live in Porto", metadata={"a": 1})
    add(acme_api, "u2", "I live in Oslo")
    with schema_context(acme.schema):
        get_user_model().objects.create_superuser(
            username="mem_op", email="", password="pw-12345678"
        )
    connection.set_schema_to_public()
    client = Client()
    login = client.post(
        "/admin/login/?next=/admin/",
        {"username": "mem_op", "password": "pw-12345678", "next": "/admin/"},
        HTTP_HOST="acme.localhost",
    )
    assert login.status_code == 302
    listing = client.get("/admin/memory/memory/?q=Porto", HTTP_HOST="acme.localhost")
    assert listing.status_code == 200
    page = listing.content.decode()
    assert "I live in Porto" in page and "I live in Oslo" not in page
    assert (
        client.get("/admin/memory/memory/?kind__exact=fact", HTTP_HOST="acme.localhost").status_code
        == 200
    )
    before = stored_embedding(acme.schema, memory["id"])
    change = admin_object_url(Memory, memory["id"])
    saved = client.post(
        change,
        {
            "kind": "fact",
            "content": "I moved to Lisbon",
            "metadata": '{"a": 2}',
            "expires_at_0": "",
            "expires_at_1": "",
        },
        HTTP_HOST="acme.localhost",
    )
    assert saved.status_code == 302, saved.content.decode()[:2000]
    edited = acme_api.get(f"/api/v1/users/u1/memories/{memory['id']}").json()
    assert edited["content"] == "I moved to Lisbon" and edited["metadata"] == {"a": 2}
    after = stored_embedding(acme.schema, memory["id"])
    assert not np.allclose(before, after)
    too_long = client.post(
        change,
        {
            "kind": "fact",
            "content": "x" * 10_001,
            "metadata": "{}",
            "expires_at_0": "",
            "expires_at_1": "",
        },
        HTTP_HOST="acme.localhost",
    )
    assert too_long.status_code == 200 and "limit is 10000" in too_long.content.decode()


def test_an_embedder_failure_is_an_upstream_error_and_stores_nothing(
    acme_api: ApiClient, acme: TenantFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sources.embedding import EmbeddingError

    class Down(FakeEmbedder):
        def embed(self, texts: Any) -> list[list[float]]:
            raise EmbeddingError("embedding service remote:x@down answered HTTP 503")

    memory_id = add(acme_api, "u1", "kept as it was")["id"]
    monkeypatch.setattr(memory_views, "get_embedder", lambda: Down())
    for response in (
        acme_api.post("/api/v1/users/u1/memories", {"content": "new"}),
        acme_api.patch(f"/api/v1/users/u1/memories/{memory_id}", {"content": "changed"}),
        acme_api.post("/api/v1/users/u1/memories/search", {"query": "kept"}),
    ):
        assert response.status_code == 502
        assert response.json()["error"]["code"] == "upstream_error"
    with schema_context(acme.schema):
        assert list(Memory.objects.values_list("content", flat=True)) == ["kept as it was"]
