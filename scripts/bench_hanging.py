"""Section "hanging": what a source stuck past its deadline still costs the resolve after it.

The demo tenant's ``support`` route (guardrails, profile, history, the ``support-kb`` documents)
with one more source, ``stuck``, whose ``timeout_ms`` is 300 and whose peer never answers, one
route per way a source can hang:

* ``external_api``: a ``rag`` source on the ``external_api`` backend whose HTTP peer on loopback
  accepts the connection, reads the request and never answers (a process of its own);
* ``realtime_apis``: a live connector to the same silent peer;
* ``mcp``: a ``rag`` source on the ``mcp`` backend calling a tool of an MCP server built with the
  official SDK (``MCPServer`` over Streamable HTTP, a process of its own) that never returns;
* ``database``: a ``rag`` source on ``vectorstore`` over ``support-kb`` (its results not cached)
  while another connection holds the chunk table locked, so the recall's statement waits on the
  lock until its ``statement_timeout`` (what is left of the deadline) cancels it.

``none`` is the ``support`` route as it is, the baseline. Each is resolved by
``use_cases.resolve_context`` (recorded, the session turn begun, as ``POST /api/v1/resolve`` runs
it) for user ``u_123`` in a session of the bench's own, in process and over loopback HTTP
(``POST /api/v1/resolve`` against uvicorn, one worker, one client). **Post-deadline** is the
resolve's wall time minus the 300 ms timeout (for ``none``: its whole wall time, the work after
the fetch the others do too). **now** is the code as it is; **before** the same resolve with
``sources.fetch`` as it was at ``BEFORE_COMMIT`` (its ``fetch_one``, loaded from git, in place of
today's: the wait for the cancelled fetch to unwind), in process swapped in for its rounds and
over HTTP in a server of its own (``python -m scripts.bench_hanging serve before PORT``). In
process, rounds run both in a fresh random order; over HTTP the two servers take turns round by
round. What the bench adds to the demo tenant (routes, its MCP server, the loopback allow-list
entry, its session and replay records) is removed afterwards.

``python -m scripts.bench_hanging silent PORT`` and ``... mcp PORT`` run the peers.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from scripts.bench_env import load_average, utc_now
from scripts.bench_server import running_module
from scripts.bench_setup import (
    DEMO_TENANT,
    ROOT,
    copy_demo_session,
    ensure_demo_documents,
    log,
    module_at,
)
from scripts.bench_stats import Sizes

TIMEOUT_MS = 300
BEFORE_COMMIT = "7668f06"
SESSION = "s_bench_hanging"
ROUTE_PREFIX = "bench-hang-"
MCP_SERVER_NAME = "bench-stuck"
KINDS = ("none", "external_api", "realtime_apis", "mcp", "database")
CODES = ("before", "now")
PATHS = ("in_process", "http")
SEED = 23
STARTUP_TIMEOUT_S = 60.0
LOOPBACK = "127.0.0.1"


FULL = Sizes(rounds=200, warmup=10)
QUICK = Sizes(rounds=30, warmup=3)


@dataclass(frozen=True)
class Sample:
    wall_ms: float  # the whole resolve, as its caller saw it
    after_ms: float  # from the stuck source's deadline (none: the fetch's end) to the answer
    # the stuck source's own ms minus its timeout: how long its outcome waited past the deadline
    # (the wait for the cut fetch to unwind); 0 for none
    held_ms: float
    outcome: str  # the stuck source's status and error ("-" for none)


@dataclass
class Series:
    """One hang kind, one code, one path."""

    samples: list[Sample] = field(default_factory=list)

    def over_timeout(self, kind: str) -> list[float]:
        """Wall time minus the timeout (the issue's measure; none: its whole wall time)."""
        offset = 0.0 if kind == "none" else TIMEOUT_MS
        return [s.wall_ms - offset for s in self.samples]

    def after_deadline(self) -> list[float]:
        return [s.after_ms for s in self.samples]

    def held(self) -> list[float]:
        return [s.held_ms for s in self.samples]

    def outcomes(self) -> dict[str, int]:
        counted: dict[str, int] = {}
        for sample in self.samples:
            counted[sample.outcome] = counted.get(sample.outcome, 0) + 1
        return counted


@dataclass
class HangingResults:
    date: str
    quick: bool
    sizes: Sizes
    series: dict[tuple[str, str, str], Series] = field(default_factory=dict)  # path, kind, code
    load_before: str = ""
    load_after: str = ""
    runtime_s: float = 0.0

    def of(self, path: str, kind: str, code: str) -> Series:
        return self.series.setdefault((path, kind, code), Series())


# --- the peers ------------------------------------------------------------------------------------


async def serve_silent(port: int) -> None:
    """Accepts, reads what comes, never answers."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while await reader.read(65536):
                pass
        writer.close()

    server = await asyncio.start_server(handle, LOOPBACK, port, backlog=1024)
    async with server:
        await server.serve_forever()


def serve_mcp(port: int) -> None:
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench-stuck", version="1", log_level="WARNING")

    @server.tool(description="Never answers")
    async def stuck(query: str) -> str:
        await asyncio.Event().wait()
        return query

    uvicorn.run(
        server.streamable_http_app(),
        host=LOOPBACK,
        port=port,
        log_level="warning",
        access_log=False,
    )


def serve_api(code: str, port: int) -> None:
    """uvicorn with the platform's ASGI app, one worker; ``before``: ``sources.fetch`` of
    ``BEFORE_COMMIT`` in place of today's."""
    import uvicorn

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "contextplatform.settings")
    import django

    django.setup()
    if code == "before":
        use_before()
    report_clock()
    uvicorn.run(
        "contextplatform.asgi:application",
        host=LOOPBACK,
        port=port,
        log_level="warning",
        access_log=False,
    )


def report_clock() -> None:
    """In the bench's own servers only: the report also carries, on the machine's monotonic clock
    (``time.perf_counter``, the same in every process), when the stuck source's deadline fell and
    when the fetch ended, so the client can time the answer from them."""
    from contextplatform.resolve.resolver import Resolution

    plain = Resolution.report

    def report(self: Resolution) -> dict[str, Any]:
        return {**plain(self), "bench_clock": clock_of(self.outcomes)}

    Resolution.report = report  # type: ignore[method-assign]


def clock_of(outcomes: list[Any]) -> dict[str, float]:
    stuck = [o for o in outcomes if o.name == "stuck"]
    fetched_at = max(o.ended_at for o in outcomes)
    deadline_at = stuck[0].started_at + TIMEOUT_MS / 1000 if stuck else fetched_at
    return {"deadline_at": deadline_at, "fetched_at": fetched_at}


@contextlib.contextmanager
def running(*args: str) -> Iterator[int]:
    """``python -m scripts.bench_hanging <args> PORT`` on a free port, until the block ends."""
    log_path = ROOT / "var" / "bench" / f"hanging-{'-'.join(args)}.log"
    what = " ".join(args)
    with running_module(
        "scripts.bench_hanging", list(args), log_path, what, STARTUP_TIMEOUT_S, ROOT
    ) as port:
        yield port


# --- before: sources.fetch of BEFORE_COMMIT ---------------------------------------------------


def before_module() -> ModuleType:
    return module_at(BEFORE_COMMIT, "sources/fetch.py", "bench_hanging_before_fetch")


_BEFORE: dict[str, Callable[..., Any]] = {}


def use_before() -> None:
    """Today's ``fetch_source`` calls ``fetch_one`` by its module name: the old one goes there."""
    import sources.fetch

    if not _BEFORE:
        before = before_module().fetch_one

        async def fetch_one_before(
            source: Any, request: Any, estimator: Any, started_at: float | None = None
        ) -> Any:
            # Today's fetch_source also passes when a fetch began on the request's thread; the
            # old fetch_one knew no such thing (every fetch began on the loop).
            return await before(source, request, estimator)

        _BEFORE["old"] = fetch_one_before
        _BEFORE["now"] = sources.fetch.fetch_one
    sources.fetch.fetch_one = _BEFORE["old"]  # type: ignore[assignment]


def use_now() -> None:
    import sources.fetch

    if _BEFORE:
        sources.fetch.fetch_one = _BEFORE["now"]  # type: ignore[assignment]


@contextlib.contextmanager
def code(name: str) -> Iterator[None]:
    if name == "before":
        use_before()
    try:
        yield
    finally:
        use_now()


# --- the routes -----------------------------------------------------------------------------------


def stuck_source(kind: str, silent_port: int) -> dict[str, Any] | None:
    common = {"name": "stuck", "priority": 20, "timeout_ms": TIMEOUT_MS}
    silent = f"http://{LOOPBACK}:{silent_port}"
    if kind == "none":
        return None
    if kind == "external_api":
        return {
            **common,
            "type": "rag",
            "backend": "external_api",
            "backend_config": {"endpoint": f"{silent}/search", "timeout_ms": 5000},
        }
    if kind == "realtime_apis":
        return {
            **common,
            "type": "realtime_apis",
            "connectors": [{"name": "rates", "url": f"{silent}/rates", "timeout_ms": 5000}],
        }
    if kind == "mcp":
        return {
            **common,
            "type": "rag",
            "backend": "mcp",
            "backend_config": {"server_name": MCP_SERVER_NAME, "tool_name": "stuck"},
        }
    if kind == "database":
        return {
            **common,
            "type": "rag",
            "backend": "vectorstore",
            "backend_config": {"collection": "support-kb"},
            "cache_results": False,
        }
    raise ValueError(kind)


def route_of(kind: str, silent_port: int) -> dict[str, Any]:
    from contextplatform.demo.defaults import SUPPORT_ROUTE_CORE

    route = copy.deepcopy(SUPPORT_ROUTE_CORE)
    route["name"] = f"{ROUTE_PREFIX}{kind}"
    route["description"] = "Hanging-source benchmark route (make bench)."
    stuck = stuck_source(kind, silent_port)
    if stuck is not None:
        route["context"]["sources"].append(stuck)
    return route


@contextlib.contextmanager
def prepared(silent_port: int, mcp_port: int) -> Iterator[Any]:
    """The demo tenant's routes, MCP server, loopback allow-list and session of the bench; all
    removed afterwards. Yields the tenant."""
    from django_tenants.utils import get_public_schema_name, schema_context

    from contextplatform.replay.models import ReplayRecord
    from contextplatform.replay.writer import REPLAY_WRITER
    from contextplatform.routes.configuration.schema import validate_route_spec
    from contextplatform.routes.models import Route
    from contextplatform.routes.services import upsert_route
    from sources.mcp.services import create_server, parse_server
    from sources.models import ChatSession, McpServer
    from tenants.models import Tenant

    with schema_context(get_public_schema_name()):
        tenants = Tenant.objects.filter(schema_name=DEMO_TENANT)
        previous = tenants.get().outbound_allowlist
        tenants.update(outbound_allowlist=[*previous, LOOPBACK])
    try:
        with schema_context(DEMO_TENANT):
            ensure_demo_documents("hanging")
            McpServer.objects.filter(name=MCP_SERVER_NAME).delete()
            create_server(
                spec=parse_server(
                    {
                        "name": MCP_SERVER_NAME,
                        "url": f"http://{LOOPBACK}:{mcp_port}/mcp",
                        "timeout_ms": 5000,
                    }
                )
            )
            for kind in KINDS:
                upsert_route(spec=validate_route_spec(route_of(kind, silent_port)))
            copy_demo_session(SESSION)
        tenant = Tenant.objects.get(schema_name=DEMO_TENANT)
        with schema_context(DEMO_TENANT):  # as the tenant middleware selects it
            yield tenant
    finally:
        REPLAY_WRITER.flush()
        with schema_context(DEMO_TENANT):
            removed, _ = ReplayRecord.objects.filter(session_key=SESSION).delete()
            ChatSession.objects.filter(key=SESSION).delete()
            Route.objects.filter(name__startswith=ROUTE_PREFIX).delete()
            McpServer.objects.filter(name=MCP_SERVER_NAME).delete()
        with schema_context(get_public_schema_name()):
            Tenant.objects.filter(schema_name=DEMO_TENANT).update(outbound_allowlist=previous)
        log(f"hanging: removed the bench's routes, MCP server, session, {removed} replay records")


@contextlib.contextmanager
def hang_for(kind: str) -> Iterator[None]:
    """For ``database``: another connection holds the demo's chunk table locked meanwhile."""
    if kind != "database":
        yield
        return
    import psycopg
    from django.db import connection

    from sources.models import Chunk

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    with psycopg.connect(**params) as holder:
        with holder.cursor() as cursor:
            cursor.execute(
                f"LOCK TABLE {DEMO_TENANT}.{Chunk._meta.db_table} IN ACCESS EXCLUSIVE MODE"
            )
        yield
        holder.rollback()


# --- one resolve ----------------------------------------------------------------------------------


def body_of(kind: str) -> dict[str, Any]:
    from contextplatform.demo.defaults import DEMO_RESOLVE_BODY, DEMO_USER

    return {
        **DEMO_RESOLVE_BODY,
        "route": f"{ROUTE_PREFIX}{kind}",
        "user": DEMO_USER,
        "session": SESSION,
    }


def resolve_in_process(tenant: Any, kind: str, *, strict: bool = True) -> Sample:
    """One ``resolve_context`` of the kind's route."""
    from contextplatform.replay.writer import REPLAY_WRITER
    from contextplatform.resolve.use_cases import ResolveCall, resolve_context

    body = body_of(kind)
    started = time.perf_counter()
    resolution = resolve_context(
        ResolveCall(
            tenant=tenant,
            route=body["route"],
            request_body=body["request"],
            user=body["user"],
            session=body["session"],
        )
    )
    ended = time.perf_counter()
    REPLAY_WRITER.flush()  # off the resolve path; not into the next one
    clock = clock_of(resolution.outcomes)
    return Sample(
        wall_ms=(ended - started) * 1000,
        after_ms=(ended - clock["deadline_at"]) * 1000,
        held_ms=held_ms(resolution.source_reports()),
        outcome=outcome_words(kind, resolution.source_reports(), strict=strict),
    )


def held_ms(reports: list[dict[str, Any]]) -> float:
    stuck = [r for r in reports if r["name"] == "stuck"]
    return float(stuck[0]["ms"]) - TIMEOUT_MS if stuck else 0.0


def outcome_words(kind: str, reports: list[dict[str, Any]], *, strict: bool = True) -> str:
    """The stuck source's status and error ("-" for none); a demo source that did not succeed
    beside it (the machine's load can hold one past its own timeout) is named after it."""
    by_name = {report["name"]: report for report in reports}
    others = [
        f"{name} {r['status']}"
        for name, r in by_name.items()
        if name != "stuck" and r["status"] != "ok"
    ]
    stuck = by_name.get("stuck")
    words = "-" if stuck is None else f"{stuck['status']}: {stuck.get('error')}"
    if others and strict:
        words += f" (beside it: {', '.join(others)})"
    return words


@contextlib.contextmanager
def api_key(tenant: Any) -> Iterator[str]:
    """A key of the demo tenant for the HTTP rounds, deleted afterwards."""
    from django_tenants.utils import get_public_schema_name, schema_context

    from tenants.services import issue_api_key

    with schema_context(get_public_schema_name()):
        issued = issue_api_key(tenant=tenant, scopes=["resolve"], name="bench-hanging")
    try:
        yield issued.plain_key
    finally:
        with schema_context(get_public_schema_name()):
            issued.api_key.delete()


def resolve_over_http(client: Any, kind: str, *, strict: bool = True) -> Sample:
    """One ``POST /api/v1/resolve`` of the kind's route, timed by the client."""
    payload = json.dumps(body_of(kind)).encode()
    started = time.perf_counter()
    response = client.post("/api/v1/resolve", content=payload)
    ended = time.perf_counter()
    if response.status_code != 200:
        raise RuntimeError(f"{kind}: HTTP {response.status_code}: {response.text[:500]}")
    report = response.json()
    return Sample(
        wall_ms=(ended - started) * 1000,
        after_ms=(ended - report["bench_clock"]["deadline_at"]) * 1000,
        held_ms=held_ms(report["sources"]),
        outcome=outcome_words(kind, report["sources"], strict=strict),
    )


# --- the run --------------------------------------------------------------------------------------


def in_process_rounds(tenant: Any, sizes: Sizes, results: HangingResults) -> None:
    order = random.Random(SEED)
    for kind in KINDS:  # warm, the routes' caches filled, before any hang is held
        for _ in range(sizes.warmup):
            for name in CODES:
                with code(name):
                    resolve_in_process(tenant, kind, strict=False)
    for kind in KINDS:
        log(f"hanging: in process, {kind}: {sizes.rounds} rounds x {len(CODES)} …")
        with hang_for(kind):
            for _ in range(sizes.rounds):
                for name in order.sample(list(CODES), len(CODES)):
                    with code(name):
                        sample = resolve_in_process(tenant, kind)
                    results.of("in_process", kind, name).samples.append(sample)


def http_rounds(tenant: Any, sizes: Sizes, results: HangingResults) -> None:
    import httpx

    order = random.Random(SEED + 1)
    with contextlib.ExitStack() as stack:
        key = stack.enter_context(api_key(tenant))
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        clients = {}
        for name in CODES:
            port = stack.enter_context(running("serve", name))
            clients[name] = stack.enter_context(
                httpx.Client(base_url=f"http://{LOOPBACK}:{port}", headers=headers, timeout=30.0)
            )
        for kind in KINDS:
            for _ in range(sizes.warmup):
                for name in CODES:
                    resolve_over_http(clients[name], kind, strict=False)
        for kind in KINDS:
            log(f"hanging: over HTTP, {kind}: {sizes.rounds} rounds x {len(CODES)} …")
            with hang_for(kind):
                for _ in range(sizes.rounds):
                    for name in order.sample(list(CODES), len(CODES)):
                        sample = resolve_over_http(clients[name], kind)
                        results.of("http", kind, name).samples.append(sample)


def run_hanging(quick: bool) -> HangingResults:
    started = time.perf_counter()
    sizes = QUICK if quick else FULL
    results = HangingResults(date=utc_now(), quick=quick, sizes=sizes, load_before=load_average())
    with (
        running("silent") as silent_port,
        running("mcp") as mcp_port,
        prepared(silent_port, mcp_port) as tenant,
    ):
        in_process_rounds(tenant, sizes, results)
        http_rounds(tenant, sizes, results)
    results.load_after = load_average()
    results.runtime_s = time.perf_counter() - started
    return results


def main() -> None:
    what = sys.argv[1]
    if what == "silent":
        asyncio.run(serve_silent(int(sys.argv[2])))
    elif what == "mcp":
        serve_mcp(int(sys.argv[2]))
    elif what == "serve":
        serve_api(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit(f"unknown: {what}")


if __name__ == "__main__":
    main()
