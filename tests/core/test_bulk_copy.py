"""``copy_instances`` writes what ``bulk_create`` would: every field as its model prepares it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone
from django_tenants.utils import schema_context

from contextplatform.core.bulk_copy import copy_instances
from contextplatform.replay.models import ReplayRecord
from sources.models import EMBEDDING_DIMENSIONS, Chunk, Collection, Document
from tests.conftest import TenantFixture

FIELDS = [f.name for f in ReplayRecord._meta.concrete_fields]


def record(record_id: str, **values: Any) -> ReplayRecord:
    fields: dict[str, Any] = {
        "id": record_id,
        "route": "support",
        "user_id": "u_1",
        "status": "ok",
        "format": "openai",
        "created_at": datetime(2026, 12, 2, 12, 0, tzinfo=UTC),
        "duration_ms": 3.25,
        "sources": [{"name": "docs", "status": "ok", "items": 2}],
        "items": [{"text": 'quotes " and \\ backslashes,\ttabs\nand lines', "tokens": 7}],
        "budget": {"context": 1000},
        "tokens": {"used": 12},
        "request_body": {"messages": [{"role": "user", "content": "naïve café 東京"}]},
    }
    fields.update(values)
    return ReplayRecord(**fields)


def stored(record_id: str) -> dict[str, Any]:
    return ReplayRecord.objects.filter(id=record_id).values(*FIELDS).get()


def test_copied_rows_read_back_as_bulk_created_ones(acme: TenantFixture) -> None:
    with schema_context(acme.schema):
        ReplayRecord.objects.bulk_create([record("rsv_orm", error=None)])
        written = copy_instances(ReplayRecord, [record("rsv_copy", error=None)])
        assert written == 1
        by_orm, by_copy = stored("rsv_orm"), stored("rsv_copy")
    assert {**by_copy, "id": "rsv_orm"} == by_orm


def test_many_rows_in_one_statement_and_nothing_on_conflict(acme: TenantFixture) -> None:
    with schema_context(acme.schema):
        assert copy_instances(ReplayRecord, [record(f"rsv_{n}") for n in range(50)]) == 50
        assert ReplayRecord.objects.filter(id__startswith="rsv_").count() == 50
        # One statement: a conflict fails it whole (the replay writer then writes one by one).
        with pytest.raises(IntegrityError), transaction.atomic():
            copy_instances(ReplayRecord, [record("rsv_new"), record("rsv_3")])
        assert not ReplayRecord.objects.filter(id="rsv_new").exists()


def test_an_auto_key_comes_from_its_sequence_and_auto_now_add_is_filled(
    acme: TenantFixture,
) -> None:
    with schema_context(acme.schema):
        collection = Collection.objects.create(name="kb")
        document = Document.objects.create(collection=collection, external_id="d1", text="x")
        before = timezone.now()
        chunks = [
            Chunk(
                collection=collection,
                document=document,
                ordinal=n,
                text=f"chunk {n}",
                metadata={"n": n},
                embedding=[float(n)] * EMBEDDING_DIMENSIONS,
            )
            for n in range(3)
        ]
        assert copy_instances(Chunk, chunks) == 3
        rows = list(Chunk.objects.filter(document=document).order_by("ordinal"))
    assert [row.text for row in rows] == ["chunk 0", "chunk 1", "chunk 2"]
    assert len({row.pk for row in rows}) == 3
    assert [row.metadata for row in rows] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert list(rows[2].embedding[:2]) == [2.0, 2.0]
    assert all(row.created_at >= before for row in rows)
