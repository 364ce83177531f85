"""The memory source in resolve, and the write after the response, on real PostgreSQL."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django_tenants.utils import schema_context

from memory.models import Memory, MemoryTurn
from sources.embedding import get_embedder
from tests.conftest import ApiClient, holding, side_connection, table_locked
from tests.unchecked_routes import save_unchecked


def memory_route(name: str = "m", **source: Any) -> dict[str, Any]:
    settings = {"type": "memory", "name": "memories", **source}
    return {"name": name, "context": {"sources": [settings], "injection": {"mode": "tool_role"}}}


def resolve(
    api: ApiClient, text: str, *, route: str = "m", user: str | None = "u1", **extra: Any
) -> Any:
    body = {"route": route, "request": {"messages": [{"role": "user", "content": text}]}, **extra}
    if user:
        body["user"] = user
    return api.post("/api/v1/resolve", body)


def hand_back(api: ApiClient, resolve_id: str, answer: str = "Noted.") -> Any:
    return api.post(
        f"/api/v1/resolve/{resolve_id}/response",
        {"response": {"choices": [{"message": {"role": "assistant", "content": answer}}]}},
    )


def memories(api: ApiClient, user: str = "u1") -> list[str]:
    return [
        m["content"]
        for m in api.get(f"/api/v1/users/{user}/memories", {"limit": 100}).json()["data"]
    ]


def test_relevant_memories_of_the_user_alone_are_injected(
    acme_api: ApiClient, store_config: dict[str, Any]
) -> None:
    acme_api.post("/api/v1/users/u1/memories", {"content": "User prefers window seats on flights."})
    acme_api.post("/api/v1/users/u1/memories", {"content": "User's favourite colour is green."})
    acme_api.post("/api/v1/users/u2/memories", {"content": "User prefers aisle seats on flights."})
    acme_api.post(
        "/api/v1/routes",
        memory_route(
            match={"recall": {"top_k": 5, "min_similarity": 0.4}},
            store=store_config,
            timeout_ms=20_000,  # a Milvus Lite file's server starts with the first recall
        ),
    )
    report = resolve(acme_api, "Book me a seat on my flight, you know which seats I prefer").json()
    source = report["sources"][0]
    assert source["status"] == "ok" and source["notes"]["memory_status"] == "used"
    assert source["notes"]["backend"] == store_config.get("backend", "postgres")
    messages = report["request"]["messages"]
    call, result = messages[1], messages[2]
    assert call["tool_calls"][0]["function"]["name"] == "vsr_memory_context"
    assert result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert "window seats" in result["content"]
    assert "aisle" not in result["content"]  # another user's memory never reaches this user


def test_a_turn_written_after_the_response_is_recalled_by_the_next(
    acme_api: ApiClient, store_config: dict[str, Any]
) -> None:
    """On every store: the write after the response reaches the store the route recalls from
    (for Milvus and Qdrant, the index already filled by the first turn's recall), and the
    reflection gate then drops what the route blocks."""
    route = memory_route(
        store={"auto": True, **store_config},
        match={"recall": {"top_k": 5, "min_similarity": 0.1}},
        reflection={"block_patterns": ["(?i)password"]},
        timeout_ms=20_000,
    )
    assert acme_api.post("/api/v1/routes", route).status_code == 201
    first = resolve(acme_api, "My name is Ada. I prefer window seats.").json()
    assert first["sources"][0]["notes"]["memory_status"] == "missing"  # nothing yet
    assert hand_back(acme_api, first["id"]).json()["memory_write"] == "queued"
    acme_api.post("/api/v1/users/u1/memories", {"content": "User's password hint is seats."})
    report = resolve(acme_api, "Which seats do I prefer?", **{"memory": {"store": False}}).json()
    source = report["sources"][0]
    assert source["notes"]["memory_status"] == "used", source
    injected = json.dumps(report["request"]["messages"])
    assert "window seats" in injected and "password" not in injected
    assert any(c.get("reason") == "blocked" for c in source["candidates"]), source


def test_no_user_or_no_memory_is_recorded_not_failed(acme_api: ApiClient) -> None:
    acme_api.post("/api/v1/routes", memory_route())
    anonymous = resolve(acme_api, "hello", user=None).json()["sources"][0]
    assert anonymous["status"] == "empty" and anonymous["notes"]["memory_status"] == "missing"
    fresh = resolve(acme_api, "what do you remember about me?", user="nobody").json()["sources"][0]
    assert fresh["notes"]["memory_status"] == "missing"


def test_the_turn_is_written_after_the_response_once(acme_api: ApiClient) -> None:
    acme_api.post("/api/v1/routes", memory_route(store={"auto": True}))
    first = resolve(acme_api, "My name is Ada. I prefer window seats.").json()
    assert memories(acme_api) == []  # nothing is written before the answer comes back
    accepted = hand_back(acme_api, first["id"])
    assert accepted.status_code == 202 and accepted.json()["memory_write"] == "queued"
    written = memories(acme_api)
    assert any("Ada" in m for m in written) and any("window seats" in m for m in written)
    again = hand_back(acme_api, first["id"])
    assert again.json()["duplicate"] is True
    assert sorted(memories(acme_api)) == sorted(written)  # idempotent per turn
    second = resolve(acme_api, "I prefer window seats.").json()
    hand_back(acme_api, second["id"])
    assert len(memories(acme_api)) == len(written)  # a near-duplicate updates, never adds
    with schema_context("acme"):
        turn = MemoryTurn.objects.get(resolve_id=first["id"])
        assert turn.status == "written" and turn.user_text == "" and turn.added == len(written)
        assert Memory.objects.filter(source_request_id=first["id"]).count() >= 1


@pytest.mark.parametrize(
    ("auto", "requested", "written"),
    [
        (True, None, True),
        (True, False, False),  # a request may opt out
        (None, True, True),  # ... and in where the route leaves it unset
        (None, None, False),
        (False, True, False),  # but never switch on what the route switched off
    ],
)
def test_store_auto_and_the_request_opt_out(
    acme_api: ApiClient, auto: bool | None, requested: bool | None, written: bool
) -> None:
    store = {} if auto is None else {"auto": auto}
    acme_api.post("/api/v1/routes", memory_route(store=store))
    extra = {} if requested is None else {"memory": {"store": requested}}
    report = resolve(acme_api, "My name is Grace.", **extra).json()
    assert hand_back(acme_api, report["id"]).json()["memory_write"] == (
        "queued" if written else "none"
    )
    assert any("Grace" in m for m in memories(acme_api)) is written


def test_nothing_is_written_for_a_refused_resolve(acme_api: ApiClient) -> None:
    route = memory_route(store={"auto": True})
    route["context"]["sources"].append(
        {
            "type": "rag",
            "name": "docs",
            "backend": "vectorstore",
            "backend_config": {"collection": "missing"},
            "on_failure": "block",
        }
    )
    save_unchecked("acme", route)
    refused = resolve(acme_api, "My name is Linus.")
    assert refused.status_code == 503
    with schema_context("acme"):
        assert not MemoryTurn.objects.exists()
    assert memories(acme_api) == []


def test_memory_source_cannot_block(acme_api: ApiClient) -> None:
    response = acme_api.post("/api/v1/routes", memory_route(on_failure="block"))
    assert response.status_code == 400
    assert "never refuses the request" in response.json()["error"]["message"]


def test_a_failed_memory_store_leaves_the_request_answered(acme_api: ApiClient, acme: Any) -> None:
    acme_api.post("/api/v1/routes", memory_route(timeout_ms=300))
    with table_locked(acme.schema, "memory_memory", give_up_s=10) as gave_up:
        response = resolve(acme_api, "What do you remember about my seats?")
        assert not gave_up.is_set()  # answered while the table was still locked
    assert response.status_code == 200
    source = response.json()["sources"][0]
    assert source["status"] in {"failed", "timeout"}
    assert source["notes"]["memory_status"] == "unavailable"
    assert response.json()["request"]["messages"] == [
        {"role": "user", "content": "What do you remember about my seats?"}
    ]


@contextmanager
def committed_memory_locked(
    schema: str, user: str, content: str
) -> Iterator[tuple[int, threading.Event]]:
    """A memory committed by another connection, which then holds its row lock: reads of it go
    through, an UPDATE of it waits (see ``holding``). Deleted afterwards: the test's rollback
    cannot."""
    embedder = get_embedder()
    holder = side_connection()
    table = f'"{schema}".memory_memory'
    try:
        (memory_id,) = holder.execute(
            f"INSERT INTO {table} (user_id, content, kind, embedding, embedder, metadata,"
            " source_request_id, source_turn, strength, created_at, updated_at)"
            " VALUES (%s, %s, 'fact', %s, %s, '{}', '', '', 1.0, now(), now()) RETURNING id",
            [user, content, str(embedder.embed_query(content)), embedder.identity],
        ).fetchone()
        holder.commit()
        lock = f"SELECT id FROM {table} WHERE id = %s FOR UPDATE"
        with holding(holder, lock, [memory_id], give_up_s=10) as gave_up:
            yield memory_id, gave_up
    finally:
        holder.execute(f"DELETE FROM {table} WHERE user_id = %s", [user])
        holder.commit()
        holder.close()


def test_memories_recalled_while_their_rows_are_locked_are_still_injected(
    acme_api: ApiClient, acme: Any
) -> None:
    """Marking recalled memories as used is an UPDATE: when their rows are locked it stops at
    its own short deadline, and the memories are injected anyway."""
    acme_api.post(
        "/api/v1/routes",
        memory_route(timeout_ms=2000, match={"recall": {"top_k": 5, "min_similarity": 0.3}}),
    )
    locked = committed_memory_locked(acme.schema, "u1", "User prefers window seats.")
    with locked as (memory_id, gave_up):
        response = resolve(acme_api, "Which seats do I prefer?")
        assert not gave_up.is_set()  # answered while the row was still locked
        source = response.json()["sources"][0]
        assert source["status"] == "ok" and source["notes"]["memory_status"] == "used"
        assert source["notes"]["memory_touch"] == "skipped: the memory table was busy"
        assert "window seats" in json.dumps(response.json()["request"])
        with schema_context(acme.schema):
            assert Memory.objects.get(pk=memory_id).last_used_at is None


def test_a_turn_embeds_each_extracted_statement_once(acme: Any) -> None:
    """The local extractor's statements are embedded for dedup, and those vectors are stored: no
    second embedding per added or updated memory."""
    from memory.writing import queue_turn, write_turn
    from tests.memory.test_memory_isolation import FakeEmbedder, axis, blend

    class CountingEmbedder(FakeEmbedder):
        def __init__(self, vectors: dict[str, list[float]]):
            super().__init__(vectors)
            self.seen: list[str] = []

        def embed(self, texts: Any) -> list[list[float]]:
            self.seen.extend(texts)
            return super().embed(texts)

    embedder = CountingEmbedder(
        {
            "User's name is Ada": axis(0),
            "User prefers window seats": axis(1),
            "User prefers window seats on trains": blend(1, 2, 0.95),
        }
    )
    with schema_context(acme.schema):
        for resolve_id, text in (
            ("r1", "My name is Ada. I prefer window seats."),
            ("r2", "I prefer window seats on trains."),
        ):
            queue_turn(
                resolve_id=resolve_id, route="m", user="u1", user_text=text, extractor="local"
            )
        first = write_turn("r1", embedder)
        assert (first.status, first.added) == ("written", 2)
        assert sorted(embedder.seen) == ["User prefers window seats", "User's name is Ada"]
        embedder.seen.clear()
        second = write_turn("r2", embedder)
        assert (second.status, second.added, second.updated) == ("written", 0, 1)
        assert embedder.seen == ["User prefers window seats on trains"]
        updated = Memory.objects.get(user_id="u1", content="User prefers window seats on trains")
        assert list(updated.embedding) == pytest.approx(blend(1, 2, 0.95), abs=1e-6)
        # the new wording replaces the old, which is kept as history
        old = Memory.objects.get(user_id="u1", content="User prefers window seats")
        assert old.superseded_by == updated.pk and updated.superseded_at is None
        assert updated.kind == "preference" and updated.source_request_id == "r2"
