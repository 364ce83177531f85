"""Memories added from a conversation (the extractor after a turn, through the REST API), and a
user's memories exported and imported back: ids kept where free, the path's user, nothing
duplicated, one tenant's and one user's rows untouched by another's import."""

from __future__ import annotations

import json
from typing import Any

from django_tenants.utils import schema_context

from memory.models import Memory
from tests.conftest import ApiClient, TenantFixture
from tests.memory.test_memory_api import add

MOVE = [
    {"role": "user", "content": "I moved to Lisbon last month"},
    {"role": "assistant", "content": "Lisbon is lovely in spring."},
]


def memories(api: ApiClient, user: str) -> list[dict[str, Any]]:
    response = api.get(f"/api/v1/users/{user}/memories", {"limit": 500})
    assert response.status_code == 200, response.content
    return list(response.json()["data"])


def export(api: ApiClient, user: str) -> bytes:
    response = api.get(f"/api/v1/users/{user}/memories/export")
    assert response.status_code == 200
    return b"".join(response.streaming_content)


def import_(api: ApiClient, user: str, body: bytes | str, content_type: str) -> Any:
    return api.post(f"/api/v1/users/{user}/memories/import", raw=body, content_type=content_type)


# --- add from messages -----------------------------------------------------------------------------


def test_a_conversation_is_turned_into_memories_by_the_extractor(acme_api: ApiClient) -> None:
    response = acme_api.post("/api/v1/users/u1/memories", {"messages": MOVE})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["added"] == 1 and body["reason"] is None
    [written] = body["data"]
    assert "Lisbon" in written["content"] and written["user"] == "u1"
    assert written["observed_at"] is not None  # dated now
    assert [m["id"] for m in memories(acme_api, "u1")] == [written["id"]]
    assert memories(acme_api, "u2") == []
    # Said again: the planning updates the memory instead of adding a duplicate.
    again = acme_api.post("/api/v1/users/u1/memories", {"messages": MOVE})
    assert again.status_code == 201 and again.json()["updated"] == 1
    assert len(memories(acme_api, "u1")) == 1


def test_a_message_timestamp_dates_the_memories_and_content_parts_are_read(
    acme_api: ApiClient,
) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "I moved to Porto last month"}],
            "timestamp": "2025-03-10T09:00:00+00:00",
        },
    ]
    response = acme_api.post("/api/v1/users/u1/memories", {"messages": messages})
    assert response.status_code == 201, response.content
    [written] = response.json()["data"]
    assert "Porto" in written["content"]
    assert written["observed_at"].startswith("2025-03-10")


def test_nothing_to_remember_is_200_with_a_reason(acme_api: ApiClient) -> None:
    response = acme_api.post(
        "/api/v1/users/u1/memories",
        {"messages": [{"role": "user", "content": "What's the weather like today?"}]},
    )
    assert response.status_code == 200, response.content
    assert response.json()["data"] == [] and response.json()["reason"] == "nothing_extracted"
    assert memories(acme_api, "u1") == []


def test_bad_conversations_are_refused_with_the_envelope(acme_api: ApiClient) -> None:
    cases: list[tuple[Any, str]] = [
        ({"messages": []}, "messages"),
        ({"messages": MOVE, "content": "both"}, "exactly one of content or messages"),
        ({"metadata": {}}, "give content"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"messages": "I moved"}, "messages"),
        ({"messages": [{"role": "assistant", "content": "Hello"}]}, "no user message"),
        ({"messages": [{"role": "user", "content": "x", "timestamp": "yesterday"}]}, "timestamp"),
        ({"messages": [{"role": "user", "content": "hi"}] * 201}, "messages"),
        ({"messages": MOVE, "extractor": "no-such-deployment"}, "unknown extractor"),
    ]
    for body, expected in cases:
        response = acme_api.post("/api/v1/users/u1/memories", body)
        assert response.status_code == 400, (body, response.content)
        error = response.json()["error"]
        assert error["code"] == "invalid_request"
        assert expected in error["message"] + str(error.get("param")), (expected, error)
    assert memories(acme_api, "u1") == []


# --- import -----------------------------------------------------------------------------------------


def test_export_then_import_into_another_user_and_again_duplicates_nothing(
    acme_api: ApiClient,
) -> None:
    first = add(acme_api, "u1", "User likes green tea", kind="preference", metadata={"k": 1})
    add(acme_api, "u1", "User has a dog called Rex", observed_at="2025-01-02T03:04:05+00:00")
    lines = export(acme_api, "u1")
    response = import_(acme_api, "u2", lines, "application/x-ndjson")
    assert response.status_code == 200, response.content
    # The ids belong to u1's memories: u2's copies get new ids; u1 is untouched.
    assert response.json() == {"imported": 2, "skipped": 0, "errors": []}
    copies = {m["content"]: m for m in memories(acme_api, "u2")}
    assert set(copies) == {"User likes green tea", "User has a dog called Rex"}
    assert first["id"] not in {m["id"] for m in copies.values()}
    tea = copies["User likes green tea"]
    assert tea["kind"] == "preference" and tea["metadata"] == {"k": 1} and tea["user"] == "u2"
    assert copies["User has a dog called Rex"]["observed_at"].startswith("2025-01-02T03:04:05")
    assert len(memories(acme_api, "u1")) == 2
    again = import_(acme_api, "u2", lines, "application/jsonl")
    assert again.json() == {"imported": 0, "skipped": 2, "errors": []}
    assert len(memories(acme_api, "u2")) == 2
    # Into its own user: every line's id already holds the same memory.
    own = import_(acme_api, "u1", lines, "text/plain")
    assert own.json() == {"imported": 0, "skipped": 2, "errors": []}


def test_ids_are_kept_where_free_and_superseded_history_follows(
    acme_api: ApiClient, acme: TenantFixture
) -> None:
    old = add(acme_api, "u1", "User lives in Porto")
    new = add(acme_api, "u1", "User lives in Lisbon")
    with schema_context(acme.schema):
        Memory.objects.filter(pk=old["id"]).update(
            superseded_by=new["id"], superseded_at="2025-05-01T00:00:00Z"
        )
    lines = export(acme_api, "u1")
    assert acme_api.delete("/api/v1/users/u1/memories").json() == {"deleted": 2}
    # The path's user wins over the lines' user.
    response = import_(acme_api, "u3", lines, "application/x-ndjson")
    assert response.json() == {"imported": 2, "skipped": 0, "errors": []}
    restored = {m["id"]: m for m in memories(acme_api, "u3")}
    assert set(restored) == {old["id"], new["id"]}
    assert restored[old["id"]]["superseded_by"] == new["id"]
    assert restored[old["id"]]["superseded_at"].startswith("2025-05-01")
    assert restored[new["id"]]["superseded_at"] is None
    # The embeddings were computed: the live memory is found by search, the superseded is not.
    hits = acme_api.post("/api/v1/users/u3/memories/search", {"query": "Where does the user live?"})
    assert [hit["id"] for hit in hits.json()["data"]] == [new["id"]]
    # The id sequence moved past the kept ids: a new memory takes a fresh one.
    later = add(acme_api, "u3", "User plays chess")
    assert later["id"] > max(restored)


def test_a_json_array_imports_and_the_ids_of_another_tenant_are_irrelevant(
    acme_api: ApiClient, globex_api: ApiClient
) -> None:
    theirs = add(globex_api, "u1", "User works at Globex")
    mine = add(acme_api, "u1", "User likes jazz")
    rows = [
        {"id": theirs["id"], "user": "u1", "content": "User likes opera"},
        {"user": "someone", "content": "User likes blues", "kind": "preference"},
    ]
    response = import_(acme_api, "u2", json.dumps(rows), "application/json")
    assert response.status_code == 200, response.content
    assert response.json()["imported"] == 2
    imported = {m["content"]: m for m in memories(acme_api, "u2")}
    assert set(imported) == {"User likes opera", "User likes blues"}
    # globex's memory with that id is untouched, and acme's row with the id (if any) too.
    assert [m["content"] for m in memories(globex_api, "u1")] == ["User works at Globex"]
    assert [m["id"] for m in memories(acme_api, "u1")] == [mine["id"]]


def test_a_bad_line_refuses_the_whole_import_with_its_number(acme_api: ApiClient) -> None:
    good = json.dumps({"content": "User likes tea"})
    cases = [
        (f"{good}\n{{not json\n", "line 2"),
        (f"{good}\n\n[1, 2]\n", "line 3: expected a JSON object"),
        (f"{good}\n{json.dumps({'content': ''})}\n", "line 2: content"),
        (f"{good}\n{json.dumps({'content': 'x', 'kind': 'rumour'})}\n", "line 2: kind"),
        (f"{good}\n{json.dumps({'content': 'x', 'id': -3})}\n", "line 2: id"),
        (json.dumps({"content": "x", "observed_at": "2025-01-01"}), "line 1: observed_at"),
        ("", "no memory to import"),
        ("\n\n", "no memory to import"),
    ]
    for body, expected in cases:
        response = import_(acme_api, "u1", body, "application/x-ndjson")
        assert response.status_code == 400, (body, response.content)
        assert expected in response.json()["error"]["message"], (expected, response.json())
    assert memories(acme_api, "u1") == []  # atomic: the good first line is not written either


def test_the_line_count_is_capped(acme_api: ApiClient, monkeypatch: Any) -> None:
    from memory import transfer

    monkeypatch.setattr(transfer, "MAX_IMPORT_LINES", 3)
    body = "\n".join(json.dumps({"content": f"User fact {i}"}) for i in range(4))
    response = import_(acme_api, "u1", body, "application/x-ndjson")
    assert response.status_code == 400
    assert "more than 3 memories" in response.json()["error"]["message"]
    assert memories(acme_api, "u1") == []


def test_import_needs_memory_write(acme: TenantFixture) -> None:
    from tenants.services import issue_api_key

    reader = ApiClient(issue_api_key(tenant=acme.tenant, scopes="memory.read").plain_key)
    response = import_(reader, "u1", json.dumps({"content": "x"}), "text/plain")
    assert response.status_code == 403


def test_a_conversation_naming_no_extractor_uses_the_tenants_default(
    acme_api: ApiClient, acme: TenantFixture
) -> None:
    from contextplatform.routes.services import save_defaults

    memory = {"type": "memory", "name": "memories", "store": {"extractor": "mem-llm"}}
    with schema_context(acme.schema):
        save_defaults(context={"sources": [memory]})
    # The defaults name a deployment the tenant does not have: the write says so.
    named = acme_api.post("/api/v1/users/u1/memories", {"messages": MOVE})
    assert named.status_code == 400, named.content
    assert named.json()["error"]["param"] == "extractor"
    assert "'mem-llm'" in named.json()["error"]["message"]
    # A body naming its extractor wins over the defaults.
    local = acme_api.post("/api/v1/users/u1/memories", {"messages": MOVE, "extractor": "local"})
    assert local.status_code == 201, local.content
    with schema_context(acme.schema):
        save_defaults(context={})
    assert acme_api.post("/api/v1/users/u2/memories", {"messages": MOVE}).status_code == 201
