"""The background replay writer: records are written off the resolve path, readers flush it, a
record still on its way from another process is waited for, and a record that cannot be written is
counted and logged without stopping the others.

The writer thread commits on its own connection, past the test's transaction, so each test removes
the records it wrote on a connection of its own (``delete_committed``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_tenants.utils import schema_context

from contextplatform.core import metrics
from contextplatform.replay.arrival import await_replay
from contextplatform.replay.ids import RESOLVE_ID, new_resolve_id, resolve_id_age_s
from contextplatform.replay.models import ReplayRecord
from contextplatform.replay.writer import ReplayWriter
from sources.models import ChatSession
from tests.conftest import TENANT_KEYS, table_locked
from tests.live import live_server

pytestmark = pytest.mark.django_db


def delete_committed(ids: list[str], session: str | None = None) -> None:
    """Delete in a thread of its own: its connection commits (the test's would roll back)."""

    def delete() -> None:
        try:
            for schema in ("acme", "globex"):
                with schema_context(schema):
                    ReplayRecord.objects.filter(id__in=ids).delete()
                    ChatSession.objects.filter(key=session).delete()
        finally:
            connection.close()

    worker = threading.Thread(target=delete)
    worker.start()
    worker.join()


@pytest.fixture
def committed(settings: Any) -> Iterator[list[str]]:
    """Background writes on; the ids a test adds to the list are deleted afterwards."""
    settings.REPLAY_WRITES = "background"
    ids: list[str] = []
    yield ids
    delete_committed(ids)


def record(record_id: str, route: str = "r") -> ReplayRecord:
    return ReplayRecord(
        id=record_id,
        route=route,
        status="ok",
        format="openai",
        created_at=timezone.now(),
        duration_ms=1.0,
    )


def ids_in(schema: str, ids: list[str]) -> set[str]:
    with schema_context(schema):
        return set(ReplayRecord.objects.filter(id__in=ids).values_list("id", flat=True))


def test_records_land_in_their_own_tenant_after_a_flush(committed: list[str]) -> None:
    writer = ReplayWriter()
    acme_ids = [new_resolve_id() for _ in range(150)]  # more than one batch
    globex_ids = [new_resolve_id() for _ in range(20)]
    committed += acme_ids + globex_ids
    for acme_id, globex_id in zip(acme_ids, globex_ids + [None] * 130, strict=True):
        writer.submit("acme", record(acme_id))
        if globex_id:
            writer.submit("globex", record(globex_id))
    assert writer.flush(timeout_s=30)
    assert ids_in("acme", committed) == set(acme_ids)
    assert ids_in("globex", committed) == set(globex_ids)


def test_a_flush_waits_for_its_own_tenant_only(committed: list[str]) -> None:
    writer = ReplayWriter()
    mine, theirs = new_resolve_id(), new_resolve_id()
    committed += [mine, theirs]
    with table_locked("globex", "routing_replayrecord", give_up_s=20) as gave_up:
        writer.submit("acme", record(mine))
        writer.submit("globex", record(theirs))  # stuck behind the lock
        assert writer.flush("acme", timeout_s=10)
        assert ids_in("acme", [mine]) == {mine}
        assert not writer.flush("globex", timeout_s=0.3) and not writer.flush(timeout_s=0.1)
        assert not gave_up.is_set()
    assert writer.flush(timeout_s=10) and ids_in("globex", [theirs]) == {theirs}


def test_a_record_that_cannot_be_written_is_counted_and_the_rest_are_written(
    committed: list[str],
) -> None:
    writer = ReplayWriter()
    taken = new_resolve_id()
    committed.append(taken)
    writer.submit("acme", record(taken))
    assert writer.flush(timeout_s=10)
    failures = metrics.REPLAY_WRITE_FAILURES._value.get()

    good = [new_resolve_id(), new_resolve_id()]
    committed += good
    writer.submit("acme", record(good[0]))
    writer.submit("acme", record(taken))  # a duplicate id fails its batch, then alone
    writer.submit("acme", record(good[1]))
    assert writer.flush(timeout_s=10)
    assert ids_in("acme", committed) == {taken, *good}
    assert metrics.REPLAY_WRITE_FAILURES._value.get() == failures + 1


def test_a_turn_waits_for_a_record_another_process_is_still_writing(
    committed: list[str],
) -> None:
    late = new_resolve_id()
    committed.append(late)

    def write_later() -> None:
        time.sleep(0.3)
        try:
            with schema_context("acme"):
                record(late).save(force_insert=True)
        finally:
            connection.close()

    writer = threading.Thread(target=write_later)
    with schema_context("acme"):
        writer.start()
        started = time.monotonic()
        assert await_replay(late)
        assert time.monotonic() - started >= 0.25
        writer.join()
        assert existence_checks(new_resolve_id(), wait_s=0.2) > 1  # just issued: looked for again
        # Issued long ago (1970), or not a resolve id: answered with one look.
        assert existence_checks("rsv_" + "0" * 24, wait_s=0.2) == 1
        assert existence_checks("not-a-resolve-id", wait_s=0.2) == 1


def existence_checks(record_id: str, *, wait_s: float) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert not await_replay(record_id, wait_s=wait_s)
    return sum(1 for query in queries.captured_queries if "replayrecord" in query["sql"])


def test_resolve_ids_carry_their_issue_time() -> None:
    issued = new_resolve_id()
    age = resolve_id_age_s(issued)
    assert RESOLVE_ID.fullmatch(issued) and age is not None and 0 <= age < 60
    assert resolve_id_age_s("rsv_" + "0" * 24) > 1e9 and resolve_id_age_s("job_1") is None


def test_a_live_server_answers_with_the_replay_and_completes_the_turn_at_once() -> None:
    """uvicorn runs the production default (background writes): the record a resolve accepted is
    there for the very next request."""
    headers = {"Authorization": f"Bearer {TENANT_KEYS['acme']}"}
    route = {
        "name": "replay-writer",
        "context": {"sources": [{"type": "skill_guardrails", "texts": ["Be brief."]}]},
    }
    body = {
        "route": "replay-writer",
        "user": "u1",
        "session": "s-replay-writer",
        "request": {"messages": [{"role": "user", "content": "hi"}]},
    }
    answer = {"choices": [{"message": {"role": "assistant", "content": "Hello."}}]}
    resolved: list[str] = []
    with (
        live_server({"REPLAY_WRITES": "background"}) as base,
        httpx.Client(base_url=base, headers=headers, timeout=30) as client,
    ):
        created = client.post("/api/v1/routes", json=route)
        assert created.status_code == 201, created.text
        try:
            for _ in range(5):
                resolve = client.post("/api/v1/resolve", json=body)
                assert resolve.status_code == 200, resolve.text
                resolve_id = resolve.json()["id"]
                resolved.append(resolve_id)
                replay = client.get(f"/api/v1/replay/{resolve_id}")
                assert replay.status_code == 200, replay.text
                assert replay.json()["route"] == "replay-writer"
                turn = client.post(
                    f"/api/v1/resolve/{resolve_id}/response", json={"response": answer}
                )
                assert turn.status_code == 202, turn.text
                assert turn.json()["messages_written"] == 1
        finally:
            client.delete("/api/v1/routes/replay-writer")
            delete_committed(resolved, session=body["session"])
