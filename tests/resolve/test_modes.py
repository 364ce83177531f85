"""``resolve(request, mode)``: each mode runs exactly its stages and touches nothing its mode
does not allow (replay records, the session, memories and their strength, recovery blobs,
compression counts, the live stream, the pre-warm cache, the deployment's token calibration), on
the real database, cache and channel layer."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator
from datetime import timedelta
from typing import Any

import pytest
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db.models import Max, Sum
from django_tenants.utils import schema_context

from compression.models import CompressionStats, RecoveryBlob
from contextplatform.core.live_events import LISTENER_LOOP, metrics_group
from contextplatform.deployments.calibration import next_ratio, observed_ratio
from contextplatform.deployments.models import Deployment
from contextplatform.protocols.usage import ProviderUsage, uncalibrated_input
from contextplatform.replay.models import ReplayRecord
from contextplatform.resolve import modes
from contextplatform.resolve.pipeline import CompressionInputs, ResolveRequest, Run, resolve
from contextplatform.resolve.use_cases import finish_turn, rerun
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


class Dashboard:
    """A tenant's dashboard on its live stream, listening as ``MetricsConsumer`` does
    (``contextplatform.live``): a channel of the tenant's metrics group, joined on the event loop
    it listens on (here a loop of its own in a thread, as a server's), which the publisher is told
    of (``LISTENER_LOOP``). What it receives is what the real channel layer delivered."""

    QUIET_S = 0.3  # nothing more within this long: everything sent has arrived

    def __init__(self, schema: str) -> None:
        self.layer = get_channel_layer()
        assert isinstance(self.layer, InMemoryChannelLayer)
        self.group = metrics_group(schema)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.channel: str = self.on_loop(self.join())

    def on_loop(self, work: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout=10)

    async def join(self) -> str:
        LISTENER_LOOP.remember()
        channel = await self.layer.new_channel()
        await self.layer.group_add(self.group, channel)
        return str(channel)

    async def next_message(self) -> dict[str, Any] | None:
        try:
            message = await asyncio.wait_for(self.layer.receive(self.channel), self.QUIET_S)
        except TimeoutError:
            return None
        return dict(message)

    def received(self) -> list[list[dict[str, Any]]]:
        """The events of every message that arrived since last asked, one list per message."""
        messages: list[list[dict[str, Any]]] = []
        while (message := self.on_loop(self.next_message())) is not None:
            messages.append(message["events"])
        return messages

    def close(self) -> None:
        self.on_loop(self.layer.group_discard(self.group, self.channel))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def dashboard(acme: TenantFixture, settings: Any) -> Iterator[Dashboard]:
    """The tenant's dashboard, on the one-process channel layer (as without REDIS_URL)."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    listening = Dashboard(acme.tenant.schema_name)
    yield listening
    listening.close()


def nothing_reached(dashboard: Dashboard, acme: TenantFixture, ids: Ids) -> bool:
    """Nothing reached the dashboard, and not for want of listening: a live resolve's events,
    sent after, do reach it, and alone (the channel delivers in order, so whatever was sent
    before them would have arrived first)."""
    live = run(acme, ids, modes.LIVE, request_body=body())
    received = dashboard.received()
    sent = [[(o.name, round(o.ms, 2)) for o in live.outcomes]]
    arrived = [[(e["source"], e["ms"]) for e in events] for events in received]
    assert arrived == sent, "the dashboard heard more than the live resolve after the mode"
    return True


UPSTREAM = "modes-upstream"


def make_route(api: ApiClient, name: str = "modes") -> None:
    """The route, forwarding to a deployment of its own whose model no exact tokenizer knows (its
    counts are estimated, so the provider's usage calibrates them)."""
    deployment = {
        "name": UPSTREAM,
        "protocol": "openai",
        "base_url": "https://llm.example.test/v1",
        "model": "modes-model",
    }
    created = api.post("/api/v1/deployments", deployment)
    assert created.status_code == 201, created.content
    route = {
        "name": name,
        "model": {"context_window": 16000, "upstream": UPSTREAM},
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
            "calibration": Deployment.objects.values_list("calibration", "calibration_samples").get(
                name=UPSTREAM
            ),
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


def search_inputs(acme: TenantFixture, ids: Ids) -> dict[str, Any]:
    """A lazy search of the fixed source, within a resolve of the route."""
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
    return {"query": "opening hours", "source": source, "base": base}


def compression_preview_inputs() -> dict[str, Any]:
    from compression.config import CompressConfig

    compression = CompressionInputs(
        CompressConfig.model_validate(RECOVERABLE), BudgetConfig(), 16000, None
    )
    return {"request_body": body(), "compression": compression}


def inputs(acme: TenantFixture, ids: Ids, mode: modes.Mode) -> dict[str, Any]:
    """What each mode is run with, as its own test below runs it."""
    made: dict[str, Callable[[], dict[str, Any]]] = {
        "live": lambda: {"request_body": body()},
        "preview": lambda: {"request_body": body()},
        "match_preview": lambda: {"query": "logs"},
        "compression_preview": compression_preview_inputs,
        "prewarm": dict,
        "search": lambda: search_inputs(acme, ids),
        "rerun": lambda: {"request_body": body()},
        "evaluate": lambda: {"request_body": body()},
        "count": lambda: {"request_body": body()},
    }
    return made[mode.name]()


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
        "evaluate",
        "count",
    }
    for mode in modes.MODES.values():
        assert mode.stages <= modes.ALL_STAGES and mode.touches <= modes.ALL_TOUCHES
    assert modes.LIVE.stages == modes.ALL_STAGES and modes.LIVE.touches == modes.ALL_TOUCHES
    assert not modes.RERUN.touches and not modes.RERUN.runs("record")
    assert not modes.EVALUATE.touches and not modes.EVALUATE.runs("record")
    assert not modes.COUNT.touches and not modes.COUNT.runs("record")
    assert [m.name for m in modes.MODES.values() if not m.calls_judge] == ["count"]


@pytest.mark.usefixtures("ready")
def test_live_runs_every_stage_and_touches_what_a_turn_does(
    acme: TenantFixture, ids: Ids, dashboard: Dashboard
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
    assert [[e["source"] for e in events] for events in dashboard.received()] == [
        ["history", "memories", "fixed"]
    ]


@pytest.mark.usefixtures("ready")
@pytest.mark.parametrize(
    "mode", [modes.PREVIEW, modes.RERUN, modes.EVALUATE, modes.COUNT], ids=lambda m: m.name
)
def test_a_full_resolve_that_records_nothing(
    acme: TenantFixture, ids: Ids, dashboard: Dashboard, mode: modes.Mode
) -> None:
    before = state(acme, ids)
    done = run(acme, ids, mode, request_body=body())
    resolution = done.resolution
    assert resolution is not None and resolution.pending_replay is None
    assert resolution.compression["recovery_keys"] == 1  # kept in memory, not stored
    assert [o.status for o in done.outcomes] == ["ok", "ok", "ok"]
    assert changed(before, state(acme, ids)) == set()
    assert nothing_reached(dashboard, acme, ids)


@pytest.mark.usefixtures("ready")
def test_match_preview_fetches_the_previewable_sources_only(
    acme: TenantFixture, ids: Ids, dashboard: Dashboard
) -> None:
    before = state(acme, ids)
    done = run(acme, ids, modes.MATCH_PREVIEW, query="logs")
    assert done.resolution is None and done.compression is None
    assert [(o.name, o.status) for o in done.outcomes] == [("memories", "ok")]
    assert done.request is not None and not done.request.use_cache and done.request.dry_run
    assert changed(before, state(acme, ids)) == set()
    assert nothing_reached(dashboard, acme, ids)


@pytest.mark.usefixtures("ready")
def test_compression_preview_plans_and_compresses_only(
    acme: TenantFixture, ids: Ids, dashboard: Dashboard
) -> None:
    before = state(acme, ids)
    done = run(acme, ids, modes.COMPRESSION_PREVIEW, **compression_preview_inputs())
    assert done.outcomes == [] and done.resolution is None and done.request is None
    assert done.compression is not None and done.compression.report["applied"] is True
    assert done.budget is not None and done.tokens_before > 0
    assert changed(before, state(acme, ids)) == set()
    assert nothing_reached(dashboard, acme, ids)


@pytest.mark.usefixtures("ready")
def test_prewarm_reads_ahead_into_the_prewarm_cache_only(
    acme: TenantFixture, ids: Ids, dashboard: Dashboard
) -> None:
    before = state(acme, ids)
    done = run(acme, ids, modes.PREWARM)
    assert done.resolution is None and done.outcomes == []
    assert {line.source.name: line.status for line in done.prewarmed} == {
        "history": "prewarmed",
        "memories": "prewarmed",
    }
    assert changed(before, state(acme, ids)) == {"prewarm_cache"}
    assert nothing_reached(dashboard, acme, ids)


@pytest.mark.usefixtures("ready")
def test_search_fetches_the_one_source_it_is_given(
    acme: TenantFixture, ids: Ids, dashboard: Dashboard
) -> None:
    before = state(acme, ids)
    done = run(acme, ids, modes.SEARCH, **search_inputs(acme, ids))
    assert done.request is not None and done.request.query == "opening hours"
    assert done.request.request_id == "rsv_search"  # the resolve's own request, asked anew
    assert [(o.name, len(o.items)) for o in done.outcomes] == [("fixed", 1)]
    assert done.resolution is None
    assert changed(before, state(acme, ids)) == set()
    assert nothing_reached(dashboard, acme, ids)


RERUN_REQUEST = {"model": "m", "messages": [{"role": "user", "content": "What do I read?"}]}


def recorded_turn(acme: TenantFixture, acme_api: ApiClient, ids: Ids) -> ReplayRecord:
    """A live resolve on the seeded route, and its record holding the request (as a tenant that
    captures content keeps it): what a rerun runs again."""
    make_route(acme_api)
    seed(acme_api, ids)
    resolved = acme_api.post(
        "/api/v1/resolve",
        {"route": "modes", "user": ids.user, "session": ids.session, "request": RERUN_REQUEST},
    )
    assert resolved.status_code == 200, resolved.content
    with schema_context(acme.tenant.schema_name):
        record = ReplayRecord.objects.get(pk=resolved.json()["id"])
    record.request_body = record.request_body or RERUN_REQUEST
    return record


def test_a_rerun_reads_only_what_existed_when_it_was_recorded(
    acme: TenantFixture, acme_api: ApiClient, ids: Ids, dashboard: Dashboard
) -> None:
    record = recorded_turn(acme, acme_api, ids)
    request = RERUN_REQUEST
    schema = acme.tenant.schema_name
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
    dashboard.received()  # the resolves' above
    before = state(acme, ids)
    with schema_context(schema):
        again = rerun(tenant=acme.tenant, record=record)
    after = state(acme, ids)
    assert changed(before, after) == set()
    assert nothing_reached(dashboard, acme, ids)
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
    acme: TenantFixture, acme_api: ApiClient, ids: Ids, dashboard: Dashboard
) -> None:
    from contextplatform.routes.selectors import loaded_route

    record = recorded_turn(acme, acme_api, ids)
    with schema_context(acme.tenant.schema_name):
        saved = loaded_route("modes").spec
        context = saved.context.model_copy(
            update={"sources": [s for s in saved.context.sources if s.type != "memory"]}
        )
        draft = saved.model_copy(update={"context": context})
        dashboard.received()  # the resolves' above
        before = state(acme, ids)
        again = rerun(tenant=acme.tenant, record=record, spec=draft)
    assert [o.name for o in again.outcomes] == ["history", "fixed"]
    assert changed(before, state(acme, ids)) == set()
    assert nothing_reached(dashboard, acme, ids)


# --- calibration ---------------------------------------------------------------------------------

ANSWER = {"choices": [{"message": {"role": "assistant", "content": "The disk filled up."}}]}
USAGE = ProviderUsage(input=5000, output=40)


def answer(acme: TenantFixture, done: Run) -> None:
    """The model's answer with the provider's usage, handed back as the gateway does for a resolve
    it ran (``finish_turn`` with the resolution); a mode that resolved nothing has no turn."""
    if done.resolution is None:
        return
    with schema_context(acme.tenant.schema_name):
        finish_turn(
            tenant=acme.tenant,
            resolve_id=done.resolution.id,
            response=ANSWER,
            usage=USAGE,
            resolution=done.resolution,
        )


def moved_by_usage(acme: TenantFixture, done: Run, before: tuple[float | None, int]) -> bool:
    """The calibration moved by ``USAGE`` once, from ``before``, as the record's estimate says."""
    assert done.resolution is not None
    with schema_context(acme.tenant.schema_name):
        tokens = ReplayRecord.objects.get(pk=done.resolution.id).tokens
        ratio, samples = Deployment.objects.values_list("calibration", "calibration_samples").get(
            name=UPSTREAM
        )
    estimate = uncalibrated_input(tokens)
    assert tokens["deployment"] == UPSTREAM and estimate is not None
    observed = observed_ratio(USAGE.input, estimate)
    assert observed is not None
    return bool(
        samples == before[1] + 1 and ratio == pytest.approx(next_ratio(before[0], observed))
    )


@pytest.mark.usefixtures("ready")
def test_a_live_turns_answer_moves_the_calibration_by_either_hand_back(
    acme: TenantFixture, ids: Ids
) -> None:
    # The gateway's: its resolve's record left pending, completed with the answer.
    before = state(acme, ids)
    done = run(acme, ids, modes.LIVE, request_body=body(), defer_replay=True)
    answer(acme, done)
    assert "calibration" in changed(before, state(acme, ids))
    assert moved_by_usage(acme, done, before["calibration"])
    # REST's: the record written at resolve, the answer posted to it.
    before = state(acme, ids)
    done = run(acme, ids, modes.LIVE, request_body=body())
    assert done.resolution is not None
    with schema_context(acme.tenant.schema_name):
        finish_turn(tenant=acme.tenant, resolve_id=done.resolution.id, response=ANSWER, usage=USAGE)
    assert "calibration" in changed(before, state(acme, ids))
    assert moved_by_usage(acme, done, before["calibration"])


@pytest.mark.usefixtures("ready")
@pytest.mark.parametrize(
    "mode", [m for m in modes.MODES.values() if m is not modes.LIVE], ids=lambda m: m.name
)
def test_no_other_modes_answer_moves_the_calibration(
    acme: TenantFixture, ids: Ids, mode: modes.Mode
) -> None:
    assert not mode.may("calibration")
    before = state(acme, ids)
    answer(acme, run(acme, ids, mode, defer_replay=True, **inputs(acme, ids, mode)))
    assert "calibration" not in changed(before, state(acme, ids))
    # Not for want of a usage that moves it: a live turn's answer, the same, does.
    live = run(acme, ids, modes.LIVE, request_body=body(), defer_replay=True)
    answer(acme, live)
    assert moved_by_usage(acme, live, before["calibration"])
