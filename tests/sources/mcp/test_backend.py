"""The ``mcp`` RAG backend against a real MCP server (the SDK's, over Streamable HTTP on loopback),
through POST /api/v1/resolve: the tool called with the query, documents read from structured
content or text blocks, the match block as for every backend, and a tool error, a slow tool, an
unknown server as failed retrievals under ``on_failure``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import ApiClient, TenantFixture
from tests.sources.mcp.conftest import create_route, register, resolve, source_of
from tests.sources.mcp.server import RunningMcpServer

QUESTION = "can I get a refund for my headphones?"
RECALL = {"recall": {"top_k": 10, "min_similarity": 0.3}}


def mcp_route(name: str, config: dict[str, Any], **source: Any) -> dict[str, Any]:
    source.setdefault("timeout_ms", 10_000)
    source.setdefault("match", RECALL)
    return {
        "name": name,
        "context": {
            "sources": [
                {
                    "type": "rag",
                    "name": "kb",
                    "backend": "mcp",
                    "backend_config": {"server_name": "crm", **config},
                    **source,
                }
            ],
            "injection": {"mode": "system_prompt"},
        },
    }


def kept(source: dict[str, Any]) -> list[str]:
    return [c["document_id"] for c in source["candidates"] if c["kept"]]


def prompt(report: dict[str, Any]) -> str:
    first = report["request"]["messages"][0]
    return first["content"] if first["role"] == "system" else ""


@pytest.fixture
def crm(acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer) -> None:
    register(acme_api, mcp_server.url, headers={"Authorization": "Bearer kb"})


def test_structured_documents_are_recalled_with_the_tools_scores(
    crm: None, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    create_route(acme_api, mcp_route("kb", {"tool_name": "search"}))
    report = resolve(acme_api, "kb", QUESTION)
    source = source_of(report, "kb")
    assert source["status"] == "ok", source
    # shipping scores 0.12, under min_similarity 0.3
    assert kept(source) == ["refund", "warranty"]
    assert [c["recall_score"] for c in source["candidates"]] == [0.92, 0.61]
    assert "[Document: Refund policy] Refunds within 30 days." in prompt(report)
    # The default tool_arguments: the latest user message as the query, nothing else.
    assert mcp_server.recorder.calls == [("search", {"query": QUESTION, "top_k": 5})]
    assert all(seen["authorization"] == "Bearer kb" for seen in mcp_server.recorder.headers)


def test_tool_arguments_are_filled_in(
    crm: None, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    arguments = {"query": "${user_content}", "top_k": "${top_k}"}
    create_route(acme_api, mcp_route("kb", {"tool_name": "search", "tool_arguments": arguments}))
    source = source_of(resolve(acme_api, "kb", QUESTION), "kb")
    assert source["status"] == "ok"
    assert mcp_server.recorder.calls == [("search", {"query": QUESTION, "top_k": 10})]


def test_an_object_holding_the_documents_is_read(crm: None, acme_api: ApiClient) -> None:
    create_route(acme_api, mcp_route("kb", {"tool_name": "search_wrapped"}))
    source = source_of(resolve(acme_api, "kb", QUESTION), "kb")
    assert kept(source) == ["refund", "warranty"]


def test_text_blocks_are_documents_without_structured_content(
    crm: None, acme_api: ApiClient
) -> None:
    create_route(acme_api, mcp_route("kb", {"tool_name": "search_text"}))
    report = resolve(acme_api, "kb", QUESTION)
    source = source_of(report, "kb")
    assert kept(source) == ["0", "1"]
    assert [c["recall_score"] for c in source["candidates"]] == [1.0, 1.0]  # no score: 1
    assert f"First passage about {QUESTION}." in prompt(report)


def test_the_match_block_runs_as_for_every_backend(crm: None, acme_api: ApiClient) -> None:
    match = {**RECALL, "judge": {"deployment": "local", "top_k": 1, "min_score": 0.0}}
    create_route(acme_api, mcp_route("kb", {"tool_name": "search"}, match=match))
    source = source_of(resolve(acme_api, "kb", QUESTION), "kb")
    assert source["notes"]["judge"] == "local" and source["notes"]["judged"] is True
    assert len(kept(source)) == 1
    assert all(c["judge_score"] is not None for c in source["candidates"])


def test_a_tool_error_is_a_failed_retrieval_under_on_failure(
    crm: None, acme_api: ApiClient
) -> None:
    create_route(acme_api, mcp_route("kb", {"tool_name": "broken"}))
    report = resolve(acme_api, "kb", QUESTION)  # skip: the request goes on without documents
    source = source_of(report, "kb")
    assert (source["status"], source["on_failure"]) == ("failed", "skip")
    assert "BackendError" in source["error"] and "the index is rebuilding" in source["error"]
    assert prompt(report) == ""

    create_route(acme_api, mcp_route("kb-block", {"tool_name": "broken"}, on_failure="block"))
    refused = resolve(acme_api, "kb-block", QUESTION, expect=503)
    assert refused["error"]["code"] == "source_failed"


def test_a_slow_tool_past_the_source_deadline_reports_timeout(
    crm: None, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    create_route(acme_api, mcp_route("kb", {"tool_name": "slow"}, timeout_ms=500))
    source = source_of(resolve(acme_api, "kb", QUESTION), "kb")
    assert source["status"] == "timeout", source
    assert [name for name, _ in mcp_server.recorder.calls] == ["slow"]


def test_the_servers_own_timeout_reports_timeout_too(
    acme_loopback: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url, timeout_ms=300)
    create_route(acme_api, mcp_route("kb", {"tool_name": "slow"}, timeout_ms=10_000))
    source = source_of(resolve(acme_api, "kb", QUESTION), "kb")
    assert source["status"] == "timeout"
    assert "did not answer within 300 ms" in source["error"]


def test_an_unknown_server_or_tool_fails_the_retrieval(crm: None, acme_api: ApiClient) -> None:
    create_route(acme_api, mcp_route("kb", {"tool_name": "search", "server_name": "nowhere"}))
    source = source_of(resolve(acme_api, "kb", QUESTION), "kb")
    assert source["status"] == "failed" and "no MCP server named 'nowhere'" in source["error"]

    create_route(acme_api, mcp_route("kb-tool", {"tool_name": "no_such_tool"}))
    tool = source_of(resolve(acme_api, "kb-tool", QUESTION), "kb")
    assert tool["status"] == "failed" and "no_such_tool" in tool["error"]


def test_the_allowlist_refuses_loopback_until_it_names_it(
    acme: TenantFixture, acme_api: ApiClient, mcp_server: RunningMcpServer
) -> None:
    register(acme_api, mcp_server.url)
    create_route(acme_api, mcp_route("kb", {"tool_name": "search"}))
    source = source_of(resolve(acme_api, "kb", QUESTION), "kb")
    assert source["status"] == "failed" and "refused" in source["error"]
    assert mcp_server.recorder.headers == []


def test_a_hybrid_falls_back_from_a_failing_tool(crm: None, acme_api: ApiClient) -> None:
    hybrid = {
        "primary": {
            "backend": "mcp",
            "backend_config": {"server_name": "crm", "tool_name": "broken"},
        },
        "fallback": {
            "backend": "mcp",
            "backend_config": {"server_name": "crm", "tool_name": "search"},
        },
    }
    route = mcp_route("kb", {})
    route["context"]["sources"][0].update(backend="hybrid", backend_config=hybrid)
    create_route(acme_api, route)
    source = source_of(resolve(acme_api, "kb", QUESTION), "kb")
    assert source["status"] == "ok" and source["notes"]["served_by"] == "fallback"
    assert "the index is rebuilding" in source["notes"]["primary_error"]
    assert kept(source) == ["refund", "warranty"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"backend_config": {"server_name": "crm"}}, "tool_name: field required"),
        ({"backend_config": {"server_name": "bad name", "tool_name": "t"}}, "server_name"),
        ({"backend_config": {"server_name": "crm", "tool_name": "t", "endpoint": "x"}}, "unknown"),
        ({"match": {"recall": {"method": "bm25"}}}, "recalls by embedding"),
    ],
)
def test_the_backend_config_is_checked_when_the_route_is_written(
    acme: TenantFixture, acme_api: ApiClient, change: dict[str, Any], message: str
) -> None:
    route = mcp_route("kb", {"tool_name": "search"})
    route["context"]["sources"][0].update(change)
    response = acme_api.post("/api/v1/routes", route)
    assert response.status_code == 400, response.content
    assert message in response.json()["error"]["message"], response.json()
