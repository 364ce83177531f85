"""The platform's Prometheus metrics. Labels are configuration names only (route, source, type,
stage, feature, and the tenant's schema on the source health gauges) and closed sets of outcomes:
never user ids, session ids or request ids.

Several worker processes: set ``PROMETHEUS_MULTIPROC_DIR`` (an empty directory, emptied at every
start) before the workers start; prometheus_client then writes each process's values to files
there, and ``/metrics`` (``metrics_view``) merges them. This module imports nothing of Django, so
any process (web worker, Celery worker, a test's child process) can record into the same dir.
"""

from __future__ import annotations

import atexit
import functools
import glob
import os
import re
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponse

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
STAGE_BUCKETS = (0.0001, 0.00025, 0.0005, *LATENCY_BUCKETS)
TOKENS_BEFORE_BUCKETS = tuple(float(128 * 2**i) for i in range(11))  # 128 … 131072
TOKENS_AFTER_BUCKETS = tuple(float(64 * 2**i) for i in range(11))  # 64 … 65536

SOURCE_DURATION = Histogram(
    "context_source_duration_seconds",
    "Time one context source took to answer (fetched sources only).",
    ["route", "source", "type"],
    buckets=LATENCY_BUCKETS,
)
SOURCE_TOTAL = Counter(
    "context_source_total",
    "Context source outcomes (status: ok, empty, failed, timeout, skipped).",
    ["route", "source", "type", "status"],
)
STAGE_DURATION = Histogram(
    "llm_routing_stage_duration_seconds",
    "Duration of a resolve stage (fetch, pack, inject, compress, replay).",
    ["stage"],
    buckets=STAGE_BUCKETS,
)
COMPRESSION_APPLIED = Counter(
    "llm_context_compression_applied_total",
    "Compress-stage outcomes of configured routes (status: applied or the skip/failure reason).",
    ["route", "status"],
)
COMPRESSION_TOKENS_BEFORE = Histogram(
    "llm_context_compression_tokens_before",
    "Request tokens before an applied compression.",
    ["route"],
    buckets=TOKENS_BEFORE_BUCKETS,
)
COMPRESSION_TOKENS_AFTER = Histogram(
    "llm_context_compression_tokens_after",
    "Request tokens after an applied compression.",
    ["route"],
    buckets=TOKENS_AFTER_BUCKETS,
)
MATCH_JUDGE = Counter(
    "vsr_match_judge_total",
    "Relevance judge calls (feature: rag, memory, compress; status: ok, error).",
    ["feature", "status"],
)
LIVE_EVENTS = Counter(
    "context_live_events_total",
    "Live-stream publications of a resolve's source events (status: sent, dropped, failed).",
    ["status"],
)
REPLAY_WRITE_FAILURES = Counter(
    "context_replay_write_failures_total",
    "Replay records the background writer could not write (each is logged with its id).",
)
BUDGET_RESERVATION_EXCEEDED = Counter(
    "context_budget_reservation_exceeded_total",
    "Gateway calls whose provider-reported usage exceeded their session budget reservation "
    "(each flagged in its replay record).",
    ["route"],
)
BUDGET_OVERSPENT_TOKENS = Counter(
    "context_budget_overspent_tokens_total",
    "Tokens charged past their session budget reservations (what those calls overspent).",
    ["route"],
)
# The gateway's calls (contextplatform/gateway/call_metrics.py). ``deployment`` is a tenant's
# deployment name ("" when the call reached none: refused before, or every deployment failed
# before answering counts under the last one tried); ``status`` a closed set: ok, rejected (the
# deployment's 4xx passed on), failed (no deployment answered), refused (the platform refused
# before any deployment was called), incomplete (answered, but the answer did not end: the client
# went away or the stream broke).
GATEWAY_STATUSES = ("ok", "rejected", "failed", "refused", "incomplete")
GATEWAY_CALLS = Counter(
    "context_gateway_calls_total",
    "Gateway chat calls by route, deployment that answered (or was tried last) and status.",
    ["route", "deployment", "status"],
)
UPSTREAM_LATENCY = Histogram(
    "context_gateway_upstream_seconds",
    "Time a deployment took to answer a call (non-streaming: the answer to the call's first "
    "request; streaming: from the request to the stream's end, tool-loop rounds included).",
    ["deployment"],
    buckets=(*LATENCY_BUCKETS, 30.0, 60.0, 120.0),
)
TIME_TO_FIRST_TOKEN = Histogram(
    "context_gateway_time_to_first_token_seconds",
    "Time until a streaming deployment's first byte of the answer.",
    ["deployment"],
    buckets=(*LATENCY_BUCKETS, 30.0, 60.0),
)
GATEWAY_TOKENS = Counter(
    "context_gateway_tokens_total",
    "Tokens the deployments reported for the gateway's calls (kind: input, output, "
    "cached_input; input counts the cached ones too).",
    ["route", "deployment", "kind"],
)
GATEWAY_COST = Counter(
    "context_gateway_cost_usd_total",
    "What the gateway's calls cost at their deployment's price (USD; unpriced deployments add "
    "nothing).",
    ["route", "deployment"],
)
GATEWAY_FALLBACKS = Counter(
    "context_gateway_fallbacks_total",
    "Attempts that moved a call on to the route's next deployment (deployment: the one that "
    "failed; outcome: status, timeout, connection).",
    ["deployment", "outcome"],
)
LIVE_CONNECTIONS = Gauge(
    "context_live_stream_connections",
    "Open /ws/metrics/ connections.",
    multiprocess_mode="livesum",
)

# Each source's health per route (contextplatform/replay/source_health/): set when the source's
# replay records are written and when its health is read, so every process holds the value it saw
# last and the exposition keeps the newest (``mostrecent``). The tenant's schema is a label here:
# route names repeat across tenants and the alert is a tenant's.
SOURCE_HEALTH_ALERTS = ("stopped_returning_hits", "failing", "slow")
SOURCE_HEALTH_ALERT = Gauge(
    "context_source_health_alert",
    "1 while a route's source raises the alert (stopped_returning_hits, failing, slow), else 0.",
    ["tenant", "route", "source", "alert"],
    multiprocess_mode="mostrecent",
)
SOURCE_HEALTH_RATE = Gauge(
    "context_source_health_rate",
    "A route's source's share of outcomes over the last hour (outcome: ok, empty, failed, "
    "timeout).",
    ["tenant", "route", "source", "outcome"],
    multiprocess_mode="mostrecent",
)
SOURCE_HEALTH_REQUESTS = Gauge(
    "context_source_health_requests",
    "A route's source's requests over the last hour.",
    ["tenant", "route", "source"],
    multiprocess_mode="mostrecent",
)


def set_source_health(
    tenant: str,
    route: str,
    source: str,
    *,
    alert: str | None,
    requests: int,
    rates: dict[str, float | None],
) -> None:
    for name in SOURCE_HEALTH_ALERTS:
        SOURCE_HEALTH_ALERT.labels(tenant, route, source, name).set(1 if alert == name else 0)
    SOURCE_HEALTH_REQUESTS.labels(tenant, route, source).set(requests)
    for outcome, rate in rates.items():
        SOURCE_HEALTH_RATE.labels(tenant, route, source, outcome).set(rate or 0.0)


JUDGE_FEATURES = frozenset({"rag", "memory", "compress"})

# The type of the source whose fetch is running in this task (set by sources.fetch): the RAG and
# memory kinds share sources.matching, which tells them apart by it.
current_source_type: ContextVar[str | None] = ContextVar("context_source_type", default=None)


class Outcome(Protocol):
    """What ``observe_source`` reads of a ``sources.fetch.SourceOutcome``."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def ms(self) -> float: ...


def observe_source(route: str, outcome: Outcome) -> None:
    _source_total(route, outcome.name, outcome.type, outcome.status).inc()
    if outcome.status != "skipped":
        _source_duration(route, outcome.name, outcome.type).observe(outcome.ms / 1000)


# Each series's child, looked up once per process: ``labels()`` checks and locks at every call,
# which cost more than the observation itself (prometheus_client keeps every child it made for
# the process's life anyway, so keeping a reference here keeps nothing more).
@functools.cache
def _source_total(route: str, source: str, kind: str, status: str) -> Counter:
    return SOURCE_TOTAL.labels(route, source, kind, status)


@functools.cache
def _source_duration(route: str, source: str, kind: str) -> Histogram:
    return SOURCE_DURATION.labels(route, source, kind)


@functools.cache
def _stage_duration(stage: str) -> Histogram:
    return STAGE_DURATION.labels(stage)


def judge_feature() -> str:
    """The feature of a judge call made by a source: ``memory`` for memory sources, else ``rag``."""
    return "memory" if current_source_type.get() == "memory" else "rag"


def count_judge(feature: str, *, ok: bool) -> None:
    MATCH_JUDGE.labels(feature, "ok" if ok else "error").inc()


def observe_compression(route: str, status: str, *, tokens_before: int, tokens_after: int) -> None:
    COMPRESSION_APPLIED.labels(route, status).inc()
    if status == "applied":
        COMPRESSION_TOKENS_BEFORE.labels(route).observe(tokens_before)
        COMPRESSION_TOKENS_AFTER.labels(route).observe(tokens_after)


def count_reservation_exceeded(route: str, tokens: int) -> None:
    BUDGET_RESERVATION_EXCEEDED.labels(route).inc()
    BUDGET_OVERSPENT_TOKENS.labels(route).inc(tokens)


class StageClock:
    """``lap(stage)`` records the time since the previous lap (or the start, or ``restart``)."""

    def __init__(self) -> None:
        self._since = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        _stage_duration(stage).observe(now - self._since)
        self._since = now

    def restart(self) -> None:
        self._since = time.perf_counter()


# --- several worker processes ------------------------------------------------------------------


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


LIVE_GAUGE_FILE = re.compile(r"^gauge_live[a-z]+_(\d+)\.db$")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def mark_dead_workers(path: str) -> list[int]:
    """Forget the live gauges of workers that are gone (whatever server started them: uvicorn,
    gunicorn, a restarted worker). Their counters and histograms stay: totals never go back."""
    dead = sorted(
        {
            int(match.group(1))
            for name in os.listdir(path)
            if (match := LIVE_GAUGE_FILE.match(name)) and not pid_alive(int(match.group(1)))
        }
    )
    for pid in dead:
        multiprocess.mark_process_dead(pid, path)
    return dead


def exposition(path: str | None = None) -> bytes:
    """The text exposition: this process's registry, or every worker's merged in multiprocess mode."""
    directory = path or multiprocess_dir()
    if directory is None:
        return generate_latest(REGISTRY)
    mark_dead_workers(directory)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)
    return generate_latest(registry)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The exposition; with ``METRICS_TOKEN`` set, only to ``Authorization: Bearer <token>``.

    The labels name every tenant's routes and sources, and /metrics is served on every host, a
    tenant's included: a deployment sets the token (DJANGO_ENV=production requires it), so one
    tenant cannot read another's configuration names, and gives it to its Prometheus."""
    import hmac

    from django.conf import settings
    from django.http import HttpResponse

    from contextplatform.core.errors import ApiError, error_response

    token = settings.METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            refused = ApiError(
                "unauthorized",
                "GET /metrics needs Authorization: Bearer <METRICS_TOKEN>",
                status=401,
            )
            return error_response(refused, request.path)
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)


def _forget_this_process() -> None:
    directory = multiprocess_dir()
    if directory and glob.glob(os.path.join(directory, f"gauge_live*_{os.getpid()}.db")):
        multiprocess.mark_process_dead(os.getpid(), directory)


if multiprocess_dir():
    atexit.register(_forget_this_process)  # a clean exit; mark_dead_workers covers the rest
