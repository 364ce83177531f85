"""Section 9: connectors, the fetch overhead of each source kind over its peer's own latency.

Each connector is measured against a real peer on loopback, in its own process, and the overhead
is what the source's fetch adds to calling that peer directly:

* ``mcp_resources``: an MCP server built with the official SDK (``scripts/bench_mcp_server.py``:
  ``MCPServer`` over Streamable HTTP, one uvicorn worker) serving a static resource and a template
  filled by the user. *Direct* is a bare SDK client connected once and kept open, reading the same
  two resources at once: the server's handling and the loopback round trips, what any client pays.
  *Fetch* is the source's fetch as a resolve runs it (``sources.fetch.fetch_source``: its deadline,
  the server's row and header values as the process remembers them for a second, the SDK client
  over the HTTP client kept for the event loop, the two reads, the items built, logged and
  counted). For context, *connecting each time*
  is a bare SDK client opened for every read with the SDK's defaults (its own TLS context, the
  version probe), which is what the source avoids.

* ``realtime_apis``: a live HTTP API in its own process (``scripts/bench_realtime_server.py``: a
  bare ASGI app on uvicorn, one worker) answering a user's balances and the exchange rates.
  *Direct* is a bare httpx client, its connections kept open, making the same two GETs at once and
  decoding both answers. *Fetch* is the source's fetch with two connectors (``{user}`` in one's
  path; no cache): its deadline, the templates filled and encoded, the guarded client kept for
  the loop and allow-list (a worker's resolves share one loop; every request and hop checked, its
  connections reused), the bounded reads, the JSON paths, the items built, logged and counted.
  For context: a bare client opening a new connection for every call (httpx's defaults: a TLS
  context of its own each time), and the fetch served from its per-user cache
  (``cache_ttl_seconds`` 5: two reads of Django's cache).

Rounds alternate the sides in a fresh random order, so that the machine's noise falls on all of
them alike; a round's overhead is the fetch minus the direct read of the same round. The bench
tenant gets a loopback allow-list entry and an MCP server for the run; both are removed afterwards.

Other connectors add a ``measure_<kind>`` function to ``MEASUREMENTS``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

from scripts.bench_env import load_average, utc_now
from scripts.bench_http import LOG_DIR
from scripts.bench_server import LOOPBACK, running_module
from scripts.bench_setup import BENCH_TENANT, ROOT, ensure_tenant, log

TARGET_P50_MS = 2.0
SEED = 19
STARTUP_TIMEOUT_S = 60.0
MCP_SERVER_NAME = "bench-crm"
MCP_RESOURCES = ["bench://customers/{user}", "bench://status"]
BENCH_USER = "u_bench"


@dataclass(frozen=True)
class Sizes:
    rounds: int
    warmup: int
    connect_rounds: int  # of the "connecting each time" context series (slow: fewer)


FULL = Sizes(rounds=2000, warmup=100, connect_rounds=200)
QUICK = Sizes(rounds=200, warmup=20, connect_rounds=20)


@dataclass
class ConnectorRun:
    """One connector: the direct calls of its peer and the source's fetches, round by round."""

    kind: str
    peer: str
    direct_label: str
    direct_ms: list[float] = field(default_factory=list)
    fetch_ms: list[float] = field(default_factory=list)
    # Further series shown for context only (label → samples), never part of the check.
    context_ms: dict[str, list[float]] = field(default_factory=dict)
    items: int = 0
    notes: list[str] = field(default_factory=list)

    def overhead(self) -> list[float]:
        return [fetch - direct for fetch, direct in zip(self.fetch_ms, self.direct_ms, strict=True)]


@dataclass
class ConnectorsResults:
    quick: bool
    sizes: Sizes
    runs: list[ConnectorRun] = field(default_factory=list)
    date: str = ""
    load_before: str = ""
    load_after: str = ""
    runtime_s: float = 0.0


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


async def alternate(
    direct: Callable[[], Awaitable[object]],
    fetch: Callable[[], Awaitable[object]],
    sizes: Sizes,
    run: ConnectorRun,
) -> None:
    """Warm-up calls of both, then ``sizes.rounds`` rounds of one call of each, in a fresh random
    order each round."""
    for _ in range(sizes.warmup):
        await direct()
        await fetch()
    rng = random.Random(SEED)
    for _ in range(sizes.rounds):
        sides = [("direct", direct), ("fetch", fetch)]
        rng.shuffle(sides)
        measured = {name: await timed(call) for name, call in sides}
        run.direct_ms.append(measured["direct"])
        run.fetch_ms.append(measured["fetch"])


# --- mcp_resources -------------------------------------------------------------------------------


@contextmanager
def running_peer(module: str, log_name: str, what: str, path: str = "") -> Iterator[str]:
    """``python -m <module> <port>`` on a free loopback port (its output in LOG_DIR/<log_name>),
    yielding its URL (``path`` on it) once it listens; stopped afterwards."""
    with running_module(module, [], LOG_DIR / log_name, what, STARTUP_TIMEOUT_S, ROOT) as port:
        yield f"http://{LOOPBACK}:{port}{path}"


def running_mcp_server() -> AbstractContextManager[str]:
    return running_peer(
        "scripts.bench_mcp_server", "mcp-server.log", "the bench MCP server", "/mcp"
    )


@contextmanager
def registered_mcp_server(url: str) -> Iterator[None]:
    """The bench tenant's MCP server and a loopback allow-list entry, both removed afterwards."""
    from django_tenants.utils import get_public_schema_name, schema_context

    from sources.mcp.services import create_server, parse_server
    from sources.models import McpServer
    from tenants.models import Tenant

    with schema_context(get_public_schema_name()):
        tenants = Tenant.objects.filter(schema_name=BENCH_TENANT)
        previous = tenants.get().outbound_allowlist
        tenants.update(outbound_allowlist=[*previous, "127.0.0.1"])
    try:
        with schema_context(BENCH_TENANT):
            McpServer.objects.filter(name=MCP_SERVER_NAME).delete()
            spec = parse_server(
                {
                    "name": MCP_SERVER_NAME,
                    "url": url,
                    "headers": {"Authorization": "Bearer bench-only"},
                    "timeout_ms": 5000,
                }
            )
            create_server(spec=spec)
        yield
    finally:
        with schema_context(BENCH_TENANT):
            McpServer.objects.filter(name=MCP_SERVER_NAME).delete()
        with schema_context(get_public_schema_name()):
            Tenant.objects.filter(schema_name=BENCH_TENANT).update(outbound_allowlist=previous)


async def mcp_rounds(url: str, sizes: Sizes, run: ConnectorRun) -> None:
    from asgiref.sync import sync_to_async
    from mcp import Client

    from contextplatform.core.estimation import default_estimator
    from sources.base import ContextRequest
    from sources.fetch import fetch_source
    from sources.mcp.resources import McpResourcesSettings, McpResourcesSource
    from tenants.models import Tenant

    # Run through async_to_sync from a thread in the bench tenant's schema, as the resolver runs
    # fetch_all: the source's database work comes back to that thread and its connection.
    tenant = await sync_to_async(Tenant.objects.get)(schema_name=BENCH_TENANT)
    source = McpResourcesSource(
        McpResourcesSettings(
            name="crm", server=MCP_SERVER_NAME, resources=MCP_RESOURCES, timeout_ms=5000
        )
    )
    request = ContextRequest(
        request_id="rsv_bench_connectors",
        tenant=BENCH_TENANT,
        route="bench-connectors",
        user=BENCH_USER,
        session=None,
        query="where is my refund?",
        allowlist=tuple(tenant.outbound_allowlist),
    )
    uris = [uri.replace("{user}", BENCH_USER) for uri in MCP_RESOURCES]
    estimator = default_estimator()

    async with Client(url, cache=None) as bare:

        async def direct() -> None:
            await asyncio.gather(*(bare.read_resource(uri) for uri in uris))

        async def fetch() -> None:
            outcome = await fetch_source(source, request, estimator)
            if outcome.status != "ok":
                raise RuntimeError(f"mcp_resources fetch {outcome.status}: {outcome.error}")
            run.items = len(outcome.items)

        await alternate(direct, fetch, sizes, run)

    async def connect_each_time() -> None:
        async with Client(url, cache=None) as fresh:
            await asyncio.gather(*(fresh.read_resource(uri) for uri in uris))

    series = run.context_ms.setdefault("bare SDK client, connecting each time", [])
    for _ in range(sizes.connect_rounds):
        series.append(await timed(connect_each_time))


def measure_mcp_resources(sizes: Sizes) -> ConnectorRun:
    run = ConnectorRun(
        kind="mcp_resources",
        peer="MCP server (official SDK, Streamable HTTP, 1 uvicorn worker, own process)",
        direct_label="bare SDK client, session kept open",
    )
    from asgiref.sync import async_to_sync
    from django_tenants.utils import schema_context

    with running_mcp_server() as url, registered_mcp_server(url):
        log(f"connectors: mcp_resources, {sizes.rounds} rounds against {url} …")
        with schema_context(BENCH_TENANT):
            async_to_sync(mcp_rounds)(url, sizes, run)
    run.notes.append(
        f"{len(MCP_RESOURCES)} resources per fetch ({', '.join(MCP_RESOURCES)}), read at once; "
        f"{run.items} items"
    )
    return run


# --- realtime_apis -------------------------------------------------------------------------------


def running_realtime_api() -> AbstractContextManager[str]:
    return running_peer("scripts.bench_realtime_server", "realtime-api.log", "the bench live API")


@contextmanager
def loopback_allowed() -> Iterator[tuple[str, ...]]:
    """The bench tenant's allow-list with loopback added for the run (yielded), then restored."""
    from django_tenants.utils import get_public_schema_name, schema_context

    from tenants.models import Tenant

    with schema_context(get_public_schema_name()):
        tenants = Tenant.objects.filter(schema_name=BENCH_TENANT)
        previous = tenants.get().outbound_allowlist
        tenants.update(outbound_allowlist=[*previous, "127.0.0.1"])
    try:
        yield (*previous, "127.0.0.1")
    finally:
        with schema_context(get_public_schema_name()):
            Tenant.objects.filter(schema_name=BENCH_TENANT).update(outbound_allowlist=previous)


def realtime_connectors(base: str, cache_ttl_seconds: int) -> list[dict[str, object]]:
    return [
        {
            "name": "balance",
            "url": base + "/accounts/{user}/balance",
            "select": "$.accounts[*]",
            "timeout_ms": 1000,
            "cache_ttl_seconds": cache_ttl_seconds,
        },
        {
            "name": "rates",
            "url": base + "/rates",
            "select": "$.rates",
            "timeout_ms": 1000,
            "cache_ttl_seconds": cache_ttl_seconds,
        },
    ]


async def realtime_rounds(
    base: str, allowlist: tuple[str, ...], sizes: Sizes, run: ConnectorRun
) -> None:
    import httpx

    from contextplatform.core.estimation import default_estimator
    from sources.base import ContextRequest
    from sources.fetch import fetch_source
    from sources.kinds.realtime_apis import RealtimeApisSettings, RealtimeApisSource

    def source(cache_ttl_seconds: int) -> RealtimeApisSource:
        connectors = realtime_connectors(base, cache_ttl_seconds)
        settings = RealtimeApisSettings.model_validate(
            {"name": "live", "connectors": connectors, "timeout_ms": 5000}
        )
        return RealtimeApisSource(settings)

    live, cached = source(0), source(5)
    request = ContextRequest(
        request_id="rsv_bench_connectors",
        tenant=BENCH_TENANT,
        route="bench-connectors",
        user=BENCH_USER,
        session="s_bench",
        query="what is my balance in dollars?",
        allowlist=allowlist,
    )
    urls = [f"{base}/accounts/{BENCH_USER}/balance", f"{base}/rates"]
    estimator = default_estimator()

    async def fetch_with(chosen: RealtimeApisSource) -> None:
        outcome = await fetch_source(chosen, request, estimator)
        if outcome.status != "ok":
            raise RuntimeError(f"realtime_apis fetch {outcome.status}: {outcome.error}")
        run.items = len(outcome.items)

    async with httpx.AsyncClient(trust_env=False) as bare:

        async def direct() -> None:
            answers = await asyncio.gather(*(bare.get(url) for url in urls))
            for answer in answers:
                answer.raise_for_status()
                answer.json()

        async def fetch() -> None:
            await fetch_with(live)

        await alternate(direct, fetch, sizes, run)

    async def new_connection_each_time() -> None:
        async with httpx.AsyncClient(trust_env=False) as fresh:
            answers = await asyncio.gather(*(fresh.get(url) for url in urls))
            for answer in answers:
                answer.json()

    series = run.context_ms.setdefault("bare httpx client, a new connection each time", [])
    for _ in range(sizes.connect_rounds):
        series.append(await timed(new_connection_each_time))
    await fetch_with(cached)  # fills the cache; then every fetch is served from it
    hits = run.context_ms.setdefault("the source's fetch from its cache (cache_ttl_seconds 5)", [])
    for _ in range(sizes.connect_rounds):
        hits.append(await timed(lambda: fetch_with(cached)))


def measure_realtime_apis(sizes: Sizes) -> ConnectorRun:
    from asgiref.sync import async_to_sync

    run = ConnectorRun(
        kind="realtime_apis",
        peer="a live HTTP API (bare ASGI app, 1 uvicorn worker, own process)",
        direct_label="bare httpx client, connections kept open",
    )
    with running_realtime_api() as base, loopback_allowed() as allowlist:
        log(f"connectors: realtime_apis, {sizes.rounds} rounds against {base} …")
        async_to_sync(realtime_rounds)(base, allowlist, sizes, run)
    run.notes.append(
        f"2 connectors per fetch (GET /accounts/{{user}}/balance, GET /rates), called at once; "
        f"{run.items} items"
    )
    return run


# In the section's order; each returns one connector's run.
MEASUREMENTS: list[Callable[[Sizes], ConnectorRun]] = [
    measure_mcp_resources,
    measure_realtime_apis,
]


def run_connectors(quick: bool) -> ConnectorsResults:
    started = time.perf_counter()
    sizes = QUICK if quick else FULL
    ensure_tenant(BENCH_TENANT)
    results = ConnectorsResults(
        quick=quick, sizes=sizes, date=utc_now(), load_before=load_average()
    )
    for measure in MEASUREMENTS:
        results.runs.append(measure(sizes))
    results.load_after = load_average()
    results.runtime_s = time.perf_counter() - started
    return results
