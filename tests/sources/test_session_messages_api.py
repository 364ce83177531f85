"""A session belongs to one user: ``GET /api/v1/sessions/{session}/messages`` lists it without
``?user=``. Two users naming the same session key keep separate sessions, so then the user must
be named, and neither ever sees the other's messages."""

from __future__ import annotations

from typing import Any

from tests.conftest import ApiClient


def post(api: ApiClient, session: str, user: str | None, text: str) -> None:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": text}]}
    if user is not None:
        body["user"] = user
    response = api.post(f"/api/v1/sessions/{session}/messages", body)
    assert response.status_code == 201, response.content


def listed(api: ApiClient, session: str, **params: str) -> Any:
    return api.get(f"/api/v1/sessions/{session}/messages", params)


def test_a_session_lists_without_naming_its_user(acme_api: ApiClient) -> None:
    post(acme_api, "s_1", "u_1", "Hello")
    response = listed(acme_api, "s_1")
    assert response.status_code == 200, response.content
    assert response.json()["user"] == "u_1"
    assert [m["content"] for m in response.json()["data"]] == ["Hello"]
    assert [m["content"] for m in listed(acme_api, "s_1", user="u_1").json()["data"]] == ["Hello"]
    # Naming another user finds that user's session of this key: none.
    assert listed(acme_api, "s_1", user="u_2").json()["data"] == []

    post(acme_api, "s_anon", None, "Anonymous hello")
    anonymous = listed(acme_api, "s_anon").json()
    assert anonymous["user"] is None
    assert [m["content"] for m in anonymous["data"]] == ["Anonymous hello"]

    assert listed(acme_api, "s_unknown").json()["data"] == []


def test_two_users_of_one_key_never_see_each_other(acme_api: ApiClient) -> None:
    post(acme_api, "shared", "u_1", "mine")
    post(acme_api, "shared", "u_2", "theirs")
    refused = listed(acme_api, "shared")
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "user"
    assert "mine" not in refused.content.decode() and "theirs" not in refused.content.decode()
    assert [m["content"] for m in listed(acme_api, "shared", user="u_1").json()["data"]] == ["mine"]
    assert [m["content"] for m in listed(acme_api, "shared", user="u_2").json()["data"]] == [
        "theirs"
    ]


def test_another_tenant_never_lists_the_session(acme_api: ApiClient, globex_api: ApiClient) -> None:
    post(acme_api, "s_1", "u_1", "acme only")
    for params in ({}, {"user": "u_1"}):
        response = listed(globex_api, "s_1", **params)
        assert response.status_code == 200
        assert response.json()["data"] == []
        assert "acme only" not in response.content.decode()


def test_a_message_without_content_is_stored_not_a_server_error(acme_api: ApiClient) -> None:
    # An assistant turn that only called tools has content null in OpenAI's shape.
    response = acme_api.post(
        "/api/v1/sessions/s_tools/messages",
        {"user": "u_1", "messages": [{"role": "assistant", "content": None}]},
    )
    assert response.status_code == 201, response.content
    listed_back = listed(acme_api, "s_tools").json()["data"]
    assert [(m["role"], m["content"]) for m in listed_back] == [("assistant", "")]


def test_a_listing_posts_back_as_the_same_messages(
    acme_api: ApiClient, globex_api: ApiClient
) -> None:
    post(acme_api, "s_copy", "u_1", "First")
    post(acme_api, "s_copy", "u_1", "Second")
    listing = listed(acme_api, "s_copy").json()
    for api in (acme_api, globex_api):  # another session of this tenant, and another tenant
        copied = api.post("/api/v1/sessions/s_copied/messages", listing)
        assert copied.status_code == 201, copied.content
        again = listed(api, "s_copied").json()
        assert again["user"] == "u_1"
        assert [(m["role"], m["content"], m["seq"]) for m in again["data"]] == [
            ("user", "First", 1),
            ("user", "Second", 2),
        ]
    misspelt = acme_api.post("/api/v1/sessions/s_x/messages", {**listing, "colour": "red"})
    assert misspelt.status_code == 400 and misspelt.json()["error"]["param"] == "colour"
