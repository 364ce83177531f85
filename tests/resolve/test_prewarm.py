"""Pre-warm on session open (``POST /api/v1/sessions/{session}/prewarm``) on real PostgreSQL and
the test run's cache (Redis with REDIS_URL): the next resolve serves the pre-warmed sources, says
so, and fetches again after any write to what they read, after the TTL, for anyone else.

Every test names users and sessions of its own, so no pre-warm of one test meets another's
resolve. Writes run inside the test's transaction, so the invalidation they schedule for their
commit is run where the test says (``django_capture_on_commit_callbacks``)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from django.core.cache import cache
from django_tenants.utils import schema_context
from pydantic import Field

from memory.models import Memory
from sources.base import (
    ContextRequest,
    ContextSource,
    SourceResult,
    SourceSettings,
    register_source_kind,
)
from sources.models import ChatMessage, UserProfile
from sources.prewarm import entry_key, lookup
from tests.conftest import ApiClient, TenantFixture

# --- a prewarmable source that counts its fetches -------------------------------------------------

FETCHES: Counter[str] = Counter()  # by user: each test's users are its own


class CountingSettings(SourceSettings):
    type: Literal["test_prewarm_count"] = "test_prewarm_count"
    priority: int = Field(default=50, ge=0, le=1000)
    fail: bool = False
    sleep_ms: int = Field(default=0, ge=0)


@register_source_kind
class CountingSource(ContextSource):
    type = "test_prewarm_count"
    Settings = CountingSettings
    prewarmable = True

    async def fetch(self, request: ContextRequest) -> SourceResult:
        settings: CountingSettings = self.settings  # type: ignore[assignment]
        FETCHES[request.user or ""] += 1
        if settings.sleep_ms:
            await asyncio.sleep(settings.sleep_ms / 1000)
        if settings.fail:
            raise RuntimeError("the live service is down")
        return SourceResult([self.item(f"live value of {request.user}")])


# --- helpers --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ids:
    user: str
    other: str
    session: str
    other_session: str


@pytest.fixture
def ids() -> Ids:
    tag = uuid.uuid4().hex[:10]
    return Ids(f"u_{tag}", f"v_{tag}", f"s_{tag}", f"t_{tag}")


QUESTION = "Which seat do I prefer on flights?"
RULES = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}
PROFILE = {"type": "user_profile", "name": "profile"}
HISTORY = {"type": "recent_messages", "name": "history"}
LIVE = {"type": "test_prewarm_count", "name": "live"}
MEMORY = {
    "type": "memory",
    "name": "memories",
    "match": {"recall": {"method": "embedding", "top_k": 5, "min_similarity": 0.2}},
}


def make_route(api: ApiClient, sources: list[dict[str, Any]], name: str = "support") -> None:
    body = {"name": name, "context": {"sources": sources, "injection": {"mode": "system_prompt"}}}
    response = api.post("/api/v1/routes", body)
    assert response.status_code == 201, response.content


def prewarm(api: ApiClient, session: str, user: str, route: str = "support") -> dict[str, Any]:
    response = api.post(f"/api/v1/sessions/{session}/prewarm", {"route": route, "user": user})
    assert response.status_code == 202, response.content
    return response.json()


def resolve(
    api: ApiClient, user: str, session: str, text: str = QUESTION, route: str = "support"
) -> dict[str, Any]:
    body = {
        "route": route,
        "user": user,
        "session": session,
        "request": {"model": "m", "messages": [{"role": "user", "content": text}]},
    }
    response = api.post("/api/v1/resolve", body)
    assert response.status_code == 200, response.content
    return response.json()


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {source["name"]: source for source in report["sources"]}


def prewarmed(report: dict[str, Any]) -> set[str]:
    return {source["name"] for source in report["sources"] if source.get("prewarmed")}


def context_text(report: dict[str, Any]) -> str:
    return str(report["request"]["messages"][0]["content"])


def seed_user(api: ApiClient, ids: Ids, tier: str = "gold") -> None:
    assert (
        api.put(f"/api/v1/users/{ids.user}/profile", {"attributes": {"tier": tier}}).status_code
        == 200
    )
    messages = [
        {"role": "user", "content": "My order 1234 has not arrived."},
        {"role": "assistant", "content": "I am checking order 1234."},
    ]
    posted = api.post(
        f"/api/v1/sessions/{ids.session}/messages", {"user": ids.user, "messages": messages}
    )
    assert posted.status_code == 201, posted.content


def add_memory(api: ApiClient, user: str, content: str) -> int:
    response = api.post(f"/api/v1/users/{user}/memories", {"content": content})
    assert response.status_code == 201, response.content
    return int(response.json()["id"])


# --- served from the pre-warm ---------------------------------------------------------------------


def test_the_next_resolve_serves_the_prewarmed_sources_and_says_so(
    acme: TenantFixture, acme_api: ApiClient, ids: Ids
) -> None:
    make_route(acme_api, [RULES, PROFILE, HISTORY, LIVE])
    seed_user(acme_api, ids)

    answer = prewarm(acme_api, ids.session, ids.user)
    assert answer["route"] == "support" and answer["user"] == ids.user
    assert answer["session"] == ids.session and answer["ttl_seconds"] == 60
    statuses = {line["name"]: line["status"] for line in answer["sources"]}
    assert statuses == {
        "rules": "skipped",
        "profile": "prewarmed",
        "history": "prewarmed",
        "live": "prewarmed",
    }
    assert "query" in next(line for line in answer["sources"] if line["name"] == "rules")["reason"]
    assert FETCHES[ids.user] == 1  # the pre-warm's own fetch

    # Changed behind the cache's back (a queryset update sends no signal): a resolve that read
    # the store would see platinum.
    with schema_context(acme.schema):
        UserProfile.objects.filter(user_id=ids.user).update(attributes={"tier": "platinum"})

    report = resolve(acme_api, ids.user, ids.session)
    assert FETCHES[ids.user] == 1  # not fetched again
    assert prewarmed(report) == {"profile", "history", "live"}
    sources = by_name(report)
    assert "prewarmed" not in sources["rules"]
    assert all(sources[name]["status"] == "ok" for name in ("profile", "history", "live"))
    text = context_text(report)
    assert '"tier": "gold"' in text and "platinum" not in text
    assert "I am checking order 1234." in text and f"live value of {ids.user}" in text

    record = acme_api.get(f"/api/v1/replay/{report['id']}").json()
    assert {s["name"] for s in record["sources"] if s.get("prewarmed")} == {
        "profile",
        "history",
        "live",
    }


def test_without_a_prewarm_or_a_session_the_sources_are_fetched(
    acme_api: ApiClient, ids: Ids
) -> None:
    make_route(acme_api, [PROFILE, LIVE])
    seed_user(acme_api, ids)
    assert prewarmed(resolve(acme_api, ids.user, ids.session)) == set()
    assert FETCHES[ids.user] == 1
    prewarm(acme_api, ids.session, ids.user)
    body = {
        "route": "support",
        "user": ids.user,
        "request": {"messages": [{"role": "user", "content": "hi"}]},
    }
    report = acme_api.post("/api/v1/resolve", body).json()  # no session: nothing to match
    assert prewarmed(report) == set() and FETCHES[ids.user] == 3


def test_the_prewarmed_history_still_leaves_out_what_the_request_carries(
    acme_api: ApiClient, ids: Ids
) -> None:
    make_route(acme_api, [HISTORY])
    seed_user(acme_api, ids)
    prewarm(acme_api, ids.session, ids.user)
    report = resolve(acme_api, ids.user, ids.session, text="My order 1234 has not arrived.")
    assert prewarmed(report) == {"history"}
    text = context_text(report)
    assert "I am checking order 1234." in text and "user: My order 1234" not in text


def test_a_source_changed_after_the_prewarm_is_fetched(acme_api: ApiClient, ids: Ids) -> None:
    make_route(acme_api, [PROFILE, LIVE])
    seed_user(acme_api, ids)
    prewarm(acme_api, ids.session, ids.user)
    changed = {"name": "support", "context": {"sources": [{**PROFILE, "fields": ["tier"]}, LIVE]}}
    assert acme_api.put("/api/v1/routes/support", changed).status_code == 200
    assert prewarmed(resolve(acme_api, ids.user, ids.session)) == {"live"}


def test_a_failed_or_slow_prewarm_leaves_the_source_to_the_resolve(
    acme_api: ApiClient, ids: Ids
) -> None:
    failing = {**LIVE, "name": "down", "fail": True}
    slow = {**LIVE, "name": "slow", "sleep_ms": 400, "timeout_ms": 50}
    make_route(acme_api, [PROFILE, failing, slow])
    answer = prewarm(acme_api, ids.session, ids.user)
    lines = {line["name"]: line for line in answer["sources"]}
    assert lines["profile"]["status"] == "prewarmed"
    assert lines["down"]["status"] == "failed" and "live service is down" in lines["down"]["reason"]
    assert lines["slow"]["status"] == "timeout"
    report = resolve(acme_api, ids.user, ids.session)
    assert prewarmed(report) == {"profile"}
    sources = by_name(report)
    assert sources["down"]["status"] == "failed" and sources["slow"]["status"] == "timeout"


# --- invalidation ---------------------------------------------------------------------------------


def _profile_put(api: ApiClient, ids: Ids, memory: int, schema: str) -> None:
    assert (
        api.put(f"/api/v1/users/{ids.user}/profile", {"attributes": {"tier": "silver"}}).status_code
        == 200
    )


def _messages_posted(api: ApiClient, ids: Ids, memory: int, schema: str) -> None:
    body = {"user": ids.user, "messages": [{"role": "user", "content": "Any news?"}]}
    assert api.post(f"/api/v1/sessions/{ids.session}/messages", body).status_code == 201


def _memory_created(api: ApiClient, ids: Ids, memory: int, schema: str) -> None:
    add_memory(api, ids.user, "User prefers the aisle on trains.")


def _memory_edited(api: ApiClient, ids: Ids, memory: int, schema: str) -> None:
    path = f"/api/v1/users/{ids.user}/memories/{memory}"
    assert api.patch(path, {"content": "User prefers aisle seats now."}).status_code == 200


def _memory_deleted(api: ApiClient, ids: Ids, memory: int, schema: str) -> None:
    assert api.delete(f"/api/v1/users/{ids.user}/memories/{memory}").status_code in {200, 204}


def _memories_erased(api: ApiClient, ids: Ids, memory: int, schema: str) -> None:
    assert api.delete(f"/api/v1/users/{ids.user}/memories").status_code == 200


def _retention(api: ApiClient, ids: Ids, memory: int, schema: str) -> None:
    from memory.services import apply_retention

    with schema_context(schema):
        counts = apply_retention(max_age_days=None, max_per_user=1)
    assert counts["pruned"] >= 1


def _profile_saved_by_the_admin(api: ApiClient, ids: Ids, memory: int, schema: str) -> None:
    with schema_context(schema):  # what the admin's change form does: the model's own save
        profile = UserProfile.objects.get(user_id=ids.user)
        profile.attributes = {"tier": "bronze"}
        profile.save()


def _message_deleted_by_the_admin(api: ApiClient, ids: Ids, memory: int, schema: str) -> None:
    with schema_context(schema):
        message = ChatMessage.objects.filter(session__key=ids.session).order_by("-seq").first()
        assert message is not None
        message.delete()


Write = Callable[[ApiClient, Ids, int, str], None]
WRITES: dict[str, Write] = {
    "profile put": _profile_put,
    "session messages posted": _messages_posted,
    "memory created": _memory_created,
    "memory edited": _memory_edited,
    "memory deleted": _memory_deleted,
    "memories erased": _memories_erased,
    "retention": _retention,
    "profile saved by the admin": _profile_saved_by_the_admin,
    "message deleted by the admin": _message_deleted_by_the_admin,
}


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_a_write_to_what_the_prewarm_read_invalidates_it(
    acme: TenantFixture,
    acme_api: ApiClient,
    ids: Ids,
    write: Write,
    django_capture_on_commit_callbacks: Any,
) -> None:
    make_route(acme_api, [PROFILE, HISTORY, MEMORY, LIVE])
    seed_user(acme_api, ids)
    memory = add_memory(acme_api, ids.user, "User prefers window seats on flights.")
    add_memory(acme_api, ids.user, "User flies to Lisbon every month.")
    prewarm(acme_api, ids.session, ids.user)

    with django_capture_on_commit_callbacks(execute=True):
        write(acme_api, ids, memory, acme.schema)

    report = resolve(acme_api, ids.user, ids.session)
    assert prewarmed(report) == set()
    assert FETCHES[ids.user] == 2


def test_a_write_of_another_user_leaves_the_prewarm(
    acme_api: ApiClient, ids: Ids, django_capture_on_commit_callbacks: Any
) -> None:
    make_route(acme_api, [PROFILE, MEMORY, LIVE])
    seed_user(acme_api, ids)
    prewarm(acme_api, ids.session, ids.user)
    with django_capture_on_commit_callbacks(execute=True):
        assert (
            acme_api.put(f"/api/v1/users/{ids.other}/profile", {"attributes": {"a": 1}}).status_code
            == 200
        )
        add_memory(acme_api, ids.other, "Another user's memory.")
    assert prewarmed(resolve(acme_api, ids.user, ids.session)) == {"profile", "memories", "live"}


def test_the_resolve_writes_its_turn_so_the_one_after_fetches_again(
    acme_api: ApiClient, ids: Ids, django_capture_on_commit_callbacks: Any
) -> None:
    make_route(acme_api, [HISTORY, LIVE])
    seed_user(acme_api, ids)
    prewarm(acme_api, ids.session, ids.user)
    with django_capture_on_commit_callbacks(execute=True):
        first = resolve(acme_api, ids.user, ids.session, text="Where is it now?")
    assert prewarmed(first) == {"history", "live"}
    second = resolve(acme_api, ids.user, ids.session, text="And when will it come?")
    assert prewarmed(second) == set()
    assert "Where is it now?" in context_text(second)  # the turn the first resolve stored


def test_the_prewarm_expires_after_its_ttl(acme_api: ApiClient, ids: Ids, settings: Any) -> None:
    settings.CONTEXT_PREWARM_TTL_SECONDS = 0.2
    make_route(acme_api, [PROFILE, LIVE])
    seed_user(acme_api, ids)
    assert prewarm(acme_api, ids.session, ids.user)["ttl_seconds"] == 0.2
    time.sleep(0.5)
    assert prewarmed(resolve(acme_api, ids.user, ids.session)) == set()
    assert FETCHES[ids.user] == 2


# --- isolation ------------------------------------------------------------------------------------


def test_prewarmed_values_reach_neither_another_user_nor_another_session_nor_another_tenant(
    acme: TenantFixture, acme_api: ApiClient, globex_api: ApiClient, ids: Ids
) -> None:
    for api, tier in ((acme_api, "acme-gold"), (globex_api, "globex-tin")):
        make_route(api, [PROFILE, HISTORY, MEMORY, LIVE])
        seed_user(api, ids, tier=tier)
    add_memory(acme_api, ids.user, "User prefers window seats on flights.")
    assert (
        acme_api.put(
            f"/api/v1/users/{ids.other}/profile", {"attributes": {"tier": "other"}}
        ).status_code
        == 200
    )
    prewarm(acme_api, ids.session, ids.user)

    other_user = resolve(acme_api, ids.other, ids.session)
    assert prewarmed(other_user) == set()
    assert "acme-gold" not in context_text(other_user) and "window seats" not in context_text(
        other_user
    )
    assert '"tier": "other"' in context_text(other_user)

    assert prewarmed(resolve(acme_api, ids.user, ids.other_session)) == set()

    globex = resolve(globex_api, ids.user, ids.session)
    assert prewarmed(globex) == set()
    assert "globex-tin" in context_text(globex) and "acme-gold" not in context_text(globex)
    assert "window seats" not in context_text(globex)

    # The entry is checked against its own tenant, user and session, not only found by its key.
    entry = cache.get(entry_key(acme.schema, ids.user, ids.session))
    assert entry is not None and lookup(acme.schema, ids.user, ids.session)
    cache.set(entry_key(acme.schema, ids.other, ids.session), entry)
    cache.set(entry_key("globex", ids.user, ids.session), entry)
    assert lookup(acme.schema, ids.other, ids.session) == {}
    assert lookup("globex", ids.user, ids.session) == {}


# --- memory ---------------------------------------------------------------------------------------


def memory_items(report: dict[str, Any]) -> list[tuple[str, float | None]]:
    return [
        (item["title"] or "", item["score"])
        for item in report["items"]
        if item["source"] == "memories"
    ]


def test_memories_are_prewarmed_and_ranked_by_the_turns_query(
    acme: TenantFixture, acme_api: ApiClient, ids: Ids
) -> None:
    make_route(acme_api, [MEMORY])
    for content in (
        "User prefers window seats on flights.",
        "User's favourite colour is green.",
        "User flies to Lisbon every month.",
    ):
        add_memory(acme_api, ids.user, content)
    add_memory(acme_api, ids.other, "User prefers aisle seats on flights.")
    fetched = resolve(acme_api, ids.user, ids.other_session)
    assert prewarmed(fetched) == set()

    answer = prewarm(acme_api, ids.session, ids.user)
    assert [line["status"] for line in answer["sources"]] == ["prewarmed"]
    # Gone from the store behind the cache's back (a queryset delete: no invalidation), so what
    # the resolve injects can only come from the pre-warm.
    with schema_context(acme.schema):
        Memory.objects.filter(user_id=ids.user, content__contains="window").delete()
    served = resolve(acme_api, ids.user, ids.session)
    assert prewarmed(served) == {"memories"}
    source = by_name(served)["memories"]
    assert source["status"] == "ok" and source["notes"]["memory_status"] == "used"
    # The same memories, in the same order, with the same scores as the store's search.
    assert [c["memory_id"] for c in source["candidates"]] == [
        c["memory_id"] for c in by_name(fetched)["memories"]["candidates"]
    ]
    assert [round(c["recall_score"], 5) for c in source["candidates"]] == [
        round(c["recall_score"], 5) for c in by_name(fetched)["memories"]["candidates"]
    ]
    text = context_text(served)
    assert "window seats" in text and "aisle" not in text


def test_memory_is_not_prewarmed_with_hybrid_search_or_too_many_memories(
    acme_api: ApiClient, ids: Ids, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_route(acme_api, [{**MEMORY, "hybrid_search": True}, LIVE], name="hybrid")
    make_route(acme_api, [MEMORY, LIVE], name="plain")
    add_memory(acme_api, ids.user, "User prefers window seats on flights.")
    add_memory(acme_api, ids.user, "User flies to Lisbon every month.")

    line = prewarm(acme_api, ids.session, ids.user, route="hybrid")["sources"][0]
    assert line["status"] == "skipped" and "hybrid_search" in line["reason"]
    assert prewarmed(resolve(acme_api, ids.user, ids.session, route="hybrid")) == {"live"}

    monkeypatch.setattr("memory.prewarm.POOL_MAX", 1)
    line = prewarm(acme_api, ids.other_session, ids.user, route="plain")["sources"][0]
    assert line == {**line, "status": "skipped", "reason": "the user has more than 1 memories"}
    report = resolve(acme_api, ids.user, ids.other_session, route="plain")
    assert prewarmed(report) == {"live"}
    assert by_name(report)["memories"]["status"] == "ok"


# --- errors ---------------------------------------------------------------------------------------


def test_errors_come_in_the_envelope(acme_api: ApiClient, ids: Ids) -> None:
    make_route(acme_api, [PROFILE])
    unknown = acme_api.post(
        f"/api/v1/sessions/{ids.session}/prewarm", {"route": "nope", "user": "u"}
    )
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"
    assert unknown.json()["error"]["param"] == "route"

    missing = acme_api.post(f"/api/v1/sessions/{ids.session}/prewarm", {"route": "support"})
    assert missing.status_code == 400
    assert missing.json()["error"] == {
        **missing.json()["error"],
        "code": "invalid_request",
        "param": "user",
    }

    extra = acme_api.post(
        f"/api/v1/sessions/{ids.session}/prewarm", {"route": "support", "user": "u", "query": "x"}
    )
    assert extra.status_code == 400 and extra.json()["error"]["param"] == "query"


def test_the_prewarm_needs_the_resolve_scope(anonymous_api: ApiClient, ids: Ids) -> None:
    response = anonymous_api.post(
        f"/api/v1/sessions/{ids.session}/prewarm", {"route": "x", "user": "u"}
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
