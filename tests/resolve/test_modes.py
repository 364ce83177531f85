"""``resolve(request, mode)``: each mode runs exactly its stages and touches nothing its mode
does not allow (replay records, the session, memories and their strength, recovery blobs,
compression counts, the live stream, the pre-warm cache), on the real database and cache."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db.models import Max, Sum
from django_tenants.utils import schema_context

from compression.models import CompressionStats, RecoveryBlob
from contextplatform.replay.models import ReplayRecord
from contextplatform.resolve import live_events, modes
from contextplatform.resolve.pipeline import CompressionInputs, ResolveRequest, Run, resolve
from contextplatform.resolve.use_cases import rerun
from contextplatform.routes.configuration.schema import BudgetConfig
from memory.models import Memory, MemoryTurn
from sources.base import ContextRequest, source_kind
from sources.models import ChatMessage
from sources.prewarm import lookup
from tests.compression.conversations import LOG
from tests.conftest import ApiClient, TenantFixture
from tests.resolve import source_kinds_for_tests  # noqa: F401  (registers test_sleep)

HISTORY = {"type": "recent_messages", "name": "history"}
MEMORY = {
    "type": "memory",
    "name": "memories",
    "match": {"recall": {"method": "embedding", "top_k": 5, "min_similarity": -1.0}},
    "store": {"auto": True},
}
FIXED = {"type": "test_sleep", "name": "fixed", "items": ["Opening hours are 9 to 5."]}
RECOVERABLE = {
    "targets": {"tool_outputs": {"mode": "recoverable", "min_tokens": 2000, "target_tokens": 800}}
}
QUESTION = "What did the service log say?"


def body(question: str = QUESTION) -> dict[str, Any]:
    """A request whose tool output compression shortens (recoverably) and whose last message is
    the user's."""
    return {
        "model": "m",
        "max_tokens": 200,
        "messages": [
            {"role": "system", "content": "You are a log analyst."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_log", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": LOG},
            {"role": "user", "content": question},
        ],
    }


class Ids:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:10]
        self.user, self.session = f"u_{tag}", f"s_{tag}"


@pytest.fixture
def ids() -> Ids:
    return Ids()


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What reached the live stream (the route's dashboards)."""
    sent: list[Any] = []
    monkeypatch.setattr(live_events, "publish", lambda group, event: sent.append(event))
    return sent


def make_route(api: ApiClient, name: str = "modes") -> None:
    route = {
        "name": name,
        "model": {"context_window": 16000},
        "context": {
            "sources": [HISTORY, MEMORY, FIXED],
            "injection": {"mode": "system_prompt"},
            "compress": RECOVERABLE,
        },
    }
    response = api.post("/api/v1/routes", route)
    assert response.status_code == 201, response.content


def seed(api: ApiClient, ids: Ids) -> None:
    posted = api.post(
        f"/api/v1/sessions/{ids.session}/messages",
        {"user": ids.user, "messages": [{"role": "user", "content": "Earlier question."}]},
    )
    assert posted.status_code == 201, posted.content
    added = api.post(f"/api/v1/users/{ids.user}/memories", {"content": "User reads logs daily."})
    assert added.status_code == 201, added.content


def state(acme: TenantFixture, ids: Ids) -> dict[str, Any]:
    """Everything a mode may touch, as counts and stamps."""
    with schema_context(acme.tenant.schema_name):
        memories = Memory.objects.filter(user_id=ids.user)
        return {
            "replay_records": ReplayRecord.objects.count(),
            "session_messages": ChatMessage.objects.filter(session__key=ids.session).count(),
            "memories": memories.count(),
            "memory_strength": memories.aggregate(s=Sum("strength"))["s"],
            "memory_used": memories.aggregate(m=Max("last_used_at"))["m"],
            "memory_turns": MemoryTurn.objects.count(),
            "recovery_blobs": RecoveryBlob.objects.count(),
            "compression_stats": CompressionStats.objects.count(),
            "prewarm_cache": bool(lookup(acme.tenant.schema_name, ids.user, ids.session)),
        }


def changed(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    return {key for key in before if before[key] != after[key]}


def run(acme: TenantFixture, ids: Ids, mode: modes.Mode, **fields: Any) -> Run:
    tenant = acme.tenant
    request = ResolveRequest(
        tenant_schema=tenant.schema_name,
        route="modes",
        user=ids.user,
        session=ids.session,
        capture_content=True,
        allowlist=tuple(tenant.outbound_allowlist),
        **fields,
    )
    with schema_context(tenant.schema_name):
        return resolve(request, mode)


@pytest.fixture
def ready(acme: TenantFixture, acme_api: ApiClient, ids: Ids) -> Iterator[None]:
    make_route(acme_api)
    seed(acme_api, ids)
    yield


def test_the_modes_table_is_data() -> None:
    assert set(modes.MODES) == {
        "live",
        "preview",
        "match_preview",
        "compression_preview",
        "prewarm",
        "search",
        "rerun",
    }
    for mode in modes.MODES.values():
        assert mode.stages <= modes.ALL_STAGES and mode.touches <= modes.ALL_TOUCHES
    assert modes.LIVE.stages == modes.ALL_STAGES and modes.LIVE.touches == modes.ALL_TOUCHES
    assert not modes.RERUN.touches and not modes.RERUN.runs("record")


@pytest.mark.usefixtures("ready")
def test_live_runs_every_stage_and_touches_what_a_turn_does(
    acme: TenantFixture, ids: Ids, published: list[Any]
) -> None:
    before = state(acme, ids)
    done = run(acme, ids, modes.LIVE, request_body=body())
    after = state(acme, ids)
    resolution = done.resolution
    assert resolution is not None and resolution.compression["recovery_keys"] == 1
    assert {o.name: o.status for o in done.outcomes} == {
        "history": "ok",
        "memories": "ok",
        "fixed": "ok",
    }
    assert changed(before, after) == {
        "replay_records",
        "session_messages",
        "memory_strength",
        "memory_used",
        "memory_turns",
        "recovery_blobs",
        "compression_stats",
    }
    assert after["replay_records"] == before["replay_records"] + 1
    assert after["session_messages"] == before["session_messages"] + 1
    assert len(published) == 1


@pytest.mark.usefixtures("ready")
@pytest.mark.parametrize("mode", [modes.PREVIEW, modes.RERUN], ids=lambda m: m.name)
def test_a_full_resolve_that_records_nothing(
    acme: TenantFixture, ids: Ids, published: list[Any], mode: modes.Mode
) -> None:
    before = state(acme, ids)
    done = run(acme, ids, mode, request_body=body())
    resolution = done.resolution
    assert resolution is not None and resolution.pending_replay is None
    assert resolution.compression["recovery_keys"] == 1  # kept in memory, not stored
    assert [o.status for o in done.outcomes] == ["ok", "ok", "ok"]
    assert changed(before, state(acme, ids)) == set()
    assert published == []


@pytest.mark.usefixtures("ready")
def test_match_preview_fetches_the_previewable_sources_only(
    acme: TenantFixture, ids: Ids, published: list[Any]
) -> None:
    before = state(acme, ids)
    done = run(acme, ids, modes.MATCH_PREVIEW, query="logs")
    assert done.resolution is None and done.compression is None
    assert [(o.name, o.status) for o in done.outcomes] == [("memories", "ok")]
    assert done.request is not None and not done.request.use_cache and done.request.dry_run
    assert changed(before, state(acme, ids)) == set()
    assert published == []


@pytest.mark.usefixtures("ready")
def test_compression_preview_plans_and_compresses_only(
    acme: TenantFixture, ids: Ids, published: list[Any]
) -> None:
    from compression.config import CompressConfig

    before = state(acme, ids)
    done = run(
        acme,
        ids,
        modes.COMPRESSION_PREVIEW,
        request_body=body(),
        compression=CompressionInputs(
            CompressConfig.model_validate(RECOVERABLE), BudgetConfig(), 16000, None
        ),
    )
    assert done.outcomes == [] and done.resolution is None and done.request is None
    assert done.compression is not None and done.compression.report["applied"] is True
    assert done.budget is not None and done.tokens_before > 0
    assert changed(before, state(acme, ids)) == set()
    assert published == []


@pytest.mark.usefixtures("ready")
def test_prewarm_reads_ahead_into_the_prewarm_cache_only(
    acme: TenantFixture, ids: Ids, published: list[Any]
) -> None:
    before = state(acme, ids)
    done = run(acme, ids, modes.PREWARM)
    assert done.resolution is None and done.outcomes == []
    assert {line.source.name: line.status for line in done.prewarmed} == {
        "history": "prewarmed",
        "memories": "prewarmed",
    }
    assert changed(before, state(acme, ids)) == {"prewarm_cache"}
    assert published == []


@pytest.mark.usefixtures("ready")
def test_search_fetches_the_one_source_it_is_given(
    acme: TenantFixture, ids: Ids, published: list[Any]
) -> None:
    kind = source_kind("test_sleep")
    assert kind is not None
    source = kind(kind.Settings.model_validate(FIXED))
    base = ContextRequest(
        request_id="rsv_search",
        tenant=acme.tenant.schema_name,
        route="modes",
        user=ids.user,
        session=ids.session,
        query="the turn's own query",
    )
    before = state(acme, ids)
    done = run(acme, ids, modes.SEARCH, query="opening hours", source=source, base=base)
    assert done.request is not None and done.request.query == "opening hours"
    assert done.request.request_id == "rsv_search"  # the resolve's own request, asked anew
    assert [(o.name, len(o.items)) for o in done.outcomes] == [("fixed", 1)]
    assert done.resolution is None
    assert changed(before, state(acme, ids)) == set()
    assert published == []


def test_a_rerun_reads_only_what_existed_when_it_was_recorded(
    acme: TenantFixture, acme_api: ApiClient, ids: Ids, published: list[Any]
) -> None:
    make_route(acme_api)
    seed(acme_api, ids)
    request = {"model": "m", "messages": [{"role": "user", "content": "What do I read?"}]}
    resolved = acme_api.post(
        "/api/v1/resolve",
        {"route": "modes", "user": ids.user, "session": ids.session, "request": request},
    )
    assert resolved.status_code == 200, resolved.content
    schema = acme.tenant.schema_name
    with schema_context(schema):
        record = ReplayRecord.objects.get(pk=resolved.json()["id"])
        # As a tenant that captures content keeps it: the request to run again.
        record.request_body = record.request_body or request
        # Later than the record: a message in the session and a memory of the user.
        stamp = record.created_at + timedelta(seconds=5)
    later = acme_api.post(
        f"/api/v1/sessions/{ids.session}/messages",
        {"user": ids.user, "messages": [{"role": "user", "content": "A later message."}]},
    )
    assert later.status_code == 201
    assert (
        acme_api.post(
            f"/api/v1/users/{ids.user}/memories", {"content": "User now reads novels."}
        ).status_code
        == 201
    )
    with schema_context(schema):
        ChatMessage.objects.filter(text="A later message.").update(created_at=stamp)
        Memory.objects.filter(content="User now reads novels.").update(created_at=stamp)
    published.clear()
    before = state(acme, ids)
    with schema_context(schema):
        again = rerun(tenant=acme.tenant, record=record)
    after = state(acme, ids)
    assert changed(before, after) == set() and published == []
    text = str(again.rewritten["messages"][0]["content"])
    assert "Earlier question." in text and "User reads logs daily." in text
    assert "A later message." not in text and "User now reads novels." not in text
    # A live resolve now sees both.
    live = acme_api.post(
        "/api/v1/resolve",
        {"route": "modes", "user": ids.user, "session": ids.session, "request": request},
    ).json()
    now = str(live["request"]["messages"][0]["content"])
    assert "A later message." in now and "User now reads novels." in now


def test_a_rerun_against_a_draft_runs_the_draft(
    acme: TenantFixture, acme_api: ApiClient, ids: Ids, published: list[Any]
) -> None:
    from contextplatform.routes.selectors import loaded_route

    make_route(acme_api)
    seed(acme_api, ids)
    request = {"model": "m", "messages": [{"role": "user", "content": "What do I read?"}]}
    resolved = acme_api.post(
        "/api/v1/resolve",
        {"route": "modes", "user": ids.user, "session": ids.session, "request": request},
    )
    assert resolved.status_code == 200, resolved.content
    schema = acme.tenant.schema_name
    with schema_context(schema):
        record = ReplayRecord.objects.get(pk=resolved.json()["id"])
        record.request_body = record.request_body or request
        saved = loaded_route("modes").spec
        context = saved.context.model_copy(
            update={"sources": [s for s in saved.context.sources if s.type != "memory"]}
        )
        draft = saved.model_copy(update={"context": context})
        published.clear()
        before = state(acme, ids)
        again = rerun(tenant=acme.tenant, record=record, spec=draft)
    assert [o.name for o in again.outcomes] == ["history", "fixed"]
    assert changed(before, state(acme, ids)) == set() and published == []
