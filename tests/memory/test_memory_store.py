"""The memory store's contract (memory.store.MemoryStore) on every store (``store``: PostgreSQL,
Milvus Lite, Qdrant's local mode): dense, lexical and hybrid
recall, as_of, newest, write, list, erase; hybrid finding what one retriever alone misses;
near-duplicates collapsed; one user's recall never reaching another's memories."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django_tenants.utils import schema_context

from memory import views as memory_views
from memory.models import Memory
from memory.store import MemoryStore
from memory.stores import get_store
from memory.stores.postgres import PostgresMemoryStore
from tests.conftest import ApiClient, TenantFixture
from tests.memory.test_memory_isolation import FakeEmbedder, axis, blend, remember


def test_the_default_store_is_postgres() -> None:
    store = get_store()
    assert isinstance(store, PostgresMemoryStore) and store.name == "postgres"


def test_dense_recall_is_by_cosine_above_the_threshold(
    acme: TenantFixture, store: MemoryStore
) -> None:
    remember(acme.schema, "u1", "near", blend(0, 1, 0.9))
    remember(acme.schema, "u1", "middle", blend(0, 2, 0.5))
    remember(acme.schema, "u1", "far", blend(0, 3, 0.1))
    with schema_context(acme.schema):
        hits = store.recall("u1", "anything", axis(0), 5, mode="dense", min_similarity=0.3)
    assert [h.content for h in hits] == ["near", "middle"]
    assert hits[0].score == pytest.approx(0.9, abs=1e-5)


def test_lexical_recall_matches_any_of_the_questions_words(
    acme: TenantFixture, store: MemoryStore
) -> None:
    remember(acme.schema, "u1", "we adopted a beagle puppy called Biscuit", axis(1))
    remember(acme.schema, "u1", "it rained all day", axis(2))
    with schema_context(acme.schema):
        # "name" appears in no memory: an AND of the words would match nothing.
        hits = store.recall("u1", "What is my puppy's name?", axis(0), 5, mode="lexical")
    assert [h.content for h in hits] == ["we adopted a beagle puppy called Biscuit"]
    assert hits[0].lexical and hits[0].lexical > 0 and hits[0].cosine == pytest.approx(0.0)


def test_hybrid_finds_what_dense_misses_and_what_the_text_misses(
    acme: TenantFixture, store: MemoryStore
) -> None:
    for i in range(12):  # all nearer the question than the text match, none mentions it
        remember(acme.schema, "u1", f"small talk number {i}", blend(0, 10 + i, 0.9 - i * 0.01))
    remember(acme.schema, "u1", "my oboe teacher is strict", blend(0, 40, 0.05))
    remember(acme.schema, "u1", "music lessons every Tuesday", blend(0, 41, 0.95))
    with schema_context(acme.schema):
        dense = store.recall("u1", "oboe", axis(0), 3, mode="dense", min_similarity=0.2)
        lexical = store.recall("u1", "oboe", axis(0), 3, mode="lexical")
        hybrid = store.recall("u1", "oboe", axis(0), 3, mode="hybrid", min_similarity=0.2)
    assert "my oboe teacher is strict" not in {h.content for h in dense}
    assert "music lessons every Tuesday" not in {h.content for h in lexical}
    found = {h.content for h in hybrid}
    # The text match is kept though its cosine is below the threshold; the nearest is kept too.
    assert {"my oboe teacher is strict", "music lessons every Tuesday"} <= found


def test_hybrid_drops_only_embedding_candidates_below_the_threshold(
    acme: TenantFixture, store: MemoryStore
) -> None:
    remember(acme.schema, "u1", "unrelated and far", blend(0, 1, 0.1))
    remember(acme.schema, "u1", "tea in the morning", blend(0, 2, 0.1))
    with schema_context(acme.schema):
        hits = store.recall("u1", "tea", axis(0), 5, mode="hybrid", min_similarity=0.2)
    assert [h.content for h in hits] == ["tea in the morning"]


def test_hybrid_collapses_near_duplicates(acme: TenantFixture, store: MemoryStore) -> None:
    remember(acme.schema, "u1", "I live in Porto.", blend(0, 1, 0.9))
    remember(acme.schema, "u1", "i live in porto", blend(0, 1, 0.9))  # the same text
    remember(acme.schema, "u1", "Moved to Porto last year", blend(0, 1, 0.89))  # cosine ~1.0
    remember(acme.schema, "u1", "my sister lives in Oslo", blend(0, 2, 0.5))
    with schema_context(acme.schema):
        hits = store.recall("u1", "where do I live", axis(0), 5, mode="hybrid")
    contents = [h.content for h in hits]
    assert len(contents) == 2 and "my sister lives in Oslo" in contents
    assert sum("orto" in c for c in contents) == 1


def test_the_classic_fusion_is_still_reachable(acme: TenantFixture, store: MemoryStore) -> None:
    remember(acme.schema, "u1", "green tea every morning", axis(0))
    remember(acme.schema, "u1", "tea ceremony in Kyoto", blend(0, 2, 0.2))
    with schema_context(acme.schema):
        hits = store.recall(
            "u1", "tea", axis(0), 5, mode="hybrid", min_similarity=0.5, fusion="rrf"
        )
    assert [h.content for h in hits] == ["green tea every morning"]


def test_as_of_sees_the_memories_as_they_were(acme: TenantFixture, store: MemoryStore) -> None:
    old = remember(acme.schema, "u1", "tea before", axis(0))
    new = remember(acme.schema, "u1", "tea after", axis(0))
    then = timezone.now() - timedelta(days=1)
    with schema_context(acme.schema):
        Memory.objects.filter(pk=old).update(created_at=then - timedelta(days=1))
        Memory.objects.filter(pk=new).update(created_at=timezone.now())
        for mode in ("dense", "lexical", "hybrid"):
            hits = store.recall("u1", "tea", axis(0), 5, mode=mode, as_of=then)  # type: ignore[arg-type]
            assert [h.content for h in hits] == ["tea before"], mode
        assert [h.content for h in store.newest("u1", 5, as_of=then)] == ["tea before"]
        assert [h.content for h in store.newest("u1", 5)] == ["tea after", "tea before"]


def test_write_list_and_erase(acme: TenantFixture, store: MemoryStore) -> None:
    with schema_context(acme.schema):
        for text in ("first", "second", "third"):
            store.write(user_id="u1", content=text, embedder=FakeEmbedder({text: axis(0)}))
        store.write(user_id="u2", content="other", embedder=FakeEmbedder({"other": axis(0)}))
        page = store.list("u1", limit=2)
        assert [m.content for m in page.items] == ["third", "second"]
        rest = store.list("u1", limit=2, cursor=page.next_cursor)
        assert [m.content for m in rest.items] == ["first"] and rest.next_cursor is None
        assert [m.content for m in store.list("u1", q="second").items] == ["second"]
        assert store.erase("u1") == 3
        assert store.list("u1").items == []
        assert [m.content for m in store.list("u2").items] == ["other"]


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
def test_recall_never_reaches_another_users_memories(
    acme: TenantFixture, globex: TenantFixture, store: MemoryStore, mode: str
) -> None:
    remember(acme.schema, "u1", "u1 drinks tea", axis(0))
    remember(acme.schema, "u2", "u2 drinks tea", axis(0))
    remember(globex.schema, "u1", "globex u1 drinks tea", axis(0))
    with schema_context(acme.schema):
        hits = store.recall("u1", "tea", axis(0), 10, mode=mode)  # type: ignore[arg-type]
    assert [h.content for h in hits] == ["u1 drinks tea"]


def test_the_search_api_defaults_to_hybrid_recall(
    acme_api: ApiClient, acme: TenantFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    remember(acme.schema, "u1", "my oboe teacher is strict", blend(0, 40, 0.05))
    remember(acme.schema, "u1", "nothing in common", blend(0, 41, 0.06))
    question = "what about the oboe"
    monkeypatch.setattr(memory_views, "get_embedder", lambda: FakeEmbedder({question: axis(0)}))

    def search(**fields: object) -> list[dict[str, object]]:
        body = {"query": question, "limit": 1, **fields}
        return acme_api.post("/api/v1/users/u1/memories/search", body).json()["data"]

    found = search()
    assert [d["content"] for d in found] == ["my oboe teacher is strict"]
    assert found[0]["lexical"] > 0  # type: ignore[operator]
    assert [d["content"] for d in search(hybrid=False)] == ["nothing in common"]
    # A threshold the client writes is a floor on every result's cosine, text matches included.
    assert search(min_similarity=0.5) == []


def test_a_prewarmed_pool_recalls_as_the_store_does_by_default(
    acme: TenantFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default memory source recalls hybrid; from a pre-warmed pool it ranks the embedding's
    side in process and asks the store for the text's, and recalls the same memories."""
    from asgiref.sync import async_to_sync

    from memory import source as memory_source
    from memory.prewarm import load_pool
    from memory.source import MemorySettings, MemorySource
    from sources.base import ContextRequest

    for i in range(8):
        remember(acme.schema, "u1", f"small talk number {i}", blend(0, 10 + i, 0.9 - i * 0.01))
    remember(acme.schema, "u1", "my oboe teacher is strict", blend(0, 40, 0.05))
    question = "how is the oboe going"
    monkeypatch.setattr(memory_source, "get_embedder", lambda: FakeEmbedder({question: axis(0)}))
    source = MemorySource(MemorySettings(type="memory", name="memories"))
    assert source.recall_mode == "hybrid"
    request = ContextRequest(
        request_id="r1", tenant=acme.schema, route="m", user="u1", session=None, query=question
    )
    with schema_context(acme.schema):
        pool = load_pool("u1")
        assert pool is not None
        pooled = async_to_sync(source.recall_from_pool)(request, pool)
        stored = async_to_sync(source.recall)(request)
    assert [h.document_id for h in pooled] == [h.document_id for h in stored]
    assert "my oboe teacher is strict" in {h.text for h in stored}
