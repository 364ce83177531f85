"""A resolve's sources with their result at hand (the route's fixed texts, the user's profile and
the session's turns, each one read of the tenant's database, a retrieval this process has cached)
answer on the request's thread: no trip to the event loop and back when all of them do, and a
report that says what a fetch on the loop would have said (its time from the read's start, a
failed read failed, a read past the deadline timed out, a cache hit with the recall's notes)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import sources.kinds.user_profile as user_profile
from tests.conftest import ApiClient
from tests.resolve.api.test_resolve import RULES, chat, items_of, make_route, resolved, source
from tests.sources.knowledge.conftest import SUPPORT_DOCS, make_collection
from tests.thread_trips import count_calls_to_the_loop, count_trips_to_a_thread

PROFILE = {"type": "user_profile", "name": "profile"}
HISTORY = {"type": "recent_messages", "name": "history"}
DOCS = {
    "type": "rag",
    "name": "docs",
    "backend": "vectorstore",
    "backend_config": {"collection": "kb"},
    "match": {"recall": {"top_k": 3, "min_similarity": 0.1}},
    "cache_results": True,
}
QUESTION = "How many days do I have to return a product for a refund?"


def test_a_resolve_whose_sources_are_at_hand_never_leaves_the_request_s_thread(
    acme_api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme_api.put("/api/v1/users/u_7/profile", {"attributes": {"plan": "gold"}})
    make_collection(acme_api, "kb", [dict(doc) for doc in SUPPORT_DOCS])
    make_route(acme_api, "at-hand", [RULES, PROFILE, HISTORY, DOCS])
    resolved(acme_api, "at-hand", chat("First question"), user="u_7", session="s_1")
    cached = resolved(acme_api, "at-hand", chat(QUESTION), user="u_7", session="s_1")
    assert source(cached, "docs")["notes"]["cache"] == "miss"
    sent_to_a_thread = count_trips_to_a_thread(monkeypatch)
    sent_to_the_loop = count_calls_to_the_loop(monkeypatch)
    report = resolved(acme_api, "at-hand", chat(QUESTION), user="u_7", session="s_1")
    assert [source(report, name)["status"] for name in ("rules", "profile", "history", "docs")] == [
        "ok"
    ] * 4
    injected = json.dumps(report["request"])
    assert '\\"plan\\": \\"gold\\"' in injected
    assert "user: First question" in injected  # from the session's store
    assert "30 days" in injected
    assert sent_to_a_thread == []
    assert sent_to_the_loop == []


def test_a_cache_hit_at_once_reports_what_the_fetch_would_and_a_miss_goes_to_the_loop(
    acme_api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_collection(acme_api, "kb", [dict(doc) for doc in SUPPORT_DOCS])
    make_route(acme_api, "cached", [RULES, DOCS])
    sent_to_the_loop = count_calls_to_the_loop(monkeypatch)
    first = resolved(acme_api, "cached", chat(QUESTION))
    assert sent_to_the_loop == ["fetch_all"]  # the retrieval, on the loop
    second = resolved(acme_api, "cached", chat(QUESTION))
    missed, hit = source(first, "docs"), source(second, "docs")
    assert sent_to_the_loop == ["fetch_all"]  # nothing more: the hit answered on the thread
    assert (missed["notes"]["cache"], hit["notes"]["cache"]) == ("miss", "hit")
    recall_notes = {key: value for key, value in hit["notes"].items() if key != "cache"}
    assert recall_notes  # what the recall ran with, as on the loop
    assert recall_notes.items() <= missed["notes"].items()
    assert hit["items"] == missed["items"] > 0
    assert items_of(second, "docs") == items_of(first, "docs")


def test_a_read_that_fails_fails_its_source_and_not_the_others(
    acme_api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(user_id: str) -> dict[str, Any] | None:
        raise RuntimeError("profile table unreadable")

    monkeypatch.setattr(user_profile, "user_attributes", broken)
    make_route(acme_api, "read-fails", [PROFILE, HISTORY])
    report = resolved(acme_api, "read-fails", user="u_7", session="s_2")
    failed = source(report, "profile")
    assert failed["status"] == "failed"
    assert failed["error"] == "RuntimeError: profile table unreadable"
    assert source(report, "history")["status"] == "empty"  # a new session: nothing stored yet


def test_a_read_that_ends_past_the_deadline_is_reported_timed_out_with_its_time(
    acme_api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def slow(user_id: str) -> dict[str, Any] | None:
        time.sleep(0.12)
        return {"plan": "gold"}

    monkeypatch.setattr(user_profile, "user_attributes", slow)
    make_route(acme_api, "read-late", [{**PROFILE, "timeout_ms": 50}])
    report = resolved(acme_api, "read-late", user="u_7")
    late = source(report, "profile")
    assert late["status"] == "timeout"
    assert late["error"] == "timed out after 50 ms"
    assert late["ms"] >= 120  # from the read's start, not from the fetch's
    assert "plan" not in json.dumps(report["request"])
