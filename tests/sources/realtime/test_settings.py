"""A ``realtime_apis`` source is checked when the route is written: templates in the host are
refused, as are unknown fields, a GET with a body, a path the selector cannot read, twice the
same connector name; the error names the connector's field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import ApiClient
from tests.sources.realtime.conftest import live_route

GOOD = {"name": "balance", "url": "https://bank.example/accounts/{user}/balance"}


@pytest.mark.parametrize(
    ("change", "param", "said"),
    [
        ({"url": "https://{user}.bank.example/balance"}, "url", "a template in the host"),
        ({"url": "https://bank.example:{user}/"}, "url", "a template in the host"),
        ({"url": "https://{user}@bank.example/"}, "url", "a template in the host"),
        ({"url": "{user}"}, "url", "must start with http:// or https://"),
        ({"url": "file:///etc/{user}"}, "url", "must start with http:// or https://"),
        ({"url": "https://bank.example/{account}"}, "url", "unknown template field {account}"),
        ({"url": "https://bank.example/{user!r}"}, "url", "unknown template field"),
        ({"url": "https://bank.example/{user"}, "url", "literal braces"),
        ({"url": "https://bank.example/x#{user}"}, "url", "no #fragment"),
        ({"headers": {"Host": "evil.example"}}, "headers", "set by the platform"),
        ({"headers": {"Bad Name": "x"}}, "headers", "not a valid header name"),
        ({"headers": {"X-A": "{password}"}}, "headers", "unknown template field {password}"),
        ({"body": {"q": "{query}"}}, "connectors[0]", "a GET connector sends no body"),
        ({"method": "POST", "body": ["{nope}"]}, "connectors[0]", "unknown template field"),
        ({"method": "DELETE"}, "method", "'GET' or 'POST'"),
        ({"select": "accounts[*]"}, "select", "starts with $"),
        ({"select": "$.accounts[?(@.x)]"}, "select", "cannot read"),
        ({"cache_ttl_seconds": -1}, "cache_ttl_seconds", "greater than or equal to 0"),
        ({"max_response_bytes": 5 * 1024 * 1024}, "max_response_bytes", "less than or equal"),
    ],
)
def test_a_bad_connector_is_refused_naming_its_field(
    acme_api: ApiClient, change: dict[str, Any], param: str, said: str
) -> None:
    response = acme_api.post("/api/v1/routes", live_route({**GOOD, **change}))
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["param"].startswith("context.sources[0].connectors[0]"), error
    assert param in error["param"] or param in error["message"], error
    assert said in error["message"], error


def test_connector_names_are_unique_and_there_is_at_least_one(acme_api: ApiClient) -> None:
    twice = acme_api.post("/api/v1/routes", live_route(GOOD, {**GOOD, "url": "https://b.example/"}))
    assert twice.status_code == 400
    assert "balance named more than once" in twice.json()["error"]["message"]
    none = acme_api.post("/api/v1/routes", live_route())
    assert none.status_code == 400
    assert "connectors" in none.json()["error"]["param"]


def test_a_good_source_is_stored_as_written_and_exported(acme_api: ApiClient) -> None:
    connector = {
        **GOOD,
        "method": "post",
        "url": "https://bank.example/accounts/{user}/balance?s={session}&q={query}&lit={{x}}",
        "headers": {"Authorization": "Bearer token", "X-User": "{user}"},
        "body": {"user": "{user}", "n": 1},
        "select": "$.accounts[*]",
        "timeout_ms": 300,
        "cache_ttl_seconds": 5,
    }
    response = acme_api.post("/api/v1/routes", live_route(connector))
    assert response.status_code == 201, response.content
    stored = acme_api.get("/api/v1/routes/r").json()
    [source] = stored["context"]["sources"]
    assert source["type"] == "realtime_apis"
    assert source["connectors"][0]["url"] == connector["url"]
