"""The ``mcp_resources`` source against a real MCP server (the SDK's, over Streamable HTTP on
loopback), through POST /api/v1/resolve: resources and templates read, values URL-encoded, users
kept apart, contents capped, header values sent but never shown, the allow-list, failures and the
deadline."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sources.mcp.client import remembered
from tests.conftest import ApiClient, TenantFixture
from tests.loopback import outbound_allowlist
from tests.sources.mcp.conftest import (
    HEADER_SECRET,
    create_route,
    register,
    resolve,
    resources_route,
    source_of,
)
from tests.sources.mcp.server import CUSTOMERS, HUGE_BYTES, LARGE_CHARS, RunningMcpServer


def system_prompt(report: dict[str, Any]) -> str:
    first = report["request"]["messages"][0]
    return first["content"] if first["role"] == "system" else ""


def items_of(report: dict[str, Any], name: str = "crm") -> list[dict[str, Any]]:
    return [item for item in report["items"] if item["source"] == name]


# --- reading -----------------------------------------------------------------------------------


def test_resources_and_templates_are_read_each_content_an_item_cited_by_its_uri(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    create_route(
        acme_api,
        resources_route(
            "crm-route",
            ["crm://customers/{user}", "crm://status", "crm://sessions/{session}/notes"],
        ),
    )
    report = resolve(acme_api, "crm-route", user="u_alice", session="s-42")
    source = source_of(report)
    assert (source["status"], source["items"], source["error"]) == ("ok", 3, None)
    assert source["notes"]["read"] == 3 and source["notes"]["transport"] == "http"
    assert [c["uri"] for c in source["candidates"]] == [
        "crm://customers/u_alice",
        "crm://status",
        "crm://sessions/s-42/notes",
    ]
    # Read at once, on one connection: the server may see them in any order.
    assert sorted(mcp_server.recorder.reads) == [
        "crm://customers/u_alice",
        "crm://sessions/s-42/notes",
        "crm://status",
    ]
    prompt = system_prompt(report)
    # JSON contents compacted; each item cites its URI in front, as a rag document its title.
    customer = json.dumps({"user": "u_alice", **CUSTOMERS["u_alice"]}, separators=(",", ":"))
    assert f"[Resource: crm://customers/u_alice] {customer}" in prompt
    assert "[Resource: crm://status] All systems green." in prompt
    assert "[Resource: crm://sessions/s-42/notes] Notes of session s-42" in prompt
    titles = sorted(item["title"] for item in items_of(report))
    assert titles == ["crm://customers/u_alice", "crm://sessions/s-42/notes", "crm://status"]


def test_filled_values_are_url_encoded_whole(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    create_route(
        acme_api, resources_route("encoded", ["crm://customers/{user}", "crm://search/{query}"])
    )
    report = resolve(acme_api, "encoded", "refund & returns?", user="u a/b")
    source = source_of(report)
    assert source["status"] == "ok", source
    # The slash of the user id stays inside its segment: the server's template matched it whole.
    assert [c["uri"] for c in source["candidates"]] == [
        "crm://customers/u%20a%2Fb",
        "crm://search/refund%20%26%20returns%3F",
    ]
    prompt = system_prompt(report)
    assert '"name":"Slash"' in prompt
    assert "Results for refund & returns?" in prompt


def test_a_template_needing_a_user_is_skipped_without_one_never_read_for_another(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    create_route(acme_api, resources_route("users", ["crm://customers/{user}", "crm://status"]))

    anonymous = source_of(resolve(acme_api, "users"))
    assert anonymous["status"] == "ok" and anonymous["items"] == 1
    assert anonymous["notes"]["skipped"] == [
        {"resource": "crm://customers/{user}", "reason": "needs {user}: the request has no user"}
    ]
    assert mcp_server.recorder.reads == ["crm://status"]  # no customer resource was asked for

    mcp_server.recorder.clear()
    bob = resolve(acme_api, "users", user="u_bob")
    assert '"name":"Bob"' in system_prompt(bob) and "Alice" not in system_prompt(bob)
    assert sorted(mcp_server.recorder.reads) == ["crm://customers/u_bob", "crm://status"]

    mcp_server.recorder.clear()
    alice = resolve(acme_api, "users", user="u_alice")
    assert '"name":"Alice"' in system_prompt(alice) and "Bob" not in system_prompt(alice)
    assert "crm://customers/u_bob" not in mcp_server.recorder.reads


def test_only_templates_needing_what_is_missing_are_skipped(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    create_route(acme_api, resources_route("sessions", ["crm://sessions/{session}/notes"]))
    source = source_of(resolve(acme_api, "sessions", user="u_alice"))
    assert source["status"] == "empty"
    assert source["notes"]["skipped"][0]["reason"] == "needs {session}: the request has no session"
    assert mcp_server.recorder.reads == [] and mcp_server.recorder.headers == []  # not connected


def test_blob_contents_are_skipped_with_a_note(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    create_route(acme_api, resources_route("blobs", ["crm://logo", "crm://status"]))
    source = source_of(resolve(acme_api, "blobs"))
    assert source["status"] == "ok" and source["items"] == 1
    assert source["notes"]["blobs_skipped"] == ["crm://logo"]


def test_contents_are_capped_per_resource_and_in_total(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    create_route(
        acme_api,
        resources_route(
            "capped",
            ["crm://large", "crm://customers/{user}", "crm://status"],
            max_resource_chars=1000,
            max_total_chars=1050,
        ),
    )
    report = resolve(acme_api, "capped", user="u_alice")
    source = source_of(report)
    assert source["status"] == "ok"
    assert [i["title"] for i in items_of(report)] == ["crm://large", "crm://customers/u_alice"]
    prompt = system_prompt(report)
    # Cut at 1000 characters, the mark included.
    assert "[Resource: crm://large] " + "L" * 999 + "…" in prompt
    assert "L" * 1000 not in prompt and LARGE_CHARS > 1000
    # 1000 characters used: the customer (64 as compact JSON) gets the 50 left, the status none.
    assert source["notes"]["truncated"] == ["crm://large", "crm://customers/u_alice"]
    assert source["notes"]["over_total_chars"] == ["crm://status"]
    assert source["items"] == 2


def test_an_answer_past_the_response_cap_fails_the_source(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    create_route(acme_api, resources_route("huge", ["crm://huge"]))  # 5 MiB, over the 4 MiB cap
    source = source_of(resolve(acme_api, "huge"))
    assert source["status"] == "failed"
    assert "more than the 4194304" in source["error"], source["error"]
    assert HUGE_BYTES > 4 * 1024 * 1024
    create_route(
        acme_api,
        resources_route("huge-allowed", ["crm://huge"], max_response_bytes=8 * 1024 * 1024),
    )
    allowed = source_of(resolve(acme_api, "huge-allowed"))
    assert allowed["status"] == "ok" and allowed["notes"]["truncated"] == ["crm://huge"]


# --- headers -----------------------------------------------------------------------------------


def test_header_values_are_sent_on_every_request_but_never_shown(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url, headers={"Authorization": HEADER_SECRET, "X-Tenant": "t1"})
    create_route(acme_api, resources_route("secret", ["crm://status"]))
    report = resolve(acme_api, "secret")
    assert source_of(report)["status"] == "ok"
    assert mcp_server.recorder.headers, "the server saw no request"
    for seen in mcp_server.recorder.headers:
        assert seen["authorization"] == HEADER_SECRET and seen["x-tenant"] == "t1"
    record = acme_api.get(f"/api/v1/replay/{report['id']}")
    assert record.status_code == 200
    for shown in (json.dumps(report), record.content.decode()):
        assert "crm-secret" not in shown


# --- failures ----------------------------------------------------------------------------------


def test_the_allowlist_refuses_loopback_until_it_names_it(
    acme: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    create_route(acme_api, resources_route("guarded", ["crm://status"]))
    refused = source_of(resolve(acme_api, "guarded"))
    assert refused["status"] == "failed"
    assert "refused" in refused["error"] and "loopback" in refused["error"]
    assert "allow-list" in refused["error"]
    assert mcp_server.recorder.headers == []  # nothing reached the server
    with outbound_allowlist(acme.schema, ["127.0.0.1"]):
        assert source_of(resolve(acme_api, "guarded"))["status"] == "ok"


def test_an_unknown_resource_fails_the_source_under_on_failure(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    create_route(acme_api, resources_route("unknown", ["crm://customers/{user}", "crm://status"]))
    skipped = resolve(acme_api, "unknown", user="u_nobody")
    source = source_of(skipped)
    assert (source["status"], source["on_failure"]) == ("failed", "skip")
    assert "could not read crm://customers/u_nobody" in source["error"]
    assert "no customer u_nobody" in source["error"]
    assert system_prompt(skipped) == ""  # nothing half-read is injected

    create_route(
        acme_api,
        resources_route("unknown-block", ["crm://customers/{user}"], on_failure="block"),
    )
    refused = resolve(acme_api, "unknown-block", user="u_nobody", expect=503)
    assert refused["error"]["code"] == "source_failed"


def test_an_unknown_server_fails_the_source(
    acme_loopback: TenantFixture, acme_api: ApiClient
) -> None:
    create_route(acme_api, resources_route("nowhere", ["crm://status"], server="missing"))
    source = source_of(resolve(acme_api, "nowhere"))
    assert source["status"] == "failed"
    assert "no MCP server named 'missing'" in source["error"]


def test_an_unreachable_server_fails_the_source(
    acme_loopback: TenantFixture, acme_api: ApiClient
) -> None:
    register(acme_api, "http://127.0.0.1:9/mcp")  # discard port: nothing listens
    create_route(acme_api, resources_route("down", ["crm://status"]))
    source = source_of(resolve(acme_api, "down"))
    assert source["status"] == "failed" and "unreachable" in source["error"]
    assert remembered("acme/crm/http://127.0.0.1:9/mcp") is None


def test_a_slow_resource_past_the_source_deadline_reports_timeout(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    create_route(acme_api, resources_route("slow", ["crm://slow"], timeout_ms=400))
    source = source_of(resolve(acme_api, "slow"))
    assert source["status"] == "timeout"
    assert source["notes"] == {"server": "crm"}


def test_the_servers_own_timeout_cuts_the_read_and_reports_timeout(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url, timeout_ms=300)
    create_route(acme_api, resources_route("slow-server", ["crm://slow"], timeout_ms=10_000))
    source = source_of(resolve(acme_api, "slow-server"))
    assert source["status"] == "timeout"
    assert "did not answer within 300 ms" in source["error"]


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ([], "at least 1 item"),
        (["status"], "needs a scheme"),
        (["crm://customers/{tenant}"], "{tenant} is not filled in"),
        (["crm://customers/{user"], "unmatched brace"),
        (["crm://a b"], "spaces"),
        (["crm://status", "crm://status"], "named twice"),
    ],
)
def test_resources_are_checked_when_the_route_is_written(
    acme: TenantFixture, acme_api: ApiClient, resources: list[str], message: str
) -> None:
    response = acme_api.post("/api/v1/routes", resources_route("bad", resources))
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert message in error["message"], error
    assert error["param"].startswith("context.sources[0].resources")


def test_a_change_to_the_server_applies_to_the_next_fetch(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url, headers={"Authorization": "Bearer first"})
    create_route(acme_api, resources_route("changing", ["crm://status"]))
    assert source_of(resolve(acme_api, "changing"))["status"] == "ok"
    assert {seen["authorization"] for seen in mcp_server.recorder.headers} == {"Bearer first"}

    mcp_server.recorder.clear()
    changed = acme_api.put(
        "/api/v1/mcp-servers/crm",
        {"url": mcp_server.url, "headers": {"Authorization": "Bearer second"}},
    )
    assert changed.status_code == 200
    assert source_of(resolve(acme_api, "changing"))["status"] == "ok"
    assert {seen["authorization"] for seen in mcp_server.recorder.headers} == {"Bearer second"}

    assert acme_api.delete("/api/v1/mcp-servers/crm").status_code == 204
    gone = source_of(resolve(acme_api, "changing"))
    assert gone["status"] == "failed" and "no MCP server named 'crm'" in gone["error"]
