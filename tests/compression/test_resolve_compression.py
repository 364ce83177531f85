"""Compression inside resolve and the management API, end to end on real PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

from django_tenants.utils import schema_context

from compression.models import RecoveryBlob
from contextplatform.replay.models import ReplayRecord
from tests.compression.conversations import (
    LOG,
    REFUND_LINE,
    conversation,
    file_read,
    service_log,
)
from tests.conftest import ApiClient


def route(name: str = "c", window: int = 16000, **compress: Any) -> dict[str, Any]:
    return {
        "name": name,
        "model": {"context_window": window},
        "context": {"compress": compress or {"mode": "auto"}},
    }


def resolve(api: ApiClient, body: dict[str, Any], route_name: str = "c", **headers: str) -> Any:
    return api.post(
        "/api/v1/resolve", {"route": route_name, "user": "u1", "request": body}, headers=headers
    )


def test_a_large_tool_output_is_compressed_and_reported_without_text(
    acme_api: ApiClient, acme: Any
) -> None:
    assert acme_api.post("/api/v1/routes", route()).status_code == 201
    response = resolve(acme_api, conversation())
    assert response.status_code == 200, response.content
    report = response.json()
    compression = report["compression"]
    assert compression["applied"] is True and compression["quality"] in {
        "budget_met",
        "budget_partial",
    }
    assert compression["tokens_after"] < compression["tokens_before"]
    assert compression["blocks"][0]["kind"] == "tool_output"
    messages = report["request"]["messages"]
    assert (
        messages[3]["tool_call_id"] == "call_1" and messages[2]["tool_calls"][0]["id"] == "call_1"
    )
    assert "answered 500" in messages[3]["content"]  # the line that answers the question survives
    assert "[... context omitted by route compression ...]" in messages[3]["content"]
    assert (
        messages[0] == conversation()["messages"][0]
        and messages[4] == conversation()["messages"][4]
    )
    assert "log line" not in json.dumps(compression)
    with schema_context(acme.schema):
        record = ReplayRecord.objects.get(pk=report["id"])
    assert record.compression["applied"] is True and "log line" not in json.dumps(
        record.compression
    )


def test_the_line_about_the_question_survives_60_tokens_and_its_score_is_reported(
    acme_api: ApiClient, acme: Any
) -> None:
    # Issue 13: a 240-line tool output read by a call that names only a file, one line about the
    # user's question, compressed to 60 tokens by the route's compress block.
    targets = {"tool_outputs": {"mode": "extractive", "min_tokens": 100, "target_tokens": 60}}
    assert acme_api.post("/api/v1/routes", route(targets=targets)).status_code == 201
    response = resolve(acme_api, file_read(service_log()))
    assert response.status_code == 200, response.content
    report = response.json()
    [block] = report["compression"]["blocks"]
    assert block["kind"] == "tool_output" and block["final_tokens"] <= 60
    assert block["score"] > 0
    assert REFUND_LINE in report["request"]["messages"][3]["content"].split("\n")
    with schema_context(acme.schema):
        record = ReplayRecord.objects.get(pk=report["id"])
    assert record.compression["blocks"][0]["score"] == block["score"]
    preview = acme_api.post(
        "/api/v1/plugins/context/compression/preview",
        {"route": "c", "request_body": file_read(service_log())},
    )
    assert preview.status_code == 200, preview.content
    assert preview.json()["blocks"][0]["score"] == block["score"]


def test_protected_content_that_cannot_fit_is_refused_untouched(
    acme_api: ApiClient, acme: Any
) -> None:
    assert acme_api.post("/api/v1/routes", route(window=2000)).status_code == 201
    response = resolve(acme_api, conversation(tool_output="short", system="rule " * 3000))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    with schema_context(acme.schema):
        assert not ReplayRecord.objects.filter(route="c").exists()


def test_without_compress_an_oversized_request_is_refused(acme_api: ApiClient) -> None:
    assert (
        acme_api.post(
            "/api/v1/routes", {"name": "plain", "model": {"context_window": 4000}}
        ).status_code
        == 201
    )
    response = resolve(acme_api, conversation(), route_name="plain")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


def test_request_controls_are_honoured_only_when_allowed(acme_api: ApiClient) -> None:
    controls = {"enabled": True, "allowed": ["bypass"]}
    assert (
        acme_api.post(
            "/api/v1/routes", route(window=200_000, mode="always", request_controls=controls)
        ).status_code
        == 201
    )
    bypassed = resolve(acme_api, conversation(), **{"x-vsr-compression-control": "bypass"}).json()
    assert bypassed["compression"]["skip_reason"] == "bypassed"
    assert bypassed["request"]["messages"][3]["content"] == LOG
    target_only = resolve(
        acme_api, conversation(), **{"x-vsr-compression-control": "target=500"}
    ).json()
    assert (
        target_only["compression"]["applied"] is True
    )  # target is not allowed: ignored, always mode still compresses


def test_recoverable_originals_come_back_only_to_their_request(
    acme_api: ApiClient, globex_api: ApiClient
) -> None:
    targets = {"tool_outputs": {"mode": "recoverable", "min_tokens": 2000, "target_tokens": 800}}
    assert acme_api.post("/api/v1/routes", route(targets=targets)).status_code == 201
    report = resolve(acme_api, conversation()).json()
    assert report["compression"]["recovery_keys"] == 1
    tools = report["request"]["tools"]
    retrieve_tool = next(t for t in tools if t["function"]["name"] == "vsr_context_retrieve")
    key = retrieve_tool["function"]["parameters"]["properties"]["key"]["enum"][0]
    assert key not in json.dumps(report["compression"])
    body = {"request_id": report["id"], "key": key, "route": "c", "user": "u1"}
    got = acme_api.post("/api/v1/storage/context-recovery/retrieve", body)
    assert got.status_code == 200 and got.json()["content"] == LOG
    assert (
        acme_api.post(
            "/api/v1/storage/context-recovery/retrieve", {**body, "user": "u2"}
        ).status_code
        == 404
    )
    assert globex_api.post("/api/v1/storage/context-recovery/retrieve", body).status_code == 404


def test_a_clashing_retrieve_tool_fails_open_or_closed(acme_api: ApiClient) -> None:
    targets = {"tool_outputs": {"mode": "recoverable", "min_tokens": 2000, "target_tokens": 800}}
    body = conversation()
    body["tools"] = [
        {"type": "function", "function": {"name": "vsr_context_retrieve", "parameters": {}}}
    ]
    assert (
        acme_api.post("/api/v1/routes", route("open", window=200_000, targets=targets)).status_code
        == 201
    )
    opened = resolve(acme_api, body, route_name="open").json()
    assert opened["compression"]["skip_reason"] == "compression_failed"
    assert opened["request"]["messages"][3]["content"] == LOG
    closed_route = route("closed", window=200_000, targets=targets, failure_mode="fail_closed")
    assert acme_api.post("/api/v1/routes", closed_route).status_code == 201
    closed = resolve(acme_api, body, route_name="closed")
    assert closed.status_code == 500 and closed.json()["error"]["code"] == "compression_failed"


def test_stats_count_requests_and_savings(acme_api: ApiClient) -> None:
    assert acme_api.post("/api/v1/routes", route()).status_code == 201
    before = acme_api.get("/api/v1/observability/plugins/context/compression/stats").json()
    resolve(acme_api, conversation())
    after = acme_api.get("/api/v1/observability/plugins/context/compression/stats").json()
    assert after["requests"] == before["requests"] + 1 and after["applied"] == before["applied"] + 1
    assert after["tokens_saved"] > before["tokens_saved"]


def test_preview_returns_plans_never_text_and_is_audited(acme_api: ApiClient, acme: Any) -> None:
    assert acme_api.post("/api/v1/routes", route()).status_code == 201
    response = acme_api.post(
        "/api/v1/plugins/context/compression/preview",
        {"route": "c", "request_body": conversation()},
    )
    assert response.status_code == 200, response.content
    preview = response.json()
    assert preview["valid"] and preview["applied"] and preview["tokens_saved"] > 0
    assert preview["blocks"][0]["message_index"] == 3
    assert "log line" not in json.dumps(preview)
    inline = acme_api.post(
        "/api/v1/plugins/context/compression/preview",
        {
            "configuration": {"targets": {"history": {"mode": "banana"}}},
            "request_body": conversation(),
        },
    )
    assert inline.status_code == 400 and inline.json()["error"]["param"].startswith(
        "configuration.targets.history"
    )
    judge_note = "preview ranks segments with BM25 only; the relevance judge is not called"
    for match, noted in (
        ({}, True),
        ({"judge": {}}, True),
        ({"recall": {"method": "bm25"}}, False),
    ):
        previewed = acme_api.post(
            "/api/v1/plugins/context/compression/preview",
            {"configuration": {"match": match}, "request_body": conversation()},
        )
        assert previewed.status_code == 200, previewed.content
        assert (judge_note in previewed.json()["warnings"]) is noted, match
    stats = acme_api.get("/api/v1/observability/plugins/context/compression/stats").json()
    assert (
        stats["audit"][-1]["action"] == "compression.preview"
        and stats["audit_chain_intact"] is True
    )
    with schema_context(acme.schema):
        assert not RecoveryBlob.objects.exists()


def test_compress_config_is_validated(acme_api: ApiClient) -> None:
    bad = route(
        targets={"tool_outputs": {"mode": "extractive", "min_tokens": 100, "target_tokens": 200}}
    )
    response = acme_api.post("/api/v1/routes", bad)
    assert response.status_code == 400
    assert "target_tokens must be lower than min_tokens" in response.json()["error"]["message"]
    assert (
        acme_api.post(
            "/api/v1/routes", route(targets={"history": {"mode": "truncate"}})
        ).status_code
        == 400
    )
    # Signals are the defaults' or a recipe's (read before a route is chosen): a route refuses them.
    refused = acme_api.post("/api/v1/routes", route(name="ok", signals={"profile": "multi-turn"}))
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["param"] == "context.compress.signals" and "tenant defaults" in error["message"]
    assert acme_api.get("/api/v1/routes/ok").status_code == 404


def test_preview_takes_the_plugins_whole_configuration(acme_api: ApiClient) -> None:
    """The seed's plugin ``configuration`` (``enabled`` first, then sources, compress, budget,
    injection) is what an operator pastes: it was refused at ``configuration.enabled``."""
    compress = {
        "mode": "always",
        "targets": {
            "tool_outputs": {"mode": "extractive", "min_tokens": 200, "target_tokens": 100}
        },
        "failure_mode": "fail_open",
    }
    plugin = {
        "enabled": True,
        "sources": [{"type": "memory", "store": {"auto": True}}],
        "compress": compress,
        "budget": {"max_tokens": "auto", "reserve_output_tokens": "auto"},
        "injection": {"mode": "tool_role"},
    }

    def preview(configuration: dict[str, Any]) -> dict[str, Any]:
        response = acme_api.post(
            "/api/v1/plugins/context/compression/preview",
            {"configuration": configuration, "request_body": conversation()},
        )
        assert response.status_code == 200, response.content
        return response.json()

    whole, block = preview(plugin), preview(compress)
    assert whole["applied"] is True and whole["tokens_saved"] > 0
    assert (whole["tokens_after"], whole["blocks"]) == (block["tokens_after"], block["blocks"])
    # enabled: false turns the plugin off: nothing is compressed, and the answer says why.
    off = preview({**plugin, "enabled": False})
    assert (off["applied"], off["skip_reason"], off["tokens_saved"]) == (False, "disabled", 0)
    assert any("configuration.enabled is false" in w for w in off["warnings"])
    without = preview({"enabled": True, "sources": plugin["sources"]})
    assert (without["applied"], without["skip_reason"]) == (False, "not_configured")
    # A plugin configuration is validated as one, naming the field.
    refused = acme_api.post(
        "/api/v1/plugins/context/compression/preview",
        {"configuration": {"enabled": True, "mode": "always"}, "request_body": conversation()},
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "configuration.mode"
