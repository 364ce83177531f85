"""What a process remembers of the pre-warm cache (``sources.prewarm.lookup``): that a tenant,
user and session has nothing pre-warmed, so that the resolves after the first do not ask the cache
(Redis, with REDIS_URL) again; and that it forgets it as soon as a pre-warm is stored, in this
process or in another (the database's notification), so a pre-warm is never missed for longer
than the notification's trip.

What is remembered is read on connections of their own (outside the test's transaction, where
nothing is kept); every test names a session of its own."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache

from contextplatform.core import config_cache
from sources import prewarm
from sources.prewarm import NOTHING_WARMED, Warmed, entry_key, generations, lookup, store
from tests.conftest import side_connection
from tests.core.test_config_cache import heard_since, outside_the_test_transaction

SCHEMA = "acme"
STATES = {"fingerprint": {"kept": "the profile"}}


@pytest.fixture
def listening(db: Any) -> None:
    assert config_cache.wait_until_listening()


@pytest.fixture
def session() -> Iterator[str]:
    name = f"s_nothing_{uuid.uuid4().hex[:10]}"
    yield name
    cache.delete(entry_key(SCHEMA, "u_nothing", name))


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every read of a pre-warm entry from the cache (the lookups, not the generations' reads)."""
    reads: list[list[str]] = []
    backend = type(prewarm.cache._connections[prewarm.cache._alias])  # the class: every thread's
    get_many = backend.get_many

    def counted(self: Any, keys: list[str], *args: Any, **kwargs: Any) -> Any:
        if any("prewarm:entry:" in key for key in keys):
            reads.append(list(keys))
        return get_many(self, keys, *args, **kwargs)

    monkeypatch.setattr(backend, "get_many", counted)
    return reads


def look(session: str) -> dict[str, Any]:
    return outside_the_test_transaction(lambda: lookup(SCHEMA, "u_nothing", session))


def test_nothing_prewarmed_is_remembered(
    listening: None, session: str, asked: list[list[str]]
) -> None:
    assert look(session) == {}
    assert look(session) == {}
    assert len(asked) == 1  # the second resolve did not ask the cache


def test_a_prewarm_stored_here_is_seen_by_the_next_lookup(
    listening: None, session: str, asked: list[list[str]]
) -> None:
    assert look(session) == {}

    def prewarmed() -> None:
        read_under = generations(SCHEMA, "u_nothing", session)
        store(
            schema=SCHEMA, user="u_nothing", session=session, read_under=read_under, states=STATES
        )

    outside_the_test_transaction(prewarmed)
    assert look(session) == STATES
    assert look(session) == STATES  # what is found is never remembered: each lookup asks
    assert len(asked) == 3


def test_a_prewarm_stored_by_another_process_is_seen_once_its_notification_arrives(
    listening: None, session: str
) -> None:
    assert look(session) == {}
    # Another process stores an entry: it reaches this process's cache backend (shared with
    # REDIS_URL), but no code of this process runs; until its notification arrives, this process
    # still answers from what it remembers.
    entry = Warmed(
        schema=SCHEMA,
        user="u_nothing",
        session=session,
        generations=outside_the_test_transaction(lambda: generations(SCHEMA, "u_nothing", session)),
        expires_at=time.time() + 60,
        states=STATES,
    )
    cache.set(entry_key(SCHEMA, "u_nothing", session), entry, timeout=61)
    assert look(session) == {}
    clears = config_cache._listener.clears
    with side_connection() as other:
        other.execute("SELECT pg_notify(%s, %s)", [config_cache.CHANNEL, NOTHING_WARMED])
        other.commit()
    heard_since(clears)
    assert look(session) == STATES


def test_inside_a_transaction_the_cache_is_always_asked(
    listening: None, session: str, asked: list[list[str]]
) -> None:
    assert lookup(SCHEMA, "u_nothing", session) == {}
    assert lookup(SCHEMA, "u_nothing", session) == {}
    assert len(asked) == 2
