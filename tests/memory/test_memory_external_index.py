"""The external memory indexes (Milvus Lite, Qdrant's local mode) follow PostgreSQL, the memories'
system of record: filled when a route first recalls through one, then every write, edit, delete,
import, erase and retention of the tenant's memories reaches it; one collection per tenant; a
stale index is filled again, and a change that cannot reach one marks it stale; a store block
naming the wrong address is refused."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from django_tenants.utils import schema_context

from memory.models import ExternalIndex, Memory
from memory.services import supersede_memories
from memory.stores import get_store, sync
from memory.stores.engines import IndexRef
from memory.tasks import apply_retention_task
from sources.embedding import get_embedder
from tenants.models import Tenant
from tests.conftest import ApiClient, TenantFixture
from tests.memory.test_memory_api import add
from tests.memory.test_memory_isolation import axis, remember
from tests.memory.test_memory_transfer import export, import_
from tests.memory.test_retention import age


def recall(
    ref: IndexRef, schema: str, user: str, query: str, mode: str = "lexical", **options: Any
) -> list[str]:
    with schema_context(schema):
        vector = options.pop("vector", None) or get_embedder().embed_query(query)
        hits = get_store(ref).recall(user, query, vector, 10, mode=mode, **options)  # type: ignore[arg-type]
    return [hit.content for hit in hits]


def held(ref: IndexRef, schema: str, user: str) -> set[int]:
    """What the engine itself holds of the user (not what a recall returns)."""
    with schema_context(schema):
        return sync.engine_index(ref, schema).held(user)


def test_every_change_through_the_api_reaches_the_index(
    acme_api: ApiClient, acme: TenantFixture, external: IndexRef
) -> None:
    bees = add(acme_api, "u1", "I keep bees in the garden")
    assert recall(external, acme.schema, "u1", "bees") == ["I keep bees in the garden"]  # filled
    cello = add(acme_api, "u1", "I play the cello on Sundays")  # written after the fill
    assert held(external, acme.schema, "u1") == {bees["id"], cello["id"]}
    assert recall(external, acme.schema, "u1", "cello") == ["I play the cello on Sundays"]

    acme_api.patch(f"/api/v1/users/u1/memories/{bees['id']}", {"content": "I keep goats"})
    assert recall(external, acme.schema, "u1", "bees") == []
    assert recall(external, acme.schema, "u1", "goats") == ["I keep goats"]

    assert acme_api.delete(f"/api/v1/users/u1/memories/{cello['id']}").json() == {"deleted": 1}
    assert held(external, acme.schema, "u1") == {bees["id"]}
    assert recall(external, acme.schema, "u1", "cello") == []

    imported = import_(acme_api, "u2", export(acme_api, "u1"), "application/x-ndjson")
    assert imported.json()["imported"] == 1
    assert recall(external, acme.schema, "u2", "goats") == ["I keep goats"]

    assert acme_api.delete("/api/v1/users/u1/memories").json() == {"deleted": 1}
    assert held(external, acme.schema, "u1") == set()  # erased from the engine too
    assert len(held(external, acme.schema, "u2")) == 1


def test_retention_deletes_the_vectors_too(acme: TenantFixture, external: IndexRef) -> None:
    now = timezone.now()
    expired = remember(acme.schema, "u1", "expired tea", expires_at=now - timedelta(seconds=1))
    old = remember(acme.schema, "u1", "old tea")
    age(acme.schema, old, 400)
    weak = remember(acme.schema, "u1", "weak tea", strength=0.1)
    kept = remember(acme.schema, "u1", "kept tea", strength=2.0)
    # The expired one is not recalled, though the engine holds it until retention runs.
    assert set(recall(external, acme.schema, "u1", "tea")) == {"kept tea", "weak tea", "old tea"}
    assert held(external, acme.schema, "u1") == {expired, old, weak, kept}
    Tenant.objects.filter(pk=acme.tenant.pk).update(memory_max_per_user=1, memory_max_age_days=30)
    counts = apply_retention_task.delay().get()  # the daily task, each tenant in its schema
    assert counts[acme.schema] == {"expired": 1, "aged": 1, "pruned": 1}
    assert held(external, acme.schema, "u1") == {kept}


def test_superseded_and_as_of_are_read_from_the_index_as_postgresql_reads_them(
    acme: TenantFixture, external: IndexRef
) -> None:
    old = remember(acme.schema, "u1", "I live in Porto", axis(0))
    assert recall(external, acme.schema, "u1", "live", "dense", vector=axis(0)) == [
        "I live in Porto"
    ]
    before = timezone.now()
    new = remember(acme.schema, "u1", "I live in Lisbon", axis(0))
    with schema_context(acme.schema):
        supersede_memories(user_id="u1", memory_ids=[old], by=Memory.objects.get(pk=new))
    for mode in ("dense", "lexical", "hybrid"):
        assert recall(external, acme.schema, "u1", "live", mode, vector=axis(0)) == [
            "I live in Lisbon"
        ], mode
        assert recall(external, acme.schema, "u1", "live", mode, vector=axis(0), as_of=before) == [
            "I live in Porto"
        ], mode
    assert held(external, acme.schema, "u1") == {old, new}  # history: kept, never recalled


def test_an_extractor_update_reaches_the_index_with_the_old_wording_as_history(
    acme: TenantFixture, external: IndexRef
) -> None:
    """The write after a response revises a memory (a new one superseding the old): the index
    holds both, recalls the new one only, and the old one as of before."""
    from memory.extraction.types import MemoryDecision
    from memory.writing import TurnOrigin, apply_decision
    from tests.memory.test_memory_isolation import FakeEmbedder

    old = remember(acme.schema, "u1", "I keep bees", axis(0))
    assert recall(external, acme.schema, "u1", "bees", "dense", vector=axis(0)) == ["I keep bees"]
    before = timezone.now()
    update = MemoryDecision("update", "I keep bees and goats", None, old)
    with schema_context(acme.schema):
        new = apply_decision(
            TurnOrigin("u1", None), update, FakeEmbedder({update.content: axis(0)})
        )
    assert isinstance(new, Memory)
    for mode in ("dense", "lexical", "hybrid"):
        assert recall(external, acme.schema, "u1", "bees", mode, vector=axis(0)) == [
            "I keep bees and goats"
        ], mode
        assert recall(external, acme.schema, "u1", "bees", mode, vector=axis(0), as_of=before) == [
            "I keep bees"
        ], mode
    assert held(external, acme.schema, "u1") == {old, new.pk}


def test_each_tenant_has_a_collection_of_its_own(
    acme: TenantFixture, globex: TenantFixture, external: IndexRef
) -> None:
    mine = remember(acme.schema, "u1", "acme u1 drinks tea")
    remember(globex.schema, "u1", "globex u1 drinks tea")
    assert recall(external, acme.schema, "u1", "tea") == ["acme u1 drinks tea"]
    assert recall(external, globex.schema, "u1", "tea") == ["globex u1 drinks tea"]
    assert held(external, acme.schema, "u1") == {mine}
    with schema_context(acme.schema):
        acme_index = sync.engine_index(external, acme.schema).target
    with schema_context(globex.schema):
        globex_index = sync.engine_index(external, globex.schema).target
    assert acme_index.collection == "_memories__acme"
    assert globex_index.collection == "_memories__globex"
    assert acme_index.address != globex_index.address  # each tenant's own file or directory


def test_a_stale_index_is_filled_again_from_postgresql(
    acme: TenantFixture, external: IndexRef
) -> None:
    memory = remember(acme.schema, "u1", "my oboe teacher is strict")
    assert recall(external, acme.schema, "u1", "oboe") == ["my oboe teacher is strict"]
    with schema_context(acme.schema):
        sync.engine_index(external, acme.schema).delete([memory])  # a change that got lost
    assert recall(external, acme.schema, "u1", "oboe") == []
    with schema_context(acme.schema):
        ExternalIndex.objects.update(stale=True)  # what a failed change leaves
    assert recall(external, acme.schema, "u1", "oboe") == ["my oboe teacher is strict"]
    with schema_context(acme.schema):
        assert not ExternalIndex.objects.get().stale


@pytest.mark.parametrize(
    ("store", "field"),
    [
        ({"backend": "qdrant", "uri": "memories.db"}, "uri"),
        ({"backend": "postgres", "url": "memories"}, "url"),
        ({"backend": "milvus", "uri": "../memories.db"}, "Milvus Lite file"),
        ({"backend": "qdrant", "url": "/var/lib/memories"}, "local-mode directory"),
        ({"backend": "chroma"}, "backend"),
    ],
)
def test_a_store_block_naming_the_wrong_address_is_refused(
    acme_api: ApiClient, store: dict[str, Any], field: str
) -> None:
    route = {
        "name": "m",
        "context": {"sources": [{"type": "memory", "name": "memories", "store": store}]},
    }
    response = acme_api.post("/api/v1/routes", route)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["message"]


def test_a_user_id_quoting_the_filter_reaches_only_its_own_memories(
    acme: TenantFixture, external: IndexRef
) -> None:
    tricky = 'u1" or user_id != "'
    remember(acme.schema, tricky, "tricky drinks tea")
    remember(acme.schema, "u2", "u2 drinks tea")
    remember(acme.schema, "back\\slash", "backslash drinks tea")
    for mode in ("dense", "lexical", "hybrid"):
        assert recall(external, acme.schema, tricky, "tea", mode) == ["tricky drinks tea"], mode
    assert recall(external, acme.schema, "back\\slash", "tea") == ["backslash drinks tea"]
    assert len(held(external, acme.schema, tricky)) == 1


def test_a_change_that_cannot_reach_an_index_marks_it_stale_and_the_write_stands(
    acme: TenantFixture, external: IndexRef
) -> None:
    remember(acme.schema, "u1", "first tea")
    assert recall(external, acme.schema, "u1", "tea") == ["first tea"]
    with schema_context(acme.schema):
        # A server the tenant's outbound allow-list refuses (loopback): every change fails.
        ExternalIndex.objects.create(backend=external.backend, written="http://127.0.0.1:9")
    admin_deleted = remember(acme.schema, "u1", "second tea")
    with schema_context(acme.schema):
        stale = dict(ExternalIndex.objects.values_list("written", "stale"))
        assert stale == {external.written: False, "http://127.0.0.1:9": True}
        Memory.objects.filter(pk=admin_deleted).delete()  # the admin's delete, through the ORM
    assert recall(external, acme.schema, "u1", "tea") == ["first tea"]
    assert admin_deleted not in held(external, acme.schema, "u1")


def test_a_collection_of_another_embedders_size_is_made_anew(
    acme: TenantFixture, external: IndexRef
) -> None:
    """The platform changed its embedder: the tenant's collection holds vectors of another size,
    every change fails and marks the index stale, and the fill makes the collection anew."""
    from memory.stores import milvus, qdrant

    with schema_context(acme.schema):
        index = sync.engine_index(external, acme.schema)
    if external.backend == "milvus":
        from pymilvus import DataType

        client = index.client  # type: ignore[attr-defined]
        if client.has_collection(index.target.collection):
            client.drop_collection(index.target.collection)
        schema = client.create_schema(auto_id=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=8)
        params = client.prepare_index_params()
        params.add_index(field_name="vector", index_type="AUTOINDEX", metric_type="COSINE")
        client.create_collection(index.target.collection, schema=schema, index_params=params)
    else:
        from qdrant_client import models

        with index.client() as client:  # type: ignore[attr-defined]
            if client.collection_exists(index.target.collection):
                client.delete_collection(index.target.collection)
            client.create_collection(
                index.target.collection,
                vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE),
            )
    milvus.forget()
    qdrant.forget()
    remember(acme.schema, "u1", "my oboe teacher is strict")
    assert recall(external, acme.schema, "u1", "oboe") == ["my oboe teacher is strict"]


def test_a_deleted_tenants_collections_are_dropped(acme: TenantFixture, external: IndexRef) -> None:
    remember(acme.schema, "u1", "my oboe teacher is strict")
    assert recall(external, acme.schema, "u1", "oboe") == ["my oboe teacher is strict"]
    # What deleting the tenant runs first (its schema is dropped after, the memories with it).
    assert sync.drop_tenant_indexes(acme.schema) == 1
    with schema_context(acme.schema):
        index = sync.engine_index(external, acme.schema)
    if external.backend == "milvus":
        assert not index.client.has_collection(index.target.collection)  # type: ignore[attr-defined]
    else:
        with index.client() as client:  # type: ignore[attr-defined]
            assert not client.collection_exists(index.target.collection)
    assert sync.drop_tenant_indexes("no_such_schema") == 0
