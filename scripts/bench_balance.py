"""``BENCH_ONLY=balance``: the pool strategies of a route (``model.balance``) against each other.

Two bench upstreams in processes of their own (``scripts/bench_gateway_upstream.py``): a fast one
that answers after ``FAST_MS`` and a slow one after ``SLOW_MS``, each a deployment of the demo
tenant. One route per strategy lists them slow first: ``fallback`` (no balance: every call to
the first listed), ``weighted`` (1:1), ``least_busy`` and ``latency``. The gateway (uvicorn, one
worker, as ``make run`` serves it) takes ``CLIENTS`` concurrent clients on each route in turn,
in rounds whose order is shuffled, so that the machine's noise falls on all alike. The upstreams
are slow enough that 32 clients do not saturate the gateway's one worker (with answers in tens of
milliseconds its CPU is the queue every strategy waits in, and the strategies' differences drown
in the machine's noise): the client's
p50, p99 and mean latency, the calls a second and each deployment's share of the calls (the
``x-context-deployment`` header). The strategy with the lowest mean latency (``best``) is the
default (``deployments/balancing.py`` ``DEFAULT_STRATEGY``).

Everything the bench adds to the demo tenant (two deployments, four routes, an API key and the
replay records of its calls) is removed afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from scripts.bench_env import load_average, utc_now
from scripts.bench_gateway import Process, gateway_env, running, upstream_command
from scripts.bench_http import HOST, LOG_DIR, running_server
from scripts.bench_server import free_port
from scripts.bench_setup import DEMO_TENANT, ROOT, demo_tenant, log
from scripts.report import write_section

FAST_MS = 300.0
SLOW_MS = 1500.0
CLIENTS = 32
CALLS = 480  # per route and round
QUICK_CALLS = 128
ROUNDS = 3
QUICK_ROUNDS = 1
FAST = "bench-balance-fast"
SLOW = "bench-balance-slow"
KEY_NAME = "bench-balance"
UPSTREAM_KEY = "sk-bench-upstream"
STRATEGIES: dict[str, dict[str, Any] | None] = {
    "fallback": None,
    "weighted": {"strategy": "weighted"},
    "least_busy": {"strategy": "least_busy"},
    "latency": {"strategy": "latency"},
}
START = "<!-- bench:balance -->"
END = "<!-- /bench:balance -->"
BODY = json.dumps(
    {"model": "", "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 16}
)


def route_name(strategy: str) -> str:
    return f"bench-balance-{strategy.replace('_', '-')}"


@dataclass
class StrategyRun:
    latencies_ms: list[float] = field(default_factory=list)
    shares: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def summary(self) -> dict[str, Any]:
        calls = len(self.latencies_ms)
        return {
            "calls": calls,
            "p50_ms": round(self.percentile(0.50), 1),
            "p99_ms": round(self.percentile(0.99), 1),
            "mean_ms": round(statistics.fmean(self.latencies_ms), 1) if calls else None,
            "calls_per_s": round(calls / self.seconds, 1) if self.seconds else None,
            "share_fast": round(self.shares[FAST] / calls, 3) if calls else None,
            "share_slow": round(self.shares[SLOW] / calls, 3) if calls else None,
            "errors": dict(self.errors),
        }


@dataclass
class BalanceResults:
    date: str
    quick: bool
    runs: dict[str, StrategyRun] = field(default_factory=dict)
    load_average: Any = None
    runtime_s: float = 0.0

    def best(self) -> str:
        """The balanced strategy with the lowest mean latency: with a fixed number of clients,
        the most calls a second too. Not the p99: any strategy that sends the slow deployment
        more than one call in a hundred has the slow deployment's own time as its p99."""
        balanced = {name: run for name, run in self.runs.items() if name != "fallback"}
        return min(balanced, key=lambda name: statistics.fmean(balanced[name].latencies_ms))


def prepare(fast_port: int, slow_port: int) -> tuple[str, Any]:
    from django_tenants.utils import schema_context

    from contextplatform.deployments.services import parse_deployment, upsert_deployment
    from contextplatform.routes.configuration.schema import validate_route_spec
    from contextplatform.routes.services import upsert_route
    from tenants.models import Tenant
    from tenants.services import issue_api_key

    tenant = demo_tenant("balance")
    allowlist = list(tenant.outbound_allowlist or [])
    if HOST not in allowlist:  # the gateway's SSRF guard refuses loopback otherwise
        Tenant.objects.filter(pk=tenant.pk).update(outbound_allowlist=[*allowlist, HOST])
    with schema_context(DEMO_TENANT):
        for name, port in ((FAST, fast_port), (SLOW, slow_port)):
            spec = parse_deployment(
                {
                    "name": name,
                    "protocol": "openai",
                    "base_url": f"http://{HOST}:{port}/v1",
                    "model": "bench-model",
                    "api_key": UPSTREAM_KEY,
                    "timeout_ms": 30000,
                    "may_judge": False,
                }
            )
            upsert_deployment(spec=spec, api_key=spec.api_key)
        for strategy, balance in STRATEGIES.items():
            model: dict[str, Any] = {"upstream": [SLOW, FAST]}
            if balance is not None:
                model["balance"] = balance
            route = {
                "name": route_name(strategy),
                "description": "Balancing benchmark (BENCH_ONLY=balance, removed afterwards).",
                "model": model,
                "context": {"sources": []},
            }
            upsert_route(spec=validate_route_spec(route))
    issued = issue_api_key(tenant=tenant, scopes=["resolve"], name=KEY_NAME)
    return issued.plain_key, issued.api_key.pk


def clean(key_id: Any) -> None:
    from django_tenants.utils import schema_context

    from contextplatform.deployments.selectors import deployment_named
    from contextplatform.deployments.services import delete_deployment
    from contextplatform.replay.models import ReplayRecord
    from contextplatform.routes.models import Route
    from contextplatform.routes.services import delete_route
    from tenants.models import ApiKey
    from tenants.services import revoke_api_key

    names = [route_name(strategy) for strategy in STRATEGIES]
    with schema_context(DEMO_TENANT):
        removed, _ = ReplayRecord.objects.filter(route__in=names).delete()
        for route in Route.objects.filter(name__in=names):
            delete_route(route=route)
        for name in (FAST, SLOW):
            deployment = deployment_named(name)
            if deployment is not None:
                delete_deployment(deployment=deployment)
    if key_id is not None:
        revoke_api_key(api_key=ApiKey.objects.get(pk=key_id))
    log(f"balance: removed the bench routes, deployments, key and {removed} replay records")


async def load(base_url: str, key: str, route: str, calls: int, run: StrategyRun) -> None:
    body = BODY.replace('"model": ""', f'"model": "{route}"').encode()
    left = calls
    headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            started = time.perf_counter()
            try:
                response = await client.post("/v1/chat/completions", content=body)
            except httpx.HTTPError as error:
                run.errors[type(error).__name__] += 1
                continue
            if response.status_code != 200:
                run.errors[str(response.status_code)] += 1
                continue
            run.latencies_ms.append((time.perf_counter() - started) * 1000)
            run.shares[response.headers.get("x-context-deployment", "?")] += 1

    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60.0)
            )
            for _ in range(CLIENTS)
        ]
        started = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for client in clients))
        run.seconds += time.perf_counter() - started


def upstream(name: str, port: int, delay_ms: float) -> contextlib.AbstractContextManager[Process]:
    command = [*upstream_command(port), "--delay-ms", str(delay_ms)]
    return running(name, command, gateway_env(), "/", port, ROOT)


def run_balance(quick: bool) -> BalanceResults:
    started = time.perf_counter()
    results = BalanceResults(date=utc_now(), quick=quick)
    calls, rounds = (QUICK_CALLS, QUICK_ROUNDS) if quick else (CALLS, ROUNDS)
    fast_port, slow_port = free_port(), free_port()
    key_id = None
    with contextlib.ExitStack() as stack:
        stack.enter_context(upstream("bench-balance-fast", fast_port, FAST_MS))
        stack.enter_context(upstream("bench-balance-slow", slow_port, SLOW_MS))
        try:
            key, key_id = prepare(fast_port, slow_port)
            log("balance: uvicorn (1 worker) …")
            gateway = stack.enter_context(
                running_server(1, gateway_env(), log_name="uvicorn-balance.log")
            )
            base_url = f"http://{HOST}:{gateway.port}"
            for strategy in STRATEGIES:  # a warm-up: connections, caches, the first averages
                asyncio.run(load(base_url, key, route_name(strategy), CLIENTS, StrategyRun()))
            results.runs = {strategy: StrategyRun() for strategy in STRATEGIES}
            for index in range(rounds):
                order = list(STRATEGIES)
                random.shuffle(order)
                log(f"balance: round {index + 1}/{rounds}: {', '.join(order)}")
                for strategy in order:
                    asyncio.run(
                        load(base_url, key, route_name(strategy), calls, results.runs[strategy])
                    )
        finally:
            stack.close()
            clean(key_id)
    results.load_average = load_average()
    results.runtime_s = time.perf_counter() - started
    saved = LOG_DIR / "balance.json"
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(
        json.dumps({name: run.summary() for name, run in results.runs.items()}, indent=2)
    )
    return results


def write_balance(results: BalanceResults, docs_dir: Path, revision: str) -> list[Path]:
    rows = [
        "| strategy | p50 ms | p99 ms | mean ms | calls/s | share fast | share slow | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, run in results.runs.items():
        s = run.summary()
        rows.append(
            f"| {name} | {s['p50_ms']} | {s['p99_ms']} | {s['mean_ms']} | {s['calls_per_s']} | "
            f"{s['share_fast']} | {s['share_slow']} | {s['errors'] or 'none'} |"
        )
    text = "\n\n".join(
        [
            START,
            "## Balancing a route's pool",
            f"Two loopback upstreams, one answering after {FAST_MS:g} ms and one after "
            f"{SLOW_MS:g} ms, listed slow first in each route; {CLIENTS} concurrent clients "
            "through the gateway (uvicorn, one worker), "
            f"{len(next(iter(results.runs.values())).latencies_ms)} calls per strategy in "
            "shuffled rounds. `fallback` is the route without `model.balance` (every call to the "
            f"first listed). Lowest mean latency (and most calls a second) of the balanced "
            f"strategies: **{results.best()}**, the default of `model.balance`; the p99 of a "
            "strategy that sends the slow deployment more than one call in a hundred is that "
            "deployment's own time.",
            "\n".join(rows),
            f"Run {results.date}, revision {revision}{' (BENCH_QUICK)' if results.quick else ''}, "
            f"{results.runtime_s:.0f} s, load average {results.load_average}. "
            "`scripts/bench_balance.py`; `BENCH_ONLY=balance make bench` refreshes this section.",
            END,
        ]
    )
    return [write_section(docs_dir, text, START, END)]


def print_balance(results: BalanceResults) -> None:
    for name, run in results.runs.items():
        print(f"  {name:<11} {run.summary()}")
    print(f"  best (lowest mean latency): {results.best()}")


__all__ = ["BalanceResults", "print_balance", "run_balance", "write_balance"]
