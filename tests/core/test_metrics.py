"""Prometheus metrics: per-source outcomes and latency, stage durations, compression and judge
counters, configuration names only in labels, and several worker processes merged at /metrics."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django_tenants.utils import schema_context
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from contextplatform.core import metrics
from contextplatform.resolve.modes import PREVIEW
from contextplatform.resolve.pipeline import ResolveRequest
from contextplatform.resolve.pipeline import resolve as run_resolve
from sources.matching import JudgeConfig, judge_and_keep
from sources.recall import RecallHit
from tests.conftest import ApiClient, TenantFixture
from tests.resolve import source_kinds_for_tests  # noqa: F401  (registers test_hang)
from tests.sources.knowledge.conftest import SUPPORT_DOCS, make_collection, rag_route

BACKEND = "postgres"  # the default memory store's label
ROOT = Path(__file__).resolve().parents[2]
USER = "user-7f3a9c-private"
SESSION = "session-5d1e-private"
RULES = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}
OUR_METRICS = (
    "context_source",
    "llm_routing_stage",
    "llm_context_compression",
    "vsr_match_judge",
    "llm_memory_retrieval",
    "context_live",
)
# The source health gauges add the tenant's schema (route names repeat across tenants), the alert
# and the outcome (closed sets).
ALLOWED_LABELS = {
    "route",
    "source",
    "type",
    "status",
    "stage",
    "feature",
    "backend",
    "le",
    "tenant",
    "alert",
    "outcome",
}


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Deltas:
    """Sample values now versus when created."""

    def __init__(self, *samples: tuple[str, dict[str, str]]) -> None:
        self.samples = samples
        self.before = [value(name, **labels) for name, labels in samples]

    def __call__(self) -> list[float]:
        return [
            value(name, **labels) - before
            for (name, labels), before in zip(self.samples, self.before, strict=True)
        ]


def make_route(api: ApiClient, body: dict[str, Any]) -> None:
    response = api.post("/api/v1/routes", body)
    assert response.status_code == 201, response.content


def resolve(api: ApiClient, route: str, text: str = "Where is my parcel?", **extra: Any) -> Any:
    body = {"route": route, "request": {"messages": [{"role": "user", "content": text}]}}
    response = api.post("/api/v1/resolve", {**body, **extra})
    assert response.status_code == 200, response.content
    return response.json()


def scrape() -> str:
    response = Client().get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return response.content.decode()


# --- one process ---------------------------------------------------------------------------------


def test_a_resolve_counts_each_source_and_stage_with_configuration_labels(
    acme_api: ApiClient,
) -> None:
    stuck = {"type": "test_hang", "name": "stuck", "timeout_ms": 50}
    make_route(acme_api, {"name": "observed", "context": {"sources": [RULES, stuck]}})
    rules = {"route": "observed", "source": "rules", "type": "skill_guardrails"}
    hang = {"route": "observed", "source": "stuck", "type": "test_hang"}
    stages = ("fetch", "pack", "inject", "compress", "replay")
    deltas = Deltas(
        ("context_source_total", {**rules, "status": "ok"}),
        ("context_source_total", {**hang, "status": "timeout"}),
        ("context_source_duration_seconds_count", rules),
        ("context_source_duration_seconds_count", hang),
        *(("llm_routing_stage_duration_seconds_count", {"stage": s}) for s in stages),
    )
    report = resolve(acme_api, "observed", user=USER, session=SESSION)
    assert deltas() == [1.0] * (4 + len(stages))
    # the timed-out source's latency is its timeout, in seconds
    assert value("context_source_duration_seconds_sum", **hang) >= 0.05
    assert value("context_source_duration_seconds_bucket", **hang, le="0.025") == 0

    text = scrape()
    assert 'context_source_total{route="observed",source="rules"' in text
    for private in (USER, SESSION, report["id"]):
        assert private not in text
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(OUR_METRICS):
            continue
        for sample in family.samples:
            assert set(sample.labels) <= ALLOWED_LABELS, (family.name, sample.labels)
            assert not {USER, SESSION, report["id"]} & set(sample.labels.values())


def test_a_resolve_without_a_record_has_no_replay_stage(acme_api: ApiClient) -> None:
    """As the admin's preview runs it: stages are timed, but there is no replay record to time."""
    make_route(acme_api, {"name": "bare", "context": {"sources": []}})
    deltas = Deltas(
        ("llm_routing_stage_duration_seconds_count", {"stage": "fetch"}),
        ("llm_routing_stage_duration_seconds_count", {"stage": "replay"}),
    )
    with schema_context("acme"):
        run_resolve(
            ResolveRequest(
                tenant_schema="acme",
                route="bare",
                request_body={"messages": [{"role": "user", "content": "hi"}]},
            ),
            PREVIEW,
        )
    assert deltas() == [1.0, 0.0]


LOG = "\n".join(
    f"log line {i}: service {i % 7} answered {500 if i == 1234 else 200} after {i % 97} ms"
    for i in range(2500)
)


def tool_turns(call: str, content: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call, "type": "function", "function": {"name": "logs", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": call, "content": content},
    ]


def test_compression_outcomes_tokens_and_the_compress_judge_are_counted(
    acme_api: ApiClient,
) -> None:
    route = {
        "name": "squeezed",
        "model": {"context_window": 16000},
        "context": {"compress": {"mode": "auto"}},
    }
    make_route(acme_api, route)
    labels = {"route": "squeezed"}
    deltas = Deltas(
        ("llm_context_compression_applied_total", {**labels, "status": "applied"}),
        ("llm_context_compression_tokens_before_count", labels),
        ("llm_context_compression_tokens_after_count", labels),
        ("llm_context_compression_tokens_before_sum", labels),
        ("llm_context_compression_tokens_after_sum", labels),
        ("vsr_match_judge_total", {"feature": "compress", "status": "ok"}),
    )
    body = {
        "model": "m",
        "max_tokens": 200,
        "messages": [
            {"role": "user", "content": "Which service answered 500?"},
            *tool_turns("call_1", LOG),
            *tool_turns("call_2", LOG.replace("service", "worker")),
            {"role": "user", "content": "Which service answered 500, and when?"},
        ],
    }
    response = acme_api.post("/api/v1/resolve", {"route": "squeezed", "request": body})
    assert response.status_code == 200, response.content
    compression = response.json()["compression"]
    assert compression["applied"] is True
    assert deltas() == [
        1.0,
        1.0,
        1.0,
        compression["tokens_before"],
        compression["tokens_after"],
        1.0,  # one judge call ranks the blocks
    ]

    # a configured route that had nothing to compress counts its skip reason, no tokens
    skipped = Deltas(("llm_context_compression_tokens_before_count", labels))
    short = {"messages": [{"role": "user", "content": "hi"}]}
    reason_before = {
        status: value("llm_context_compression_applied_total", **labels, status=status)
        for status in ("no_targets", "below_trigger")
    }
    response = acme_api.post("/api/v1/resolve", {"route": "squeezed", "request": short})
    assert response.status_code == 200, response.content
    reason = response.json()["compression"]["skip_reason"]
    assert reason in reason_before
    counted = value("llm_context_compression_applied_total", **labels, status=reason)
    assert counted - reason_before[reason] == 1.0
    assert skipped() == [0.0]  # token histograms describe applied compressions only


def test_the_rag_judge_is_counted_under_rag(acme_api: ApiClient) -> None:
    make_collection(acme_api, "kb", SUPPORT_DOCS)
    make_route(acme_api, rag_route("docs", "kb"))
    deltas = Deltas(
        ("vsr_match_judge_total", {"feature": "rag", "status": "ok"}),
        ("vsr_match_judge_total", {"feature": "memory", "status": "ok"}),
    )
    report = resolve(acme_api, "docs", "How long is the headphone warranty?")
    assert report["sources"][0]["notes"]["judged"] is True
    assert deltas() == [1.0, 0.0]


def test_the_memory_judge_is_counted_under_memory(acme_api: ApiClient) -> None:
    memory = {"content": "User prefers window seats on flights."}
    assert acme_api.post(f"/api/v1/users/{USER}/memories", memory).status_code == 201
    match = {"recall": {"top_k": 5, "min_similarity": 0.2}, "judge": {"min_score": 0.0}}
    source = {"type": "memory", "name": "memories", "match": match}
    make_route(acme_api, {"name": "m", "context": {"sources": [source]}})
    deltas = Deltas(
        ("vsr_match_judge_total", {"feature": "memory", "status": "ok"}),
        ("vsr_match_judge_total", {"feature": "rag", "status": "ok"}),
        ("llm_memory_retrieval_total", {"backend": BACKEND, "status": "hit"}),
    )
    question = "Book me a seat on my flight, you know which seats I prefer"
    report = resolve(acme_api, "m", question, user=USER)
    assert report["sources"][0]["notes"]["memory_status"] == "used"
    assert deltas() == [1.0, 0.0, 1.0]


def test_a_failing_judge_is_counted_as_an_error() -> None:
    hits = [RecallHit(chunk_id=1, document_id="d", title="t", text="refunds take 30 days")]
    gone = JudgeConfig.model_validate({"deployment": "gone"}, context={"stored": True})
    deltas = Deltas(
        ("vsr_match_judge_total", {"feature": "rag", "status": "error"}),
        ("vsr_match_judge_total", {"feature": "memory", "status": "error"}),
    )

    async def as_memory() -> Any:
        metrics.current_source_type.set("memory")
        return await judge_and_keep("refunds?", hits, gone)

    result = asyncio.run(judge_and_keep("refunds?", hits, gone))
    assert result.judge_error and asyncio.run(as_memory()).judge_error
    assert deltas() == [1.0, 1.0]


# --- several processes ---------------------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import os
    import sys

    from contextplatform.core import metrics

    increments, stay = int(sys.argv[1]), sys.argv[2] == "stay"
    for _ in range(increments):
        metrics.SOURCE_TOTAL.labels("mp", "docs", "rag", "ok").inc()
        metrics.SOURCE_DURATION.labels("mp", "docs", "rag").observe(0.02)
    metrics.LIVE_CONNECTIONS.inc()
    print("ready", flush=True)
    if stay:
        sys.stdin.readline()  # then a clean exit
    else:
        os._exit(0)  # dies like a killed worker: no atexit hook runs
    """
)


def start_worker(directory: Path, increments: int, stay: bool) -> subprocess.Popen[str]:
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(increments), "stay" if stay else "exit"],
        cwd=ROOT,
        env={**os.environ, metrics.MULTIPROC_ENV: str(directory)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
    return worker


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_several_worker_processes_are_merged_at_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db: Any
) -> None:
    multiprocess_dir = tmp_path  # empty, as at every start
    gone = start_worker(multiprocess_dir, 1, stay=False)
    assert gone.wait(timeout=30) == 0
    alive = start_worker(multiprocess_dir, 2, stay=True)
    try:
        monkeypatch.setenv(metrics.MULTIPROC_ENV, str(multiprocess_dir))
        merged = samples(scrape())
    finally:
        assert alive.stdin is not None
        alive.stdin.write("\n")
        alive.stdin.close()
        alive.wait(timeout=30)
    labels = {("route", "mp"), ("source", "docs"), ("type", "rag")}
    assert merged[("context_source_total", frozenset({*labels, ("status", "ok")}))] == 3.0
    assert merged[("context_source_duration_seconds_count", frozenset(labels))] == 3.0
    assert (
        merged[("context_source_duration_seconds_bucket", frozenset({*labels, ("le", "0.025")}))]
        == 3.0
    )
    # a live gauge counts the workers that are alive: the exited one was marked dead
    assert merged[("context_live_stream_connections", frozenset())] == 1.0
    assert not list(multiprocess_dir.glob(f"gauge_live*_{gone.pid}.db"))
    # and a clean exit forgets its own live gauge too
    assert not list(multiprocess_dir.glob(f"gauge_live*_{alive.pid}.db"))
    assert list(multiprocess_dir.glob("counter_*.db"))  # totals stay after the workers left


# --- who may read them ---------------------------------------------------------------------------


def test_with_a_metrics_token_only_its_bearer_reads_the_metrics(
    acme: TenantFixture, settings: Any
) -> None:
    """The labels name every tenant's routes: a tenant's key, another token or none are refused."""
    settings.METRICS_TOKEN = "metrics-s3cret"
    for headers in (
        {},
        {"HTTP_AUTHORIZATION": "Bearer wrong"},
        {"HTTP_AUTHORIZATION": f"Bearer {acme.key}"},
        {"HTTP_AUTHORIZATION": "metrics-s3cret"},
    ):
        refused = Client().get("/metrics", **headers)
        assert refused.status_code == 401, headers
        assert refused.json()["error"]["code"] == "unauthorized"
        assert b"context_source_total" not in refused.content
    allowed = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer metrics-s3cret")
    assert allowed.status_code == 200
    assert b"llm_routing_stage_duration_seconds" in allowed.content
