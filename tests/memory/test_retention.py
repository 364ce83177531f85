"""Retention: expired memories, a maximum age and a maximum per user (the weakest pruned), applied
to each tenant by the periodic task with that tenant's settings."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone
from django_tenants.utils import schema_context

from memory.models import Memory
from memory.services import apply_retention
from memory.tasks import apply_retention_task
from tenants.models import Tenant
from tests.conftest import TenantFixture
from tests.memory.test_memory_isolation import remember


def age(schema: str, memory_id: int, days: float) -> None:
    with schema_context(schema):
        then = timezone.now() - timedelta(days=days)
        Memory.objects.filter(pk=memory_id).update(created_at=then, updated_at=then)


def remaining(schema: str, user: str | None = None) -> list[str]:
    with schema_context(schema):
        memories = Memory.objects.all()
        if user is not None:
            memories = memories.filter(user_id=user)
        return sorted(memories.values_list("content", flat=True))


def retain(schema: str, **rules: Any) -> dict[str, int]:
    with schema_context(schema):
        return apply_retention(**{"max_age_days": None, "max_per_user": None, **rules})


def test_memories_older_than_the_maximum_age_are_deleted(acme: TenantFixture) -> None:
    old_u1 = remember(acme.schema, "u1", "u1 old")
    old_u2 = remember(acme.schema, "u2", "u2 old")
    recent = remember(acme.schema, "u1", "u1 recent")
    age(acme.schema, old_u1, 31)
    age(acme.schema, old_u2, 400)
    age(acme.schema, recent, 29)
    restated = remember(acme.schema, "u2", "u2 restated")  # created long ago, written again today
    with schema_context(acme.schema):
        Memory.objects.filter(pk=restated).update(created_at=timezone.now() - timedelta(days=90))
    assert retain(acme.schema, max_age_days=30) == {"expired": 0, "aged": 2, "pruned": 0}
    assert remaining(acme.schema) == ["u1 recent", "u2 restated"]


def test_beyond_the_maximum_per_user_the_weakest_are_pruned(acme: TenantFixture) -> None:
    strengths = {
        "strong old": 3.0,
        "weak": 0.2,
        "medium": 1.0,
        "tied newer": 0.5,
        "tied older": 0.5,
    }
    ids = {text: remember(acme.schema, "u1", text, strength=s) for text, s in strengths.items()}
    age(acme.schema, ids["strong old"], 300)
    age(acme.schema, ids["tied older"], 10)
    age(acme.schema, ids["tied newer"], 5)
    for i in range(3):
        remember(acme.schema, "u2", f"u2 fact {i}", strength=0.1)  # exactly at the limit
    assert retain(acme.schema, max_per_user=3)["pruned"] == 2
    assert remaining(acme.schema, "u1") == ["medium", "strong old", "tied newer"]
    assert len(remaining(acme.schema, "u2")) == 3


def test_superseded_history_is_pruned_before_any_current_memory(acme: TenantFixture) -> None:
    history = remember(acme.schema, "u1", "User lives in Porto", strength=5.0)
    current = remember(acme.schema, "u1", "User lives in Lisbon", strength=0.1)
    remember(acme.schema, "u1", "User has a cat", strength=0.2)
    with schema_context(acme.schema):
        Memory.objects.filter(pk=history).update(
            superseded_at=timezone.now(), superseded_by=current
        )
    assert retain(acme.schema, max_per_user=2)["pruned"] == 1
    assert remaining(acme.schema, "u1") == ["User has a cat", "User lives in Lisbon"]


def test_expired_memories_are_deleted_and_the_rest_kept(acme: TenantFixture) -> None:
    now = timezone.now()
    remember(acme.schema, "u1", "expired", expires_at=now - timedelta(seconds=1))
    remember(acme.schema, "u1", "expires later", expires_at=now + timedelta(days=1))
    remember(acme.schema, "u1", "never expires")
    assert retain(acme.schema) == {"expired": 1, "aged": 0, "pruned": 0}
    assert remaining(acme.schema) == ["expires later", "never expires"]


@pytest.mark.parametrize("rules", [{}, {"max_age_days": 0, "max_per_user": 0}])
def test_rules_left_unset_or_zero_delete_nothing(acme: TenantFixture, rules: dict) -> None:
    memory_id = remember(acme.schema, "u1", "ancient")
    age(acme.schema, memory_id, 5000)
    remember(acme.schema, "u1", "second")
    assert retain(acme.schema, **rules) == {"expired": 0, "aged": 0, "pruned": 0}
    assert remaining(acme.schema) == ["ancient", "second"]


def test_the_periodic_task_applies_each_tenants_own_settings(
    acme: TenantFixture, globex: TenantFixture
) -> None:
    Tenant.objects.filter(pk=acme.tenant.pk).update(memory_max_per_user=1, memory_max_age_days=30)
    for schema in (acme.schema, globex.schema):
        remember(schema, "u1", "weak", strength=0.1)
        remember(schema, "u1", "strong", strength=2.0)
        age(schema, remember(schema, "u2", "old"), 90)
    results = apply_retention_task.delay().get()
    assert results[acme.schema] == {"expired": 0, "aged": 1, "pruned": 1}
    assert results[globex.schema] == {"expired": 0, "aged": 0, "pruned": 0}
    assert remaining(acme.schema) == ["strong"]
    assert remaining(globex.schema) == ["old", "strong", "weak"]
    assert connection.schema_name == "public"


def test_retention_refuses_the_public_schema(db: Any) -> None:
    connection.set_schema_to_public()
    with pytest.raises(RuntimeError, match="tenant schema"):
        apply_retention(max_age_days=1, max_per_user=1)


def test_the_task_runs_daily() -> None:
    entries = [
        e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == "memory.apply_retention"
    ]
    assert entries and entries[0]["schedule"] == 86400.0
