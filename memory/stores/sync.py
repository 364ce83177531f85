"""The tenant's external memory indexes kept in step with its memories in PostgreSQL.

An index is recorded (``ExternalIndex``) the first time a route recalls through it, and filled
then with every memory of the tenant. From then on each change of memories reaches every index
of the tenant as the rows are written: a memory written or edited (``indexed``), deleted one by
one or by retention (``unindexed``), a user erased (``erased``). A change that cannot reach an
index (the server is down) does not fail the write: the index is marked stale and filled again
from PostgreSQL by its next recall. A write whose transaction rolls back after its index was
reached leaves a vector of a memory PostgreSQL does not hold: never recalled (every hit is read
back from PostgreSQL, the user's and live), and gone at the next fill.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models.signals import post_delete, pre_delete
from django.dispatch import receiver
from django.utils import timezone
from django_tenants.utils import schema_context

from contextplatform.core.config_cache import ProcessCache, drop_on_change
from memory.models import ExternalIndex, Memory
from memory.signals import memories_deleted, memories_written, user_erased
from memory.stores.engines import EngineIndex, IndexRef, IndexRow, seconds, tenant_target, words
from tenants.models import Tenant

logger = logging.getLogger("contextplatform.memory")
# Each tenant's indexes (id, backend, uri/url), read by every write of memories: kept per process,
# dropped everywhere when one is recorded or deleted.
INDEXES_CACHE = "memory_indexes"
INDEXES: ProcessCache[str, list[tuple[int, str, str]]] = ProcessCache(INDEXES_CACHE)
drop_on_change(INDEXES_CACHE, ExternalIndex)
FILL_BATCH = 500
ROW_FIELDS = ("id", "user_id", "embedding", "content", "created_at", "expires_at", "superseded_at")


def engine_index(ref: IndexRef, schema: str) -> EngineIndex:
    from memory.stores.milvus import MilvusMemoryIndex
    from memory.stores.qdrant import QdrantMemoryIndex

    target = tenant_target(ref, schema)
    if ref.backend == "milvus":
        return MilvusMemoryIndex(target)
    if ref.backend == "qdrant":
        return QdrantMemoryIndex(target)
    raise ValueError(f"no external memory index {ref.backend!r}")


def row_of(values: dict[str, Any]) -> IndexRow:
    return IndexRow(
        id=int(values["id"]),
        user_id=str(values["user_id"]),
        vector=[float(x) for x in values["embedding"]],
        words=words(str(values["content"])),
        created=seconds(values["created_at"]),
        expires=seconds(values["expires_at"]),
        superseded=seconds(values["superseded_at"]),
    )


def in_tenant() -> bool:
    return getattr(connection, "schema_name", "public") != "public"


def ready(ref: IndexRef) -> EngineIndex:
    """The index a recall reads, recorded and filled first if it is new or stale."""
    schema = connection.schema_name
    engine = engine_index(ref, schema)
    record, created = ExternalIndex.objects.get_or_create(backend=ref.backend, written=ref.written)
    if created or record.stale or record.synced_at is None:
        # Unmarked before the fill, so a change that fails meanwhile marks it again; a fill that
        # fails leaves no ``synced_at``: either way the next recall fills it again.
        ExternalIndex.objects.filter(pk=record.pk).update(stale=False, synced_at=None)
        fill(engine)
        ExternalIndex.objects.filter(pk=record.pk).update(synced_at=timezone.now())
    else:
        engine.ensure()
    return engine


def fill(engine: EngineIndex) -> None:
    """The index made anew with every memory of the tenant."""
    engine.reset()
    last = 0
    while True:
        batch = list(
            Memory.objects.filter(pk__gt=last).order_by("pk").values(*ROW_FIELDS)[:FILL_BATCH]
        )
        if not batch:
            return
        engine.upsert([row_of(values) for values in batch])
        last = int(batch[-1]["id"])


def each_index(change: str, apply: Callable[[EngineIndex], None]) -> None:
    """``apply`` on every index of the current tenant; one that fails is marked stale."""
    if not in_tenant():
        return
    schema = connection.schema_name
    for pk, backend, written in tenant_indexes():
        try:
            apply(engine_index(IndexRef(backend, written), schema))
        except Exception as error:
            logger.warning(
                "memory_index_stale",
                extra={"backend": backend, "change": change, "err": str(error)[:300]},
            )
            ExternalIndex.objects.filter(pk=pk).update(stale=True)


def tenant_indexes() -> list[tuple[int, str, str]]:
    return INDEXES.get(
        connection.schema_name,
        lambda: list(ExternalIndex.objects.values_list("pk", "backend", "written")),
    )


def has_indexes() -> bool:
    return in_tenant() and bool(tenant_indexes())


def indexed(ids: Iterable[int]) -> None:
    """These memories (new or changed) written to every index as PostgreSQL now holds them."""
    wanted = list(ids)
    if not wanted or not has_indexes():
        return
    rows = [row_of(v) for v in Memory.objects.filter(pk__in=wanted).values(*ROW_FIELDS)]
    each_index("write", lambda engine: engine.upsert(rows))


def unindexed(ids: Sequence[int]) -> None:
    """These memories' vectors deleted from every index."""
    if ids and has_indexes():
        each_index("delete", lambda engine: engine.delete(list(ids)))


def erased(user_id: str) -> None:
    """Every vector of the user deleted from every index."""
    if has_indexes():
        each_index("erase", lambda engine: engine.erase(user_id))


@receiver(memories_written, dispatch_uid="memory_index_written")
def on_written(sender: object, ids: Sequence[int], **_: object) -> None:
    indexed(ids)


@receiver(memories_deleted, dispatch_uid="memory_index_deleted")
def on_deleted(sender: object, ids: Sequence[int], **_: object) -> None:
    unindexed(ids)


@receiver(user_erased, dispatch_uid="memory_index_erased")
def on_erased(sender: object, user_id: str, **_: object) -> None:
    erased(user_id)


@receiver(post_delete, sender=Memory, dispatch_uid="memory_index_row_deleted")
def on_row_deleted(sender: object, instance: Memory, **_: object) -> None:
    """A memory deleted through the ORM (the admin), not through the services."""
    unindexed([instance.pk])


def drop_tenant_indexes(schema: str) -> int:
    """Every memory collection of the tenant dropped (the tenant is being deleted: its schema, and
    the memories in it, go with it); the count dropped."""
    dropped = 0
    try:
        with schema_context(schema), transaction.atomic():
            records = list(ExternalIndex.objects.values_list("backend", "written"))
    except DatabaseError:  # a schema never migrated holds no index
        return 0
    for backend, written in records:
        try:
            with schema_context(schema):
                engine_index(IndexRef(backend, written), schema).drop()
            dropped += 1
        except Exception as error:
            logger.warning(
                "memory_index_not_dropped",
                extra={"backend": backend, "schema": schema, "err": str(error)[:300]},
            )
    return dropped


@receiver(pre_delete, sender=Tenant, dispatch_uid="memory_index_tenant_deleted")
def on_tenant_deleted(sender: object, instance: Tenant, **_: object) -> None:
    drop_tenant_indexes(instance.schema_name)
