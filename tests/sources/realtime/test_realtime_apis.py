"""The ``realtime_apis`` source against live HTTP services on loopback, through resolve: templates
and their encoding, the JSON path, connectors in parallel within the deadline, slow, failing,
oversized and redirecting services, the outbound guard, and the per-user cache (never across
users, sessions or tenants)."""

from __future__ import annotations

import json
import threading
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from tests.conftest import ApiClient, TenantFixture
from tests.loopback import Reply, Seen, Service, json_reply, outbound_allowlist
from tests.sources.realtime.conftest import create, live_route, live_source, resolve, system_prompt

ACCOUNTS = {"accounts": [{"id": "acc-1", "balance": 120.5}, {"id": "acc-2", "balance": 3}]}
AWKWARD_USER = "ann/../admin?x=1#frag %41"  # a path, a query, a fragment, a space, an escape


def balance(service: Service, **fields: Any) -> dict[str, Any]:
    return {
        "name": "balance",
        "url": service.url("/accounts/{user}/balance"),
        "select": "$.accounts[*]",
        **fields,
    }


def statuses(source: dict[str, Any]) -> dict[str, str]:
    return {name: note["status"] for name, note in source["notes"]["connectors"].items()}


# --- templates ------------------------------------------------------------------------------------


def test_a_user_id_is_one_encoded_path_segment_never_more(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer(ACCOUNTS)
    create(acme_api, live_route(balance(service)))
    source = live_source(resolve(acme_api, user=AWKWARD_USER))
    assert source["status"] == "ok", source
    [seen] = service.requests
    assert seen.method == "GET"
    path = urlsplit(seen.path)
    assert path.query == "" and "#" not in seen.path
    prefix, encoded, suffix = path.path.split("/")[1:]
    assert (prefix, suffix) == ("accounts", "balance")
    assert unquote(encoded) == AWKWARD_USER
    assert "/" not in encoded and "?" not in encoded and " " not in encoded


def test_query_values_headers_and_body_are_filled_in_each_in_its_own_way(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer({"ok": True})
    question = 'rates for "EUR" & USD? 100%'
    connector = {
        "name": "rates",
        "method": "POST",
        "url": service.url("/rates?user={user}&q={query}&fixed=1"),
        "headers": {"X-User": "user {user}", "X-Session": "{session}"},
        "body": {"who": "{user}", "ask": ["{query}", 7, None], "{user}": "keys stay as written"},
        "select": "$",
    }
    create(acme_api, live_route(connector))
    user = 'ann "the \\ admin"&x=1'
    source = live_source(resolve(acme_api, user=user, session="s/9", question=question))
    assert source["status"] == "ok", source
    [seen] = service.requests
    assert seen.method == "POST"
    query = parse_qs(urlsplit(seen.path).query)
    assert query == {"user": [user], "q": [question], "fixed": ["1"]}
    assert seen.headers["x-user"] == f"user {user}"
    assert seen.headers["x-session"] == "s/9"
    assert seen.headers["accept"] == "application/json"
    assert seen.json == {"who": user, "ask": [question, 7, None], "{user}": "keys stay as written"}


def test_a_value_that_cannot_be_placed_fails_that_connector_only(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer(ACCOUNTS)
    header = {"name": "profile", "url": service.url("/p"), "headers": {"X-User": "{user}"}}
    path = balance(service, name="path")
    create(acme_api, live_route(header, path))
    source = live_source(resolve(acme_api, user=".."))  # a dot segment in the path
    assert statuses(source) == {"profile": "ok", "path": "failed"}
    assert ". or .." in source["notes"]["connectors"]["path"]["error"]
    assert service.paths == ["/p"]


def test_a_connector_needing_a_value_the_request_lacks_is_skipped(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer(ACCOUNTS)
    plain = {"name": "status", "url": service.url("/status")}
    create(acme_api, live_route(balance(service), plain))
    source = live_source(resolve(acme_api, user=None))
    assert source["status"] == "ok"
    assert statuses(source) == {"balance": "skipped", "status": "ok"}
    assert "needs {user}" in source["notes"]["connectors"]["balance"]["error"]
    assert service.paths == ["/status"]


# --- the JSON path and the items ------------------------------------------------------------------


def test_each_selected_value_is_an_item_naming_its_connector(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer(ACCOUNTS)
    create(acme_api, live_route(balance(service), priority=75))
    report = resolve(acme_api)
    source = live_source(report)
    assert (source["status"], source["items"], source["kept"]) == ("ok", 2, 2)
    items = [item for item in report["items"] if item["source"] == "live"]
    assert [(item["title"], item["priority"]) for item in items] == [("balance", 75)] * 2
    prompt = system_prompt(report)
    assert '<context source="live">\n[balance] {"id": "acc-1", "balance": 120.5}' in prompt
    assert '[balance] {"id": "acc-2", "balance": 3}' in prompt


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        ("$", [json.dumps(ACCOUNTS)]),
        ("$.accounts[0].balance", ["120.5"]),
        ("$.accounts[-1].id", ["acc-2"]),
        ("$.accounts[*].id", ["acc-1", "acc-2"]),
        ("$.missing[*]", []),
    ],
)
def test_the_select_path_maps_the_answer(
    allow_acme: None, acme_api: ApiClient, service: Service, select: str, expected: list[str]
) -> None:
    service.answer(ACCOUNTS)
    create(acme_api, live_route(balance(service, select=select)))
    report = resolve(acme_api)
    source = live_source(report)
    assert source["status"] == ("ok" if expected else "empty")
    assert source["notes"]["connectors"]["balance"]["items"] == len(expected)
    for text in expected:
        assert f"[balance] {text}" in system_prompt(report)


def test_max_items_caps_a_long_answer(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer({"accounts": [{"id": n} for n in range(50)]})
    create(acme_api, live_route(balance(service, max_items=3)))
    assert live_source(resolve(acme_api))["items"] == 3


# --- in parallel, within the deadline; slow, failing, oversized, redirecting -------------------------


def test_connectors_run_at_once(
    allow_acme: None, acme_api: ApiClient, service: Service, other_service: Service
) -> None:
    """Each service answers only once the other has been asked: only concurrent calls finish."""
    asked = {"first": threading.Event(), "second": threading.Event()}

    def waiting_for(mine: str, theirs: str) -> Any:
        def respond(seen: Seen) -> Reply:
            asked[mine].set()
            met = asked[theirs].wait(3)
            return json_reply({"value": mine if met else "alone"})

        return respond

    service.responder = waiting_for("first", "second")
    other_service.responder = waiting_for("second", "first")
    create(
        acme_api,
        live_route(
            {"name": "first", "url": service.url("/a"), "select": "$.value"},
            {"name": "second", "url": other_service.url("/b"), "select": "$.value"},
        ),
    )
    prompt = system_prompt(resolve(acme_api))
    assert "[first] first" in prompt and "[second] second" in prompt


def test_a_slow_connector_is_a_note_and_the_others_still_count(
    allow_acme: None, acme_api: ApiClient, service: Service, other_service: Service
) -> None:
    service.answer(ACCOUNTS)
    other_service.responder = lambda seen: json_reply({"rate": 1.1}, delay_s=5)
    slow = {"name": "rates", "url": other_service.url("/rates"), "timeout_ms": 200}
    create(acme_api, live_route(balance(service), slow, timeout_ms=3000))
    report = resolve(acme_api)
    source = live_source(report)
    assert source["status"] == "ok" and source["items"] == 2
    assert statuses(source) == {"balance": "ok", "rates": "timeout"}
    assert source["notes"]["failed"] == ["rates"]
    assert "timed out after 200 ms" in source["notes"]["connectors"]["rates"]["error"]
    assert source["ms"] < 3000  # the slow connector's own timeout, not the source's, ended it


def test_connectors_that_outlast_the_source_deadline_time_the_source_out(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.responder = lambda seen: json_reply(ACCOUNTS, delay_s=5)
    create(acme_api, live_route(balance(service), timeout_ms=300))
    source = live_source(resolve(acme_api))
    assert source["status"] == "timeout", source
    assert source["ms"] < 300 + 100
    assert "source's deadline" in source["error"]


def test_the_connectors_that_made_the_deadline_are_kept(
    allow_acme: None, acme_api: ApiClient, service: Service, other_service: Service
) -> None:
    service.answer(ACCOUNTS)
    other_service.responder = lambda seen: json_reply({}, delay_s=5)
    hanging = {"name": "hanging", "url": other_service.url("/x")}  # no timeout of its own
    create(acme_api, live_route(balance(service), hanging, timeout_ms=400))
    source = live_source(resolve(acme_api))
    assert source["status"] == "ok" and source["items"] == 2
    assert statuses(source) == {"balance": "ok", "hanging": "timeout"}
    assert source["ms"] < 400 + 100


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (json_reply({"error": "down"}, status=500), "answered HTTP 500"),
        (Reply(body=b"<html>not json</html>", headers={"Content-Type": "text/html"}), "not JSON"),
        (json_reply({"blob": "x" * 5000}), "more than 1000"),
        (json_reply({"blob": "x" * 5000}, chunked=True), "more than 1000"),
    ],
    ids=["http-500", "not-json", "oversized", "oversized-chunked"],
)
def test_a_failing_connector_is_a_note_and_the_others_still_count(
    allow_acme: None,
    acme_api: ApiClient,
    service: Service,
    other_service: Service,
    reply: Reply,
    said: str,
) -> None:
    service.answer(ACCOUNTS)
    other_service.responder = lambda seen: reply
    broken = {"name": "broken", "url": other_service.url("/x"), "max_response_bytes": 1000}
    create(acme_api, live_route(balance(service), broken))
    source = live_source(resolve(acme_api))
    assert source["status"] == "ok" and source["items"] == 2
    assert statuses(source) == {"balance": "ok", "broken": "failed"}
    assert said in source["notes"]["connectors"]["broken"]["error"]


def test_every_connector_failing_fails_the_source_by_its_on_failure(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer({"error": "down"}, status=503)
    create(acme_api, live_route(balance(service)))
    source = live_source(resolve(acme_api))
    assert source["status"] == "failed"
    assert "every connector failed: balance: answered HTTP 503" in source["error"]
    assert source["notes"]["connectors"]["balance"]["status"] == "failed"

    create(acme_api, live_route(balance(service), name="strict", on_failure="block"))
    refused = resolve(acme_api, route="strict", status=503)
    assert refused["error"]["code"] == "source_failed"
    assert "'live' failed" in refused["error"]["message"]


def test_every_connector_timing_out_times_the_source_out(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.responder = lambda seen: json_reply(ACCOUNTS, delay_s=5)
    create(acme_api, live_route(balance(service, timeout_ms=200), timeout_ms=3000))
    source = live_source(resolve(acme_api))
    assert source["status"] == "timeout"
    assert "timed out after 200 ms" in source["error"]


def test_the_user_id_never_reaches_an_error_message(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer({"error": "no such account"}, status=404)
    create(acme_api, live_route(balance(service)))
    source = live_source(resolve(acme_api, user="secret-user-42"))
    assert source["status"] == "failed"
    assert "secret-user-42" not in json.dumps(source)


@pytest.mark.parametrize(
    "location", ["http://10.0.0.1/steal", "http://169.254.169.254/latest/meta-data/"]
)
def test_a_redirect_to_a_private_address_is_refused(
    allow_acme: None, acme_api: ApiClient, service: Service, location: str
) -> None:
    service.responder = lambda seen: Reply(status=302, body=b"", headers={"Location": location})
    create(acme_api, live_route(balance(service)))
    source = live_source(resolve(acme_api))
    assert source["status"] == "failed"
    error = source["notes"]["connectors"]["balance"]["error"]
    assert "refused" in error and "allow-list" in error
    assert service.hits == 1  # the first hop only


def test_a_redirect_within_the_allow_list_is_followed(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    def respond(seen: Seen) -> Reply:
        if seen.path.startswith("/accounts/"):
            return Reply(status=307, body=b"", headers={"Location": "/v2/balance"})
        return json_reply(ACCOUNTS)

    service.responder = respond
    create(acme_api, live_route(balance(service)))
    assert live_source(resolve(acme_api))["items"] == 2
    assert service.paths == ["/accounts/u_1/balance", "/v2/balance"]


def test_loopback_is_refused_until_the_allow_list_names_it(
    acme: TenantFixture, acme_api: ApiClient, service: Service
) -> None:
    service.answer(ACCOUNTS)
    create(acme_api, live_route(balance(service)))
    refused = live_source(resolve(acme_api))
    assert refused["status"] == "failed" and "loopback" in refused["error"]
    assert service.hits == 0
    with outbound_allowlist(acme.schema, ["127.0.0.1"]):
        assert live_source(resolve(acme_api))["status"] == "ok"
    assert service.hits == 1


# --- the per-user cache ------------------------------------------------------------------------------


def counting(service: Service) -> None:
    """The n-th request is answered with the value n."""
    service.responder = lambda seen: json_reply({"value": service.hits})


def cached_route(service: Service, ttl: int = 60) -> dict[str, Any]:
    return live_route(balance(service, select="$.value", cache_ttl_seconds=ttl))


def value_of(report: dict[str, Any]) -> str:
    return system_prompt(report).split("[balance] ")[1].split("\n")[0]


def test_a_second_resolve_within_the_ttl_does_not_ask_the_service_again(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    counting(service)
    create(acme_api, cached_route(service))
    first, second = resolve(acme_api), resolve(acme_api)
    assert value_of(first) == value_of(second) == "1"
    assert live_source(first)["notes"]["connectors"]["balance"]["cache"] == "miss"
    assert live_source(second)["notes"]["connectors"]["balance"]["cache"] == "hit"
    assert service.hits == 1


def test_the_cache_is_per_user_and_per_session(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    counting(service)
    create(acme_api, cached_route(service))
    assert value_of(resolve(acme_api, user="ann")) == "1"
    assert value_of(resolve(acme_api, user="bob")) == "2"  # another user: asked again
    assert value_of(resolve(acme_api, user="ann", session="s_2")) == "3"  # another session
    assert value_of(resolve(acme_api, user="ann")) == "1"
    assert value_of(resolve(acme_api, user="bob")) == "2"
    assert service.hits == 3


def test_the_cache_never_crosses_tenants(
    acme: TenantFixture,
    globex: TenantFixture,
    acme_api: ApiClient,
    globex_api: ApiClient,
    service: Service,
) -> None:
    counting(service)
    create(acme_api, cached_route(service))
    create(globex_api, cached_route(service))  # the very same route, user and session
    with (
        outbound_allowlist(acme.schema, ["127.0.0.1"]),
        outbound_allowlist(globex.schema, ["127.0.0.1"]),
    ):
        assert value_of(resolve(acme_api)) == "1"
        other = resolve(globex_api)
        assert value_of(other) == "2"
        assert live_source(other)["notes"]["connectors"]["balance"]["cache"] == "miss"
        assert value_of(resolve(globex_api)) == value_of(resolve(globex_api)) == "2"
        assert value_of(resolve(acme_api)) == "1"
    assert service.hits == 2


def test_a_ttl_of_zero_caches_nothing(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    counting(service)
    create(acme_api, cached_route(service, ttl=0))
    assert [value_of(resolve(acme_api)) for _ in range(2)] == ["1", "2"]
    assert "cache" not in live_source(resolve(acme_api))["notes"]["connectors"]["balance"]
    assert service.hits == 3


def test_a_failed_call_is_never_cached(
    allow_acme: None, acme_api: ApiClient, service: Service
) -> None:
    service.answer_in_turn(json_reply({}, status=500), json_reply({"value": "fresh"}))
    create(acme_api, cached_route(service))
    assert live_source(resolve(acme_api))["status"] == "failed"
    assert value_of(resolve(acme_api)) == value_of(resolve(acme_api)) == "fresh"
    assert service.hits == 2
