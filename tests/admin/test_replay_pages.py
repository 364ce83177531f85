"""The auditors' replay pages: filters and search on the list, tables on the detail page."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from django_tenants.utils import schema_context

from contextplatform.replay.admin.presentation import cell, messages_table, replay_sections
from contextplatform.replay.models import ReplayRecord
from tests.admin.conftest import ACME_HOST, make_user, signed_in
from tests.conftest import ApiClient, admin_object_url
from tests.resolve import source_kinds_for_tests  # noqa: F401  (registers test_sleep)

RULES = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}
LIST = "/admin/routing/replayrecord/"


@pytest.fixture
def auditor(acme: Any) -> Client:
    make_user(acme.tenant, "audra", "auditor")
    return signed_in("audra", ACME_HOST)


def record(record_id: str, **fields: Any) -> ReplayRecord:
    values = {
        "route": "support",
        "status": "ok",
        "format": "openai",
        "created_at": timezone.now(),
        "duration_ms": 1.0,
        **fields,
    }
    with schema_context("acme"):
        return ReplayRecord.objects.create(id=record_id, **values)


def listed(client: Client, **params: str) -> list[str]:
    response = client.get(LIST, params)
    assert response.status_code == 200, response.status_code
    return sorted(r.id for r in response.context["cl"].result_list)


def test_the_list_filters_by_route_user_status_and_time_and_searches(auditor: Client) -> None:
    record("rsv_a", route="support", user_id="u1", created_at=datetime(2026, 1, 5, 10, tzinfo=UTC))
    record(
        "rsv_b",
        route="billing",
        user_id="u2",
        status="partial",
        created_at=datetime(2026, 1, 6, 12, tzinfo=UTC),
    )
    record(
        "rsv_c",
        route="support",
        user_id="u2",
        status="refused",
        session_key="s_77",
        created_at=datetime(2026, 2, 1, 8, tzinfo=UTC),
    )
    assert listed(auditor) == ["rsv_a", "rsv_b", "rsv_c"]
    assert listed(auditor, route="support") == ["rsv_a", "rsv_c"]
    assert listed(auditor, user="u2") == ["rsv_b", "rsv_c"]
    assert listed(auditor, user="u") == []  # an exact user id, not a prefix
    assert listed(auditor, status__exact="partial") == ["rsv_b"]
    assert listed(auditor, **{"from": "2026-01-06"}) == ["rsv_b", "rsv_c"]
    assert listed(auditor, to="2026-01-06") == ["rsv_a", "rsv_b"]  # a bare date: the whole day
    assert listed(auditor, **{"from": "2026-01-05T11:00:00Z", "to": "2026-01-06T12:00:00Z"}) == [
        "rsv_b"
    ]
    assert listed(auditor, created_at__year="2026", created_at__month="2") == ["rsv_c"]
    assert listed(auditor, q="s_77") == ["rsv_c"]
    assert listed(auditor, route="support", user="u2", status__exact="refused") == ["rsv_c"]
    page = auditor.get(LIST, {"user": "u2"}).content.decode()
    assert 'name="user" value="u2"' in page  # the sidebar shows the filter in use
    assert auditor.get(LIST, {"from": "last week"}).status_code == 302  # Django's ?e=1 page


def test_the_detail_page_shows_sources_items_and_decisions_as_tables(
    auditor: Client, acme_api: ApiClient
) -> None:
    route = {
        "name": "audited",
        "context": {
            "sources": [
                RULES,
                {"type": "test_sleep", "name": "facts", "items": ["short fact", "x" * 1000]},
                {"type": "test_sleep", "name": "wobbly", "fail": True, "on_failure": "warn"},
            ],
            "budget": {"context_tokens": 60},
        },
    }
    assert acme_api.post("/api/v1/routes", route).status_code == 201
    chat = {"model": "m", "messages": [{"role": "user", "content": "Where is my parcel?"}]}
    resolved = acme_api.post("/api/v1/resolve", {"route": "audited", "request": chat, "user": "u9"})
    assert resolved.status_code == 200, resolved.content
    replay_id = resolved.json()["id"]

    response = auditor.get(admin_object_url(ReplayRecord, replay_id))
    assert response.status_code == 200
    tables = {table.title: table for table in response.context["replay"]["tables"]}
    sources = {
        row[0]: dict(zip(tables["Sources"].columns, row, strict=True))
        for row in tables["Sources"].rows
    }
    assert sources["wobbly"]["status"] == "failed"
    assert "failed on purpose" in sources["wobbly"]["error"]
    assert sources["facts"]["status"] == "ok" and sources["facts"]["kept"] == "1"
    assert float(sources["facts"]["ms"]) >= 0
    items = [dict(zip(tables["Items"].columns, row, strict=True)) for row in tables["Items"].rows]
    decisions = sorted((i["source"], i["decision"], i["reason"]) for i in items)
    assert decisions == [
        ("facts", "dropped", "over the budget"),
        ("facts", "kept", "kept"),
        ("rules", "kept", "kept"),
    ]
    assert ["context budget", "60"] in tables["Budget"].rows
    assert [row[0] for row in tables["Tokens"].rows] == [
        "tokens before",
        "tokens after",
        "counted by",
        "count is",
    ]
    assert tables["Compression"].rows  # the stage's report, even when it did nothing

    html = response.content.decode()
    assert "<td>dropped</td>" in html and "<td>over the budget</td>" in html
    assert "failed on purpose" in html
    assert "No content captured" in html and "Where is my parcel?" not in html
    # Words, not the record's keys, and no raw JSON beside the tables.
    assert "Raw JSON" not in html and "over_budget" not in html and "skip_reason" not in html
    assert "why not applied" in html
    assert 'name="_save"' not in html and "/delete/" not in html


def test_captured_content_and_candidates_are_tables_too(auditor: Client) -> None:
    candidates = [
        {
            "document_id": "refunds",
            "recall_score": 0.81,
            "judge_score": 0.9,
            "kept": True,
            "reason": "kept",
        },
        {
            "document_id": "shipping",
            "recall_score": 0.4,
            "judge_score": 0.1,
            "kept": False,
            "reason": "below_threshold",
        },
    ]
    record(
        "rsv_captured",
        sources=[
            {
                "name": "kb",
                "type": "rag",
                "status": "ok",
                "items": 1,
                "kept": 1,
                "ms": 12.5,
                "candidates": candidates,
                "notes": {"cache": "miss"},
            }
        ],
        request_body={"messages": [{"role": "user", "content": "Can I get a refund?"}]},
        response_body={
            "choices": [{"message": {"role": "assistant", "content": "Yes, in 5 days."}}]
        },
        compression={
            "applied": True,
            "tokens_before": 900,
            "tokens_after": 400,
            "blocks": [{"kind": "history", "mode": "extractive", "final_tokens": 120}],
        },
    )
    response = auditor.get(admin_object_url(ReplayRecord, "rsv_captured"))
    replay = response.context["replay"]
    tables = {table.title: table for table in replay["tables"]}
    kb = tables["Candidates of kb (rag)"]
    assert kb.columns == ["document", "recall score", "judge score", "decision", "reason"]
    assert kb.rows[1] == ["shipping", "0.4", "0.1", "dropped", "below the threshold"]
    assert tables["Compressed blocks"].rows == [["history", "extractive", "120"]]
    assert dict(tables["Sources"].rows and [("notes", tables["Sources"].rows[0][8])]) == {
        "notes": "cache: miss"
    }
    bodies = {table.title: table.rows for table in replay["bodies"]}
    assert bodies["Request (captured)"] == [["user", "Can I get a refund?"]]
    assert bodies["Response (captured)"] == [["assistant", "Yes, in 5 days."]]
    assert "Rewritten request (captured)" not in bodies
    html = response.content.decode()
    assert "<td>Can I get a refund?</td>" in html and "No content captured" not in html


def test_presentation_of_odd_values() -> None:
    assert cell(None) == cell("") == "—"
    assert cell(True) == "yes" and cell(2.0) == "2" and cell(0.123456) == "0.1235"
    assert cell({"a": 1, "b": None}) == "a: 1; b: —"
    anthropic = {
        "system": "Be brief.",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi"}, {"type": "image", "source": {}}],
            }
        ],
    }
    table = messages_table("Request", anthropic)
    assert table is not None
    assert table.rows == [["system", "Be brief."], ["user", 'hi\n{"type": "image", "source": {}}']]
    assert messages_table("Request", None) is None
    assert messages_table("Request", ["odd"]).columns == ["body"]  # type: ignore[union-attr]


def test_sections_of_an_empty_record() -> None:
    empty = ReplayRecord(id="rsv_x", route="r", status="ok", format="openai", duration_ms=0)
    sections = replay_sections(empty)
    assert [t.title for t in sections["tables"]] == [
        "Summary",
        "Sources",
        "Items",
        "Budget",
        "Tokens",
        "Usage and cost",
        "Compression",
    ]
    assert sections["bodies"] == [] and "raw" not in sections


def test_served_tool_calls_have_a_table() -> None:
    record = ReplayRecord(
        id="rsv_t",
        route="r",
        status="ok",
        format="openai",
        duration_ms=0,
        tool_calls=[
            {
                "tool": "vsr_context_retrieve",
                "round": 1,
                "status": "served",
                "key": "k",
                "bytes": 9,
            },
            {"tool": "search_docs", "round": 2, "status": "ok", "source": "docs", "items": 2},
        ],
    )
    (table,) = [t for t in replay_sections(record)["tables"] if t.title == "Served tool calls"]
    assert table.columns[:4] == ["round", "tool", "source", "status"]
    assert table.rows[0][:4] == ["1", "vsr_context_retrieve", "—", "served"]
    assert table.rows[1][:4] == ["2", "search_docs", "docs", "ok"]


def test_the_list_names_each_outcome_and_only_failures_as_failed(auditor: Client) -> None:
    record(
        "rsv_outcomes",
        sources=[
            {"name": "rules", "status": "ok"},
            {"name": "mem", "status": "empty"},
            {"name": "kb", "status": "timeout"},
            {"name": "live", "status": "skipped"},
        ],
        items=[{"kept": True}, {"kept": False}],
        tokens={"before": 1200, "after": 800},
    )
    record("rsv_all_ok", sources=[{"name": "rules", "status": "ok"}])
    html = auditor.get(LIST).content.decode()
    assert "4 sources; timeout: kb; empty: mem; skipped: live" in html
    assert "failed: mem" not in html
    assert "1 source, all ok" in html
    assert "routing/replay_admin.css" in html  # the count columns do not wrap
    detail = auditor.get(admin_object_url(ReplayRecord, "rsv_outcomes"))
    sources = detail.context["replay"]["tables"][1]
    assert sources.row_classes == ["", "", "replay-failed", ""]


def test_a_record_is_linked_and_opened_by_its_id_as_the_api_shows_it(auditor: Client) -> None:
    replay_id = "rsv_6b0eefede6b332d92c8da224"  # "_6b" is what the admin's quoting would escape
    record(replay_id)
    html = auditor.get(LIST).content.decode()
    assert f'href="/admin/routing/replayrecord/{replay_id}/change/"' in html
    assert "rsv_5F" not in html
    page = auditor.get(f"/admin/routing/replayrecord/{replay_id}/change/")
    assert page.status_code == 200
    assert page.context["original"].id == replay_id
    assert auditor.get(admin_object_url(ReplayRecord, replay_id)).status_code == 200  # quoted too


def test_the_detail_page_shows_what_a_deployment_judge_cost(auditor: Client) -> None:
    usage = {"calls": 2, "input_tokens": 412, "output_tokens": 9, "cost_usd": None}
    notes = {"judge": "deployment:fast", "judge_fallback": False, "judge_usage": usage}
    local = {"judge": "local", "judge_fallback": False}
    record(
        "rsv_judge_cost",
        sources=[
            {"name": "mem", "type": "memory", "status": "ok", "notes": notes},
            {"name": "kb", "type": "rag", "status": "ok", "notes": local},
        ],
    )
    response = auditor.get(admin_object_url(ReplayRecord, "rsv_judge_cost"))
    assert response.status_code == 200
    tables = {table.title: table for table in response.context["replay"]["tables"]}
    rows = {row[0]: row for row in tables["Sources"].rows}
    assert rows["mem"][9] == "deployment:fast; 2 calls, 412 in / 9 out tokens, cost unknown"
    assert "judge_usage" not in rows["mem"][8] and "calls" not in rows["mem"][8]
    assert rows["kb"][9] == "local"
    assert "412 in / 9 out tokens" in response.content.decode()
