"""A memory keeps the date of the turn it came from (``observed_at``): when the user said it, not
when the write after the response ran. Through the real resolve, hand-back and write path on real
PostgreSQL; shown by the memory API and in the text injected for the model."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django_tenants.utils import schema_context

from memory.models import Memory, MemoryTurn
from memory.prewarm import load_pool, search
from memory.writing import queue_turn, write_turn
from tests.conftest import ApiClient
from tests.memory.test_memory_flow import hand_back, memory_route, resolve
from tests.memory.test_memory_isolation import FakeEmbedder, axis, remember

SAID = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)
SAID_AGAIN = datetime(2025, 6, 2, 18, 5, tzinfo=UTC)


def said_at(schema: str, resolve_id: str, moment: datetime) -> None:
    """The turn as if resolved at ``moment``: the write after the response runs now."""
    with schema_context(schema):
        assert MemoryTurn.objects.filter(resolve_id=resolve_id).update(created_at=moment) == 1


def test_a_memory_keeps_the_date_its_turn_was_said(acme_api: ApiClient, acme: Any) -> None:
    acme_api.post(
        "/api/v1/routes",
        memory_route(store={"auto": True}, match={"recall": {"top_k": 5, "min_similarity": 0.3}}),
    )
    turn = resolve(acme_api, "Oh, by the way, I moved to Lisbon.").json()
    said_at(acme.schema, turn["id"], SAID)
    assert hand_back(acme_api, turn["id"]).json()["memory_write"] == "queued"

    with schema_context(acme.schema):
        memory = Memory.objects.get(user_id="u1")
        assert memory.content == "User lives in Lisbon (moved there)"  # where, in the present
        assert memory.observed_at == SAID
        assert memory.created_at > SAID  # written now, said then

    [listed] = acme_api.get("/api/v1/users/u1/memories").json()["data"]
    assert datetime.fromisoformat(listed["observed_at"]) == SAID
    detail = acme_api.get(f"/api/v1/users/u1/memories/{memory.pk}").json()
    assert detail["observed_at"] == listed["observed_at"]
    [hit] = acme_api.post(
        "/api/v1/users/u1/memories/search", {"query": "Where did I move?", "limit": 1}
    ).json()["data"]
    assert datetime.fromisoformat(hit["observed_at"]) == SAID

    # The model reads the date beside the memory, so "when did ..." has its answer.
    report = resolve(acme_api, "When did I move to Lisbon?", memory={"store": False}).json()
    assert report["sources"][0]["notes"]["memory_status"] == "used"
    injected = report["request"]["messages"][2]["content"]
    assert "(2025-03-14) User lives in Lisbon (moved there)" in injected


def test_a_restatement_dates_the_memory_anew(acme: Any) -> None:
    """The same fact said again updates its memory, which then carries the later turn's date."""
    embedder = FakeEmbedder({"User lives in Porto": axis(3)})
    with schema_context(acme.schema):
        for resolve_id, moment in (("r1", SAID), ("r2", SAID_AGAIN)):
            queue_turn(
                resolve_id=resolve_id,
                route="m",
                user="u1",
                user_text="I live in Porto.",
                extractor="local",
            )
            said_at(acme.schema, resolve_id, moment)
        first = write_turn("r1", embedder)
        assert Memory.objects.get(user_id="u1").observed_at == SAID
        second = write_turn("r2", embedder)
        assert (first.added, second.added, second.updated) == (1, 0, 1)
        assert Memory.objects.get(user_id="u1").observed_at == SAID_AGAIN


def test_a_turn_with_nothing_to_remember_writes_no_date(acme: Any) -> None:
    with schema_context(acme.schema):
        queue_turn(
            resolve_id="r1",
            route="m",
            user="u1",
            user_text="Thanks, that helps!",
            extractor="local",
        )
        assert write_turn("r1", FakeEmbedder()).status == "skipped"
        assert not Memory.objects.filter(user_id="u1").exists()


def test_the_api_takes_and_clears_the_date(acme_api: ApiClient) -> None:
    created = acme_api.post(
        "/api/v1/users/u1/memories",
        {"content": "User moved to Lisbon", "observed_at": "2025-03-14T09:30:00Z"},
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert datetime.fromisoformat(body["observed_at"]) == SAID
    plain = acme_api.post("/api/v1/users/u1/memories", {"content": "User likes tea"}).json()
    assert plain["observed_at"] is None  # added by hand, no turn to date it

    path = f"/api/v1/users/u1/memories/{body['id']}"
    moved = acme_api.patch(path, {"observed_at": "2025-06-02T20:05:00+02:00"}).json()
    assert datetime.fromisoformat(moved["observed_at"]) == SAID_AGAIN
    assert acme_api.patch(path, {"observed_at": None}).json()["observed_at"] is None

    naive = acme_api.post(
        "/api/v1/users/u1/memories", {"content": "x", "observed_at": "2025-03-14T09:30:00"}
    )
    assert naive.status_code == 400
    assert "time zone" in naive.json()["error"]["message"]


def test_pre_warmed_memories_keep_their_date(acme: Any) -> None:
    remember(acme.schema, "u1", "User moved to Lisbon", axis(0), observed_at=SAID)
    with schema_context(acme.schema):
        pool = load_pool("u1")
    assert pool is not None
    [hit] = search(pool, axis(0), 5, 0.5)
    assert hit.observed_at == SAID


def test_dates_the_database_cannot_hold_are_refused_not_a_server_error(acme_api: ApiClient) -> None:
    for field, value in (
        ("observed_at", "2025-03-14T10:00:00-22:31"),  # ISO 8601 allows it, PostgreSQL does not
        ("expires_at", "0001-01-01T00:00:00+05:00"),  # before year 1 once in UTC
    ):
        response = acme_api.post("/api/v1/users/u1/memories", {"content": "x", field: value})
        assert response.status_code == 400, (field, response.content)
        assert response.json()["error"]["param"] == field
    accepted = acme_api.post(
        "/api/v1/users/u1/memories", {"content": "x", "observed_at": "2025-03-14T10:00:00+14:00"}
    )
    assert accepted.status_code == 201, accepted.content
