"""The memories list as a memory manager works in it: one user's memories, by time and by words."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client
from django_tenants.utils import schema_context

from memory.models import Memory
from memory.services import create_memory
from sources.embedding import get_embedder
from tests.admin.conftest import ACME_HOST, make_user, signed_in

LIST = "/admin/memory/memory/"


@pytest.fixture
def manager(acme: Any) -> Client:
    make_user(acme.tenant, "mia", "memory_manager")
    return signed_in("mia", ACME_HOST)


def remember(user_id: str, content: str, created: datetime) -> str:
    with schema_context("acme"):
        memory = create_memory(user_id=user_id, content=content, embedder=get_embedder())
        Memory.objects.filter(pk=memory.pk).update(created_at=created)
        return str(memory.pk)


def listed(client: Client, **params: str) -> list[str]:
    response = client.get(LIST, params)
    assert response.status_code == 200, response.status_code
    return sorted(str(m.pk) for m in response.context["cl"].result_list)


def test_a_manager_finds_one_users_memories_by_user_time_and_words(manager: Client) -> None:
    email = remember("u1", "Prefers email over phone calls.", datetime(2026, 3, 1, tzinfo=UTC))
    city = remember("u1", "Lives in Lyon.", datetime(2026, 3, 9, tzinfo=UTC))
    other = remember("u12", "Prefers email too.", datetime(2026, 3, 9, tzinfo=UTC))

    assert listed(manager, user="u1") == sorted([email, city])  # exact, not u12's
    assert listed(manager, q="email") == sorted([email, other])
    assert listed(manager, q="u1") == []  # the search box reads the content only
    assert listed(manager, user="u1", q="email") == [email]
    assert listed(manager, **{"from": "2026-03-05"}) == sorted([city, other])
    assert listed(manager, user="u1", to="2026-03-01") == [email]
    assert listed(manager, created_at__year="2026", created_at__month="3") == sorted(
        [email, city, other]
    )

    html = manager.get(LIST, {"user": "u1"}).content.decode()
    assert "Memorys" not in html and "Select memory to change" in html
    assert 'name="user" value="u1"' in html  # the sidebar shows the filter in use
    assert "memory/memory_admin.css" in html  # the content column takes the room
    assert "Memories" in manager.get("/admin/").content.decode()


def test_the_list_shows_a_long_content_beyond_its_first_words(manager: Client) -> None:
    text = "The customer asked for invoices by post, never by email, and for a call first. " * 2
    remember("u1", text, datetime(2026, 3, 1, tzinfo=UTC))
    html = manager.get(LIST).content.decode()
    assert text[:200] in html
