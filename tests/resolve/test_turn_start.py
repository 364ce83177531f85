"""The turn's start (the request's latest user message into its session, unless the session ends
with it) reads the session's latest message; a resolve whose history source has just read the
session's turns on the same thread is answered from that read, with no statement of its own."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import ApiClient
from tests.resolve.api.test_resolve import RULES, chat, make_route, resolved, source

HISTORY = {"type": "recent_messages", "name": "history"}
LATEST_TURN = "ORDER BY m.seq DESC LIMIT 1"


def stored_texts(api: ApiClient, session: str, user: str) -> list[str]:
    response = api.get(f"/api/v1/sessions/{session}/messages", {"user": user})
    assert response.status_code == 200, response.content
    return [message["content"] for message in response.json()["data"]]


def resolved_counting(api: ApiClient, route: str, text: str, **extra: Any) -> tuple[Any, int]:
    with CaptureQueriesContext(connection) as captured:
        report = resolved(api, route, chat(text), **extra)
    return report, sum(LATEST_TURN in query["sql"] for query in captured.captured_queries)


def test_with_a_history_source_the_turn_start_reads_nothing_more(acme_api: ApiClient) -> None:
    make_route(acme_api, "with-history", [RULES, HISTORY])
    _, reads = resolved_counting(acme_api, "with-history", "Hello", user="u_1", session="s_1")
    assert reads == 0
    again, reads = resolved_counting(acme_api, "with-history", "Hello", user="u_1", session="s_1")
    assert reads == 0
    assert source(again, "history")["status"] == "empty"  # its one turn is the request's own
    assert stored_texts(acme_api, "s_1", "u_1") == ["Hello"]  # not stored twice
    resolved(acme_api, "with-history", chat("And then?"), user="u_1", session="s_1")
    assert stored_texts(acme_api, "s_1", "u_1") == ["Hello", "And then?"]


def test_without_one_the_turn_start_reads_the_latest_message_itself(acme_api: ApiClient) -> None:
    make_route(acme_api, "no-history", [RULES])
    _, reads = resolved_counting(acme_api, "no-history", "Hello", user="u_1", session="s_2")
    assert reads == 1
    _, reads = resolved_counting(acme_api, "no-history", "Hello", user="u_1", session="s_2")
    assert reads == 1
    assert stored_texts(acme_api, "s_2", "u_1") == ["Hello"]


def test_another_user_s_session_of_the_same_key_is_not_answered_from_the_read(
    acme_api: ApiClient,
) -> None:
    make_route(acme_api, "shared-key", [RULES, HISTORY])
    resolved(acme_api, "shared-key", chat("Mine"), user="u_1", session="s_3")
    resolved(acme_api, "shared-key", chat("Mine"), user="u_2", session="s_3")
    assert stored_texts(acme_api, "s_3", "u_1") == ["Mine"]
    assert stored_texts(acme_api, "s_3", "u_2") == ["Mine"]
