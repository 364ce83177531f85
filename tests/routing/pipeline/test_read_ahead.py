"""Sources whose fetch is one read of the tenant's database (the user's profile, the session's
turns) are read on the request's thread before the other sources are fetched: no trip from the
event loop to that thread and back for them, and a report that says what their fetch would have
said (its time from the read's start, a failed read failed, a read past the deadline timed out)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import sources.kinds.user_profile as user_profile
from tests.conftest import ApiClient
from tests.routing.api.test_resolve import chat, make_route, resolved, source
from tests.thread_trips import count_trips_to_a_thread

PROFILE = {"type": "user_profile", "name": "profile"}
HISTORY = {"type": "recent_messages", "name": "history"}


def test_the_profile_and_the_session_are_read_without_a_trip_from_the_event_loop(
    acme_api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme_api.put("/api/v1/users/u_7/profile", {"attributes": {"plan": "gold"}})
    make_route(acme_api, "read-ahead", [PROFILE, HISTORY])
    resolved(acme_api, "read-ahead", chat("First question"), user="u_7", session="s_1")
    sent_to_a_thread = count_trips_to_a_thread(monkeypatch)
    report = resolved(acme_api, "read-ahead", chat("Second question"), user="u_7", session="s_1")
    assert source(report, "profile")["status"] == "ok"
    assert source(report, "history")["status"] == "ok"
    injected = json.dumps(report["request"])
    assert '\\"plan\\": \\"gold\\"' in injected
    assert "user: First question" in injected
    assert sent_to_a_thread == []


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
