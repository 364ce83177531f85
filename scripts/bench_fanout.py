"""Section 7, live fan-out: dashboards on ``/ws/metrics/`` of a real uvicorn (Redis channel layer)
while resolves arrive over ``POST /api/v1/resolve`` at a steady rate.

Every dashboard is a ``websockets`` client authenticated by an API key with scope ``replay.read``
only; the resolves use another key of the same tenant with scope ``resolve``. An event counts for
the measured window when its ``at`` (stamped by the server when it publishes) is not before the
window's start, so the warm-up's events are left out; delivery latency is receive time - ``at``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from scripts.bench_env import busy_fraction
from scripts.bench_http import (
    CONNECT_STAGGER_S,
    HOST,
    RESOLVE_PATH,
    Server,
    running_server,
    server_config,
)
from scripts.bench_resolver import CHAT_BODY
from scripts.bench_setup import BENCH_TENANT, save_routes

ROUTE = "bench-fanout"
SOURCES = 4  # one event per source per resolve
DASHBOARDS = 50
RATE_PER_S = 10.0
IN_FLIGHT = 8
WARMUP_RESOLVES = 20
DRAIN_TIMEOUT_S = 15.0
WORKERS = 1
STREAM_PATH = "/ws/metrics/"


def fanout_route() -> dict[str, Any]:
    """Built-in kinds only (the server does not know the bench-only kind): fixed texts."""
    sources = [
        {"type": "skill_guardrails", "name": f"rules{index}", "texts": [f"Rule {index}: be kind."]}
        for index in range(SOURCES)
    ]
    return {
        "name": ROUTE,
        "description": "Benchmark route (make bench, live fan-out).",
        "model": {"name": "bench", "context_window": 128000, "max_output_tokens": 1024},
        "context": {"sources": sources, "injection": {"mode": "system_prompt"}},
    }


@dataclass
class Dashboard:
    """What one connected dashboard received of the bench route's events."""

    received: int = 0
    early: int = 0  # events of the warm-up (stamped before the window)
    latencies_ms: list[float] = field(default_factory=list)
    last_at: float = 0.0


@dataclass
class Window:
    """The measured window: events stamped at or after ``since`` count."""

    route: str
    since: float = float("inf")

    def take(self, dashboard: Dashboard, frame: str | bytes) -> None:
        now = time.time()
        event = json.loads(frame)
        if event.get("route") != self.route:
            return
        if event["at"] < self.since:
            dashboard.early += 1
            return
        dashboard.received += 1
        dashboard.last_at = now
        dashboard.latencies_ms.append((now - event["at"]) * 1000)


@dataclass
class FanoutResult:
    dashboards: int
    rate_target: float
    events_per_resolve: int
    config: dict[str, str]
    per_dashboard: list[Dashboard] = field(default_factory=list)
    resolve_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    window_s: float = 0.0  # first measured request sent -> last response
    delivery_s: float = 0.0  # first measured request sent -> last event received
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    machine_busy: float = 0.0
    live_events: dict[str, float] = field(default_factory=dict)  # the server's counter, delta
    connections: float = 0.0  # the server's gauge during the window
    baseline_resolves: int = 0  # the same drive before any dashboard connected
    baseline_cpu_s: float = 0.0

    def server_cpu_ms_per_resolve(self) -> float:
        return self.server_cpu_s / self.resolves * 1000 if self.resolves else float("nan")

    def baseline_cpu_ms_per_resolve(self) -> float:
        if not self.baseline_resolves:
            return float("nan")
        return self.baseline_cpu_s / self.baseline_resolves * 1000

    def fanout_cpu_us_per_frame(self) -> float:
        """Server CPU the dashboards add, per event frame sent to one dashboard."""
        extra_ms = self.server_cpu_ms_per_resolve() - self.baseline_cpu_ms_per_resolve()
        return extra_ms * 1000 / (self.events_per_resolve * self.dashboards)

    @property
    def resolves(self) -> int:
        return len(self.resolve_ms)

    @property
    def expected(self) -> int:
        """Events every dashboard should have received."""
        return self.resolves * self.events_per_resolve

    def lost(self) -> list[int]:
        return [self.expected - d.received for d in self.per_dashboard]

    def latencies_ms(self) -> list[float]:
        return [ms for d in self.per_dashboard for ms in d.latencies_ms]

    def received(self) -> int:
        return sum(d.received for d in self.per_dashboard)

    def events_per_s(self) -> float:
        """Events delivered per second to all dashboards together, over the delivery window."""
        return self.received() / self.delivery_s if self.delivery_s else 0.0


def live_counters(server: Server) -> tuple[dict[str, float], float]:
    """``context_live_events_total`` by status and ``context_live_stream_connections``."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=10.0).text
    events: dict[str, float] = {}
    connections = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "context_live_events_total":
                events[sample.labels["status"]] = sample.value
            elif sample.name == "context_live_stream_connections":
                connections = sample.value
    return events, connections


async def watch(connection: Any, dashboard: Dashboard, window: Window) -> None:
    async for frame in connection:
        window.take(dashboard, frame)


async def connect_dashboards(
    stack: AsyncExitStack, server: Server, key: str, count: int
) -> list[Any]:
    from websockets.asyncio.client import connect

    url = f"ws://{HOST}:{server.port}{STREAM_PATH}"
    connections = []
    for _ in range(count):
        connection = await stack.enter_async_context(
            connect(url, additional_headers={"Authorization": f"Bearer {key}"}, proxy=None)
        )
        connections.append(connection)
        await asyncio.sleep(CONNECT_STAGGER_S)
    return connections


async def post_resolve(
    client: httpx.AsyncClient, payload: bytes, result: FanoutResult | None
) -> None:
    started = time.perf_counter()
    try:
        response = await client.post(RESOLVE_PATH, content=payload)
    except httpx.HTTPError as error:
        if result is not None:
            result.errors[type(error).__name__] += 1
        return
    if result is None:
        response.raise_for_status()
        return
    if response.status_code != 200:
        result.errors[f"HTTP {response.status_code}"] += 1
        return
    result.resolve_ms.append((time.perf_counter() - started) * 1000)


async def drive(
    client: httpx.AsyncClient, payload: bytes, count: int, result: FanoutResult | None
) -> None:
    """``count`` resolves sent at ``RATE_PER_S``, at most ``IN_FLIGHT`` at once."""
    slots = asyncio.Semaphore(IN_FLIGHT)

    async def one() -> None:
        try:
            await post_resolve(client, payload, result)
        finally:
            slots.release()

    started = time.perf_counter()
    tasks = []
    for index in range(count):
        delay = started + index / RATE_PER_S - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await slots.acquire()
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)


async def wait_delivered(dashboards: list[Dashboard], expected: int) -> None:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while time.monotonic() < deadline and any(d.received < expected for d in dashboards):
        await asyncio.sleep(0.05)


async def baseline(
    client: httpx.AsyncClient, payload: bytes, server: Server, count: int, result: FanoutResult
) -> None:
    """Server CPU per resolve at the same rate with no dashboard connected."""
    started = server.cpu_seconds()
    counted = FanoutResult(0, RATE_PER_S, SOURCES, {})
    await drive(client, payload, count, counted)
    result.baseline_cpu_s = server.cpu_seconds() - started
    result.baseline_resolves = counted.resolves


async def fan_out(
    server: Server, route: str, keys: tuple[str, str], seconds: float, result: FanoutResult
) -> None:
    dashboard_key, resolve_key = keys
    payload = json.dumps({"route": route, "request": CHAT_BODY}).encode()
    headers = {"Authorization": f"Bearer {resolve_key}", "Content-Type": "application/json"}
    window = Window(route=route)
    result.per_dashboard = [Dashboard() for _ in range(result.dashboards)]
    limits = httpx.Limits(max_connections=IN_FLIGHT)
    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            httpx.AsyncClient(base_url=server.base_url, headers=headers, limits=limits, timeout=30)
        )
        await drive(client, payload, WARMUP_RESOLVES, None)
        await baseline(client, payload, server, round(seconds * RATE_PER_S / 2), result)
        connections = await connect_dashboards(stack, server, dashboard_key, result.dashboards)
        watchers = [
            asyncio.create_task(watch(c, d, window))
            for c, d in zip(connections, result.per_dashboard, strict=True)
        ]
        await drive(client, payload, WARMUP_RESOLVES, None)
        await asyncio.sleep(0.5)
        before, result.connections = live_counters(server)
        machine_before, server_before = psutil.cpu_times(), server.cpu_seconds()
        client_before = time.process_time()
        window.since = time.time()
        started = time.perf_counter()
        await drive(client, payload, round(seconds * RATE_PER_S), result)
        result.window_s = time.perf_counter() - started
        await wait_delivered(result.per_dashboard, result.expected)
        last = max((d.last_at for d in result.per_dashboard), default=window.since)
        result.delivery_s = max(last - window.since, result.window_s)
        result.client_cpu_s = time.process_time() - client_before
        result.server_cpu_s = server.cpu_seconds() - server_before
        result.machine_busy = busy_fraction(machine_before, psutil.cpu_times())
        after, _ = live_counters(server)
        result.live_events = {k: v - before.get(k, 0.0) for k, v in after.items()}
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)


def measure_fanout(redis: str, seconds: float) -> FanoutResult:
    from django_tenants.utils import schema_context

    from tenants.models import Tenant
    from tenants.services import issue_api_key, revoke_api_key

    save_routes([fanout_route()])
    tenant = Tenant.objects.get(schema_name=BENCH_TENANT)
    dashboard_key = issue_api_key(tenant=tenant, scopes=["replay.read"], name="bench dashboards")
    resolve_key = issue_api_key(tenant=tenant, scopes=["resolve"], name="bench resolves")
    result = FanoutResult(
        dashboards=DASHBOARDS,
        rate_target=RATE_PER_S,
        events_per_resolve=SOURCES,
        config={**server_config(WORKERS), "channel layer": f"channels_redis at {redis}"},
    )
    env = {**os.environ, "REDIS_URL": redis}
    try:
        with running_server(WORKERS, env, "uvicorn-observability.log") as server:
            asyncio.run(
                fan_out(
                    server,
                    ROUTE,
                    (dashboard_key.plain_key, resolve_key.plain_key),
                    seconds,
                    result,
                )
            )
    finally:
        with schema_context("public"):
            revoke_api_key(api_key=dashboard_key.api_key)
            revoke_api_key(api_key=resolve_key.api_key)
    return result
