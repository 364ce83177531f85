"""Section 8: the gateway's overhead over calling the model directly, beside LiteLLM's proxy.

One loopback upstream model (``scripts/bench_gateway_upstream.py``, its own process: OpenAI Chat
Completions, a fixed short answer with usage, or a stream of a few pieces) is called four ways in
the same run: directly; through the platform's gateway (``POST /v1/chat/completions`` under uvicorn,
one worker, as ``make run`` serves it) on a route without sources and on a copy of the demo route
(its sources: guardrails, profile, history, documents), both forwarding to a deployment that points
at the upstream; and through LiteLLM's proxy (``litellm --config … --num_workers 1``, installed by
the bench into ``.bench/litellm-venv``) whose model list points at the same upstream.

Sequential requests run in rounds: every round calls each target once non-streaming, then once
streaming, each time in a fresh random order, so that the machine's noise falls on all of them
alike; the overhead of a target is its latency minus the direct call's of the same round. Then
requests/s at 32 concurrent clients, with ``wrk`` (an ``httpx`` client in its own process when
``wrk`` cannot be installed), target after target in alternating rounds.

Everything the bench adds to the demo tenant (a deployment, two routes, an API key, the session
and replay records of its calls) is removed afterwards.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from contextplatform.demo.defaults import DEMO_QUESTION, DEMO_USER, SUPPORT_ROUTE_CORE
from scripts.bench_env import load_average, utc_now
from scripts.bench_gateway_upstream import ANSWER_PIECES
from scripts.bench_http import (
    HOST,
    LOG_DIR,
    Server,
    database_cpu_seconds,
    running_server,
    server_config,
)
from scripts.bench_server import ServerProcess, free_port, tree_cpu_seconds
from scripts.bench_setup import (
    DEMO_TENANT,
    ROOT,
    demo_tenant,
    ensure_demo_documents,
    log,
)

# LiteLLM's proxy, pinned: the newest release whose ``[proxy]`` extra resolves from PyPI here
# (1.108.8 and later pin litellm-enterprise / litellm-proxy-extras releases PyPI does not serve).
LITELLM_VERSION = "1.108.7"
BENCH_DIR = ROOT / ".bench"
LITELLM_VENV = BENCH_DIR / "litellm-venv"
LITELLM_MASTER_KEY = "sk-bench-litellm-master"
UPSTREAM_KEY = "sk-bench-upstream"  # what both proxies send the upstream (it checks nothing)
INSTALL_TIMEOUT_S = 1200.0
STARTUP_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0

DEPLOYMENT = "bench-gateway-upstream"
# Fallbacks are on in every measured route, as they are in LiteLLM's model list: a second
# deployment (the same upstream under another name) the call would move to.
DEPLOYMENT_FALLBACK = "bench-gateway-fallback"
# A deployment nothing listens on: the failover route tries it first, every call (the gateway
# runs with GATEWAY_FALLBACK_COOLDOWN_S=0, so it is never left out), then the upstream.
DEPLOYMENT_DEAD = "bench-gateway-dead"
DEPLOYMENTS = (DEPLOYMENT, DEPLOYMENT_FALLBACK, DEPLOYMENT_DEAD)
ROUTE_BARE = "bench-gateway-bare"
ROUTE_DEMO = "bench-gateway-demo"
ROUTE_FAILOVER = "bench-gateway-failover"
ROUTES = (ROUTE_BARE, ROUTE_DEMO, ROUTE_FAILOVER)
SESSION = "s_bench_gateway"
SESSION_CALLS = 8  # calls per session of the demo route: up to 16 messages of history
KEY_NAME = "bench-gateway"
# The gateway's key carries a rate limit and a budget, as an application's would: checked on
# every call (requests and tokens a minute counted, the budget reserved and settled in SQL), set
# high enough that no call of the run is refused.
BENCH_KEY: dict[str, Any] = {
    "name": KEY_NAME,
    "scopes": ["resolve"],
    "rate_limit": {"rpm": 1_000_000, "tpm": 1_000_000_000},
    "budget": {"max_usd": 10_000.0, "max_tokens": None, "period": "day"},
}
BENCH_PRICE = {"input_per_mtok": 0.15, "output_per_mtok": 0.60}
UPSTREAM_MODEL = "bench-model"
FALLBACK_MODEL = "bench-model-fallback"
ANSWER = "".join(ANSWER_PIECES)

DIRECT, GATEWAY, GATEWAY_DEMO, LITELLM = "direct", "gateway", "gateway-demo", "litellm"
BARE, GATEWAY_FAILOVER = "bare-proxy", "gateway-failover"
LABELS = {
    DIRECT: "direct (upstream)",
    BARE: "bare forwarding proxy (uvicorn + aiohttp)",
    GATEWAY: "gateway, route without sources",
    GATEWAY_DEMO: "gateway, demo route",
    GATEWAY_FAILOVER: "gateway, first deployment down",
    LITELLM: f"LiteLLM proxy {LITELLM_VERSION}",
}

TARGET_P50_MS = 3.0
TARGET_P99_MS = 10.0
TARGET_TTFT_MS = 3.0
TARGET_LITELLM_SHARE = 0.25  # the gateway's added latency, at most this share of LiteLLM's
TARGET_BARE_LATENCY = 3.0  # ... at most this many times the bare proxy's
TARGET_BARE_RPS = 0.33  # requests/s, at least this share of the bare proxy's
TARGET_FAILOVER_MS = 5.0  # a failover to the second deployment, beyond the failed attempt
FAILED_ATTEMPT_PROBES = 200
LITELLM_PUBLISHED_MS = 3.25  # LiteLLM's own published median overhead
CLIENTS = 32
SEED = 11
SETTLE_TIMEOUT_S = 30.0
SETTLE_WINDOW_S = 0.5
SETTLE_BUSY = 0.05
RESULTS_FILE = "results.json"
GATEWAY_LOG = "uvicorn-gateway.log"
DRAIN_TIMEOUT_S = 60.0
DRAIN_PROBE_OK_MS = 1000.0
# BENCH_GATEWAY_PROFILE=1: after the measurements, py-spy samples the gateway's process while
# it serves sequential calls (route without sources, then the demo route) and a load run, and the
# top frames are written beside the results (var/bench/gateway/profile-*.txt).
PROFILE_ENV = "BENCH_GATEWAY_PROFILE"
PY_SPY_VERSION = "0.4.3"
PY_SPY_VENV = BENCH_DIR / "py-spy-venv"
PROFILE_RATE_HZ = 250
PROFILE_TOP = 40
OWN_CODE = ("contextplatform/", "tenants/", "sources/", "memory/", "compression/")
STATEMENT_SETTLE_S = 1.5
STATEMENT_CALLS = 20  # calls per kind whose SQL statements the gateway's counters count
STATEMENT_METRICS = ("django_db_execute_total", "django_db_execute_many_total")


@dataclass(frozen=True)
class Sizes:
    rounds: int
    warmup: int
    load_rounds: int
    load_seconds: float


FULL_SIZES = Sizes(rounds=1000, warmup=50, load_rounds=3, load_seconds=10.0)
QUICK_SIZES = Sizes(rounds=150, warmup=15, load_rounds=1, load_seconds=3.0)


# Results -----------------------------------------------------------------------------------------


@dataclass
class LoadRun:
    """One load run against one target: what the load tool counted and the servers' CPU."""

    target: str
    requests: int
    seconds: float
    errors: dict[str, int]
    p50_ms: float
    p99_ms: float
    server_cpu_s: float
    database_cpu_s: float | None = None

    @property
    def failed(self) -> int:
        return sum(self.errors.values())

    @property
    def ok(self) -> int:
        return max(self.requests - self.errors.get("status", 0), 0)


@dataclass
class GatewayResults:
    date: str
    quick: bool
    sizes: Sizes
    targets: list[str]
    litellm_version: str = LITELLM_VERSION
    litellm_problem: str = ""  # why LiteLLM is missing from the run, when it is
    load_tool: str = ""
    # Per target, one value per measured round (None when that call failed).
    latency_ms: dict[str, list[float | None]] = field(default_factory=dict)
    ttft_ms: dict[str, list[float | None]] = field(default_factory=dict)
    stream_ms: dict[str, list[float | None]] = field(default_factory=dict)
    failures: dict[str, dict[str, int]] = field(default_factory=dict)
    load: list[LoadRun] = field(default_factory=list)
    config: dict[str, str] = field(default_factory=dict)
    litellm_settings: dict[str, str] = field(default_factory=dict)
    load_average: str = ""
    runtime_s: float = 0.0
    profiles: dict[str, str] = field(default_factory=dict)  # name -> its top-frames file
    # The gateway's log lines at WARNING and above, counted by message (ids masked).
    server_log: dict[str, int] = field(default_factory=dict)
    # Gateway targets: SQL statements per call, non-streaming and streaming (replay writes in).
    statements: dict[str, dict[str, float]] = field(default_factory=dict)
    # A failed attempt on its own: a client's connection to the dead deployment's port refused,
    # median of FAILED_ATTEMPT_PROBES (what the failover target pays before moving on).
    failed_attempt_ms: float | None = None
    key_limits: dict[str, Any] = field(default_factory=dict)  # the bench key's limits, as set

    def has(self, target: str) -> bool:
        return target in self.targets

    def samples(self, measure: str, target: str) -> list[float]:
        return [value for value in getattr(self, measure)[target] if value is not None]

    def added(self, measure: str, target: str) -> list[float]:
        """``target`` minus the direct call of the same round, where both succeeded."""
        rounds = zip(getattr(self, measure)[target], getattr(self, measure)[DIRECT], strict=True)
        return [via - direct for via, direct in rounds if via is not None and direct is not None]

    def load_of(self, target: str) -> list[LoadRun]:
        return [run for run in self.load if run.target == target]

    def requests_per_s(self, target: str) -> float:
        runs = self.load_of(target)
        seconds = sum(run.seconds for run in runs)
        return sum(run.ok for run in runs) / seconds if seconds else float("nan")

    def cpu_ms_per_request(self, target: str, *, database: bool = False) -> float | None:
        runs = self.load_of(target)
        requests = sum(run.ok for run in runs)
        if not requests:
            return None
        if database:
            if any(run.database_cpu_s is None for run in runs):
                return None
            return sum(run.database_cpu_s or 0.0 for run in runs) / requests * 1000
        return sum(run.server_cpu_s for run in runs) / requests * 1000


# The targets -------------------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    url: str
    headers: dict[str, str]
    model: str
    # The demo route's calls name a session: a new one every SESSION_CALLS calls, so its history
    # stays the length of a conversation instead of growing with the run.
    sessions: bool = False
    calls: int = 0

    def session(self, call: int) -> str:
        return f"{SESSION}-{call // SESSION_CALLS}"

    def next_headers(self) -> dict[str, str]:
        self.calls += 1
        if not self.sessions:
            return self.headers
        return {**self.headers, "x-session-id": self.session(self.calls)}

    def body(self, stream: bool) -> bytes:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": DEMO_QUESTION}],
        }
        if stream:
            body["stream"] = True
        return json.dumps(body).encode()


def targets(
    upstream_port: int,
    gateway: ServerProcess,
    gateway_key: str,
    litellm_port: int | None,
    bare_port: int | None = None,
    failover: bool = False,
) -> list[Target]:
    json_type = {"content-type": "application/json"}
    gateway_headers = {**json_type, "authorization": f"Bearer {gateway_key}"}
    upstream_headers = {**json_type, "authorization": f"Bearer {UPSTREAM_KEY}"}
    made = [
        Target(
            DIRECT,
            f"http://{HOST}:{upstream_port}/v1/chat/completions",
            upstream_headers,
            UPSTREAM_MODEL,
        ),
        Target(GATEWAY, f"{gateway.base_url}/v1/chat/completions", gateway_headers, ROUTE_BARE),
        Target(
            GATEWAY_DEMO,
            f"{gateway.base_url}/v1/chat/completions",
            {**gateway_headers, "x-user-id": DEMO_USER},
            ROUTE_DEMO,
            sessions=True,
        ),
    ]
    if bare_port is not None:
        made.append(
            Target(
                BARE,
                f"http://{HOST}:{bare_port}/v1/chat/completions",
                upstream_headers,
                UPSTREAM_MODEL,
            )
        )
    if failover:
        made.append(
            Target(
                GATEWAY_FAILOVER,
                f"{gateway.base_url}/v1/chat/completions",
                gateway_headers,
                ROUTE_FAILOVER,
            )
        )
    if litellm_port is not None:
        made.append(
            Target(
                LITELLM,
                f"http://{HOST}:{litellm_port}/v1/chat/completions",
                {**json_type, "authorization": f"Bearer {LITELLM_MASTER_KEY}"},
                UPSTREAM_MODEL,
            )
        )
    return made


# The demo tenant's bench deployment and routes ---------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    key: str
    key_id: Any
    limits: dict[str, Any] = field(default_factory=dict)  # the key's rate limit and budget


def bare_route() -> dict[str, Any]:
    return {
        "name": ROUTE_BARE,
        "description": "Gateway benchmark: no sources (make bench, removed afterwards).",
        "model": {
            "name": UPSTREAM_MODEL,
            "context_window": 128000,
            "max_output_tokens": 1024,
            "upstream": [DEPLOYMENT, DEPLOYMENT_FALLBACK],
        },
        "context": {"sources": []},
    }


def failover_route() -> dict[str, Any]:
    route = bare_route()
    route["name"] = ROUTE_FAILOVER
    route["description"] = "Gateway benchmark: first deployment down (removed afterwards)."
    route["model"]["upstream"] = [DEPLOYMENT_DEAD, DEPLOYMENT]
    return route


def demo_route() -> dict[str, Any]:
    """The demo's support route as the benchmarks measure it, forwarding to the bench upstream."""
    route = copy.deepcopy(SUPPORT_ROUTE_CORE)
    route["name"] = ROUTE_DEMO
    route["description"] = "Gateway benchmark: the demo route (make bench, removed afterwards)."
    route["model"]["upstream"] = [DEPLOYMENT, DEPLOYMENT_FALLBACK]
    return route


def prepare_tenant(upstream_port: int, dead_port: int | None = None) -> Prepared:
    """The bench's deployments, routes and key in the demo tenant. ``dead_port``: where the
    failover route's first deployment points (nothing may listen there), a free port if None."""
    from django_tenants.utils import schema_context

    from contextplatform.deployments.services import parse_deployment, upsert_deployment
    from contextplatform.routes.configuration.schema import validate_route_spec
    from contextplatform.routes.services import upsert_route
    from tenants.key_schema import KeySpec
    from tenants.key_services import create_key
    from tenants.models import Tenant

    tenant = demo_tenant("gateway")
    allowlist = list(tenant.outbound_allowlist or [])
    if HOST not in allowlist:  # the gateway's SSRF guard refuses loopback otherwise
        Tenant.objects.filter(pk=tenant.pk).update(outbound_allowlist=[*allowlist, HOST])
    with schema_context(DEMO_TENANT):
        ensure_demo_documents("gateway")
        ports = {DEPLOYMENT: upstream_port, DEPLOYMENT_FALLBACK: upstream_port}
        dead = free_port() if dead_port is None else dead_port
        for name, port in {**ports, DEPLOYMENT_DEAD: dead}.items():
            spec = parse_deployment(
                {
                    "name": name,
                    "protocol": "openai",
                    "base_url": f"http://{HOST}:{port}/v1",
                    "model": UPSTREAM_MODEL,
                    "api_key": UPSTREAM_KEY,
                    "timeout_ms": 30000,
                    # Like the demo's stand-in: it cannot judge relevance, so the local judge runs.
                    "may_judge": False,
                    # Priced, so that the key's USD budget can hold each call's cost.
                    "price": BENCH_PRICE,
                },
                prefix="bench deployment",
            )
            upsert_deployment(spec=spec, api_key=spec.api_key)
        for route in (bare_route(), demo_route(), failover_route()):
            upsert_route(spec=validate_route_spec(route))
        forget_session()
    issued = create_key(tenant=tenant, spec=KeySpec(**BENCH_KEY), granter_scopes=["resolve"])
    shown = {"rate_limit": BENCH_KEY["rate_limit"], "budget": BENCH_KEY["budget"]}
    return Prepared(key=issued.plain_key, key_id=issued.api_key.pk, limits=shown)


def forget_session() -> None:
    from sources.models import ChatSession

    ChatSession.objects.filter(key__startswith=SESSION, user_id=DEMO_USER).delete()


def clean_tenant(prepared: Prepared | None) -> None:
    """Remove what the run added to the demo tenant (after the server has drained its writes)."""
    from django_tenants.utils import schema_context

    from contextplatform.deployments.selectors import deployment_named
    from contextplatform.deployments.services import delete_deployment
    from contextplatform.replay.models import ReplayRecord
    from contextplatform.routes.models import Route
    from contextplatform.routes.services import delete_route
    from tenants.models import ApiKey
    from tenants.services import revoke_api_key

    with schema_context(DEMO_TENANT):
        removed, _ = ReplayRecord.objects.filter(route__in=ROUTES).delete()
        for route in Route.objects.filter(name__in=ROUTES):
            delete_route(route=route)
        for name in DEPLOYMENTS:
            deployment = deployment_named(name)
            if deployment is not None:
                delete_deployment(deployment=deployment)
        forget_session()
    if prepared is not None:
        revoke_api_key(api_key=ApiKey.objects.get(pk=prepared.key_id))
    log(f"gateway: removed the bench routes, deployments, key and {removed} replay records")


# Processes: the upstream, LiteLLM ----------------------------------------------------------------


@dataclass
class Process:
    name: str
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.process)


def wait_http(process: Process, path: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.process.poll() is not None:
            raise RuntimeError(f"{process.name} exited early; see {process.log_path}")
        try:
            if httpx.get(f"http://{HOST}:{process.port}{path}", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{process.name} not ready after {timeout_s:.0f} s; see {process.log_path}")


def stop(process: Process) -> None:
    if process.process.poll() is None:
        process.process.send_signal(signal.SIGTERM)
    try:
        process.process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.process.kill()
        process.process.wait()


@contextlib.contextmanager
def running(
    name: str, command: list[str], env: dict[str, str], ready_path: str, port: int, cwd: Path
) -> Iterator[Process]:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"{name}.log"
    with log_path.open("wb") as sink:
        popen = subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT)
    process = Process(name=name, process=popen, port=port, log_path=log_path)
    try:
        wait_http(process, ready_path, STARTUP_TIMEOUT_S)
        yield process
    finally:
        stop(process)


def running_upstream(port: int, env: dict[str, str]) -> contextlib.AbstractContextManager[Process]:
    """The bench upstream (``scripts.bench_gateway_upstream``) on ``port``, until the block ends."""
    return running("bench-upstream", upstream_command(port), env, "/", port, ROOT)


def upstream_command(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "scripts.bench_gateway_upstream",
        "--port",
        str(port),
        "--parent",
        str(os.getpid()),
    ]


def litellm_bin(name: str) -> Path:
    return LITELLM_VENV / "bin" / name


def install_litellm() -> str:
    """LiteLLM's proxy in a virtualenv of its own (created once per pinned version); returns
    why it could not be installed, or "" when it is there."""
    marker = LITELLM_VENV / f".installed-litellm-{LITELLM_VERSION}"
    if marker.exists() and litellm_bin("litellm").exists():
        return ""
    python = shutil.which("python3.11") or sys.executable
    log(f"gateway: installing litellm[proxy]=={LITELLM_VERSION} into {LITELLM_VENV} …")
    shutil.rmtree(LITELLM_VENV, ignore_errors=True)
    steps = [
        [python, "-m", "venv", str(LITELLM_VENV)],
        [
            str(litellm_bin("pip")),
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"litellm[proxy]=={LITELLM_VERSION}",
        ],
    ]
    for step in steps:
        try:
            completed = subprocess.run(
                step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"`{' '.join(step[:3])} …` failed: {error}"
        if completed.returncode != 0:
            errors = [line for line in completed.stderr.splitlines() if "ERROR" in line]
            reason = (errors[-1] if errors else completed.stderr.strip()[-300:]) or "no output"
            return f"`pip install litellm[proxy]=={LITELLM_VERSION}` failed: {reason}"
    marker.touch()
    return ""


def litellm_config(upstream_port: int) -> dict[str, Any]:
    return {
        "model_list": [
            {
                "model_name": name,
                "litellm_params": {
                    "model": f"openai/{UPSTREAM_MODEL}",
                    "api_base": f"http://{HOST}:{upstream_port}/v1",
                    "api_key": UPSTREAM_KEY,
                },
            }
            for name in (UPSTREAM_MODEL, FALLBACK_MODEL)
        ],
        # Fallbacks on, as on the gateway's routes: the same upstream under a second name.
        "router_settings": {"fallbacks": [{UPSTREAM_MODEL: [FALLBACK_MODEL]}]},
        "litellm_settings": {
            "telemetry": False,
            "callbacks": [],
            "success_callback": [],
            "failure_callback": [],
            "set_verbose": False,
        },
        "general_settings": {"master_key": LITELLM_MASTER_KEY, "disable_spend_logs": True},
    }


# Nothing in LiteLLM's environment may reach out: no database, no Redis, no telemetry, the model
# cost map read from the package instead of fetched; WARNING logs (no access log, as the gateway).
LITELLM_ENV = {
    "LITELLM_TELEMETRY_DISABLED": "true",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "WARNING",
    "LITELLM_MASTER_KEY": LITELLM_MASTER_KEY,
}
LITELLM_DROPPED_ENV = (
    "DATABASE_URL",
    "REDIS_URL",
    "REDIS_HOST",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
)


def litellm_command(config: Path, port: int) -> list[str]:
    return [
        str(litellm_bin("litellm")),
        "--config",
        str(config),
        "--host",
        HOST,
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]


def litellm_settings(command: list[str]) -> dict[str, str]:
    shown = " ".join(["litellm", *command[1:]]).replace(str(ROOT) + "/", "")
    return {
        "version": f"litellm[proxy]=={LITELLM_VERSION} in `.bench/litellm-venv` (Python 3.11)",
        "command": re.sub(r"--port \d+", "--port <free port>", shown),
        "model list": f"`{UPSTREAM_MODEL}` and `{FALLBACK_MODEL}` → `openai/{UPSTREAM_MODEL}`, "
        "`api_base` the upstream; `router_settings.fallbacks`: the first falls back to the second",
        "auth": "`general_settings.master_key` set, sent as `Authorization: Bearer` (no database, "
        "so the key is compared with the master key; the gateway looks its key up in PostgreSQL)",
        "off": "no database, no Redis, `callbacks` / `success_callback` / `failure_callback` "
        "empty, `disable_spend_logs`, telemetry off (`LITELLM_TELEMETRY_DISABLED=true`, "
        "`telemetry: false`), local model cost map (`LITELLM_LOCAL_MODEL_COST_MAP=True`), "
        "`LITELLM_LOG=WARNING` (no access log)",
    }


# Measuring: sequential rounds --------------------------------------------------------------------


class CallFailed(Exception):
    pass


def answer_text(raw: bytes) -> str:
    try:
        return str(json.loads(raw)["choices"][0]["message"]["content"])
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise CallFailed(f"unreadable answer: {raw[:200]!r}") from error


def timed_call(client: httpx.Client, target: Target, body: bytes) -> float:
    started = time.perf_counter()
    response = client.post(target.url, content=body, headers=target.next_headers())
    elapsed_ms = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise CallFailed(f"HTTP {response.status_code}: {response.content[:300]!r}")
    if answer_text(response.content) != ANSWER:
        raise CallFailed(f"unexpected answer {response.content[:300]!r}")
    return elapsed_ms


def delta_text(line: str) -> str:
    if not line.startswith("data: ") or line == "data: [DONE]":
        return ""
    try:
        choices = json.loads(line[6:]).get("choices") or []
    except ValueError as error:
        raise CallFailed(f"unreadable event {line[:200]!r}") from error
    if not choices:
        return ""
    return str((choices[0].get("delta") or {}).get("content") or "")


def timed_stream(client: httpx.Client, target: Target, body: bytes) -> tuple[float, float]:
    """Milliseconds to the first content delta and to the end of the stream."""
    started = time.perf_counter()
    first: float | None = None
    text = []
    headers = target.next_headers()
    with client.stream("POST", target.url, content=body, headers=headers) as response:
        if response.status_code != 200:
            response.read()
            raise CallFailed(f"HTTP {response.status_code}: {response.content[:300]!r}")
        for line in response.iter_lines():
            piece = delta_text(line)
            if piece and first is None:
                first = time.perf_counter()
            text.append(piece)
    ended = time.perf_counter()
    if first is None or "".join(text) != ANSWER:
        raise CallFailed(f"unexpected stream text {''.join(text)[:200]!r}")
    return (first - started) * 1000, (ended - started) * 1000


def check_targets(
    clients: dict[str, httpx.Client], made: list[Target], results: GatewayResults
) -> list[Target]:
    """One call of each kind per target before measuring. LiteLLM answering wrongly leaves it
    out of the run (said on the page); any other target stops the section with its answer."""
    kept = []
    for target in made:
        try:
            timed_call(clients[target.name], target, target.body(False))
            timed_stream(clients[target.name], target, target.body(True))
        except (CallFailed, httpx.HTTPError) as error:
            if target.name != LITELLM:
                raise RuntimeError(f"{target.name}: the first calls failed: {error}") from error
            results.litellm_problem = f"the proxy did not answer as expected: {error}"
            log(f"gateway: LiteLLM left out: {results.litellm_problem}")
            continue
        kept.append(target)
    return kept


def measure_rounds(
    clients: dict[str, httpx.Client], made: list[Target], sizes: Sizes, results: GatewayResults
) -> None:
    order = random.Random(SEED)
    bodies = {t.name: (t.body(False), t.body(True)) for t in made}
    for measure in ("latency_ms", "ttft_ms", "stream_ms"):
        setattr(results, measure, {t.name: [] for t in made})
    results.failures = {t.name: {} for t in made}
    for index in range(sizes.warmup + sizes.rounds):
        keep = index >= sizes.warmup
        for target in order.sample(made, len(made)):
            value: float | None = None
            try:
                value = timed_call(clients[target.name], target, bodies[target.name][0])
            except (CallFailed, httpx.HTTPError) as error:
                failed(results, target.name, "non-streaming", error)
            if keep:
                results.latency_ms[target.name].append(value)
        for target in order.sample(made, len(made)):
            ttft: float | None = None
            whole: float | None = None
            try:
                ttft, whole = timed_stream(clients[target.name], target, bodies[target.name][1])
            except (CallFailed, httpx.HTTPError) as error:
                failed(results, target.name, "streaming", error)
            if keep:
                results.ttft_ms[target.name].append(ttft)
                results.stream_ms[target.name].append(whole)
        if (index + 1) % 250 == 0:
            log(f"gateway: {index + 1} of {sizes.warmup + sizes.rounds} rounds")


def failed(results: GatewayResults, target: str, kind: str, error: Exception) -> None:
    counts = results.failures[target]
    name = f"{kind}: {type(error).__name__}"
    if name not in counts:
        log(f"gateway: {target} {kind} call failed: {error}")
    counts[name] = counts.get(name, 0) + 1


def sql_statements(server: Server) -> float:
    """The statements the server's processes executed so far (django-prometheus's counters)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{server.base_url}/metrics", timeout=10.0).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in STATEMENT_METRICS:
                total += sample.value
    return total


def count_statements(
    clients: dict[str, httpx.Client], made: list[Target], gateway: Server
) -> dict[str, dict[str, float]]:
    counted: dict[str, dict[str, float]] = {}
    for target in made:
        if target.name not in (GATEWAY, GATEWAY_DEMO):
            continue
        counted[target.name] = {}
        for stream in (False, True):
            before = sql_statements(gateway)
            for _ in range(STATEMENT_CALLS):
                if stream:
                    timed_stream(clients[target.name], target, target.body(True))
                else:
                    timed_call(clients[target.name], target, target.body(False))
            time.sleep(STATEMENT_SETTLE_S)  # the replay writer's batch lands
            per_call = (sql_statements(gateway) - before) / STATEMENT_CALLS
            counted[target.name]["streaming" if stream else "non-streaming"] = per_call
    return counted


# Measuring: load ---------------------------------------------------------------------------------


def ensure_wrk() -> str | None:
    """``wrk``'s path, installed with apt-get when missing and possible; None otherwise."""
    found = shutil.which("wrk")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None:
        return None
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*sudo, apt, "install", "-y", "-q", "--no-install-recommends", "wrk"]
    log("gateway: apt-get install wrk …")
    for attempt in (install, [*sudo, apt, "update", "-q"], install):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(attempt, env=env, capture_output=True, timeout=600, check=False)
        if shutil.which("wrk"):
            return shutil.which("wrk")
    return None


def wrk_version(path: str) -> str:
    completed = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    words = (completed.stdout + completed.stderr).split()
    return f"wrk {words[1]}" if len(words) > 1 else "wrk"


WRK_SCRIPT = """wrk.method = "POST"
wrk.body = {body}
{headers}
{sessions}
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'LOAD_JSON {{"requests": %d, "duration_us": %d, "connect": %d, "read": %d, "write": %d, '
    .. '"status": %d, "timeout": %d, "p50_us": %d, "p99_us": %d}}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


WRK_SESSIONS = """calls = 0
request = function()
  calls = calls + 1
  wrk.headers["x-session-id"] = {prefix} .. math.floor(calls / {calls})
  return wrk.format()
end
"""


WRK_ERRORS = ("connect", "read", "write", "status", "timeout")


def marked_json(output: str, marker: str) -> dict[str, Any] | None:
    """The summary a load generator printed as one line, ``<marker> <JSON>``; None without one."""
    line = next((x for x in output.splitlines() if x.startswith(f"{marker} ")), None)
    return json.loads(line.removeprefix(f"{marker} ")) if line else None


def load_errors(summary: dict[str, Any]) -> dict[str, int]:
    """The kinds of failed request a load summary counts, those that happened."""
    return {kind: int(summary[kind]) for kind in WRK_ERRORS if summary[kind]}


def lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def wrk_script(target: Target, folder: Path) -> Path:
    headers = "\n".join(
        f"wrk.headers[{lua_string(name)}] = {lua_string(value)}"
        for name, value in target.headers.items()
    )
    sessions = WRK_SESSIONS.format(prefix=lua_string(f"{SESSION}-load-"), calls=SESSION_CALLS)
    path = folder / f"wrk-{target.name}.lua"
    path.write_text(
        WRK_SCRIPT.format(
            body=lua_string(target.body(False).decode()),
            headers=headers,
            sessions=sessions if target.sessions else "",
        ),
        encoding="utf-8",
    )
    return path


def load_command(target: Target, wrk: str | None, folder: Path, seconds: float) -> list[str]:
    if wrk is not None:
        # One wrk thread drives the 32 connections: a second would take a core from the servers.
        return [
            wrk,
            "-t1",
            f"-c{CLIENTS}",
            f"-d{seconds:g}s",
            "--timeout",
            "30s",
            "-s",
            str(wrk_script(target, folder)),
            target.url,
        ]
    body = folder / f"body-{target.name}.json"
    body.write_bytes(target.body(False))
    headers = [arg for n, v in target.headers.items() for arg in ("--header", f"{n}: {v}")]
    if target.sessions:
        headers += ["--session-prefix", f"{SESSION}-load-", "--session-calls", str(SESSION_CALLS)]
    return [
        sys.executable,
        "-m",
        "scripts.bench_gateway_load",
        "--url",
        target.url,
        "--body",
        str(body),
        *headers,
        "--clients",
        str(CLIENTS),
        "--seconds",
        f"{seconds:g}",
    ]


def run_load(target: Target, command: list[str], server_cpu: Any, seconds: float) -> LoadRun:
    server_before = server_cpu()
    database_before = database_cpu_seconds() if target.name.startswith(GATEWAY) else None
    completed = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 120, check=False
    )
    server_s = server_cpu() - server_before
    database_after = database_cpu_seconds() if database_before is not None else None
    summary = marked_json(completed.stdout, "LOAD_JSON")
    if summary is None:
        raise RuntimeError(
            f"load run against {target.name} printed no summary:\n"
            f"{completed.stdout[-2000:]}\n{completed.stderr[-2000:]}"
        )
    return LoadRun(
        target=target.name,
        requests=int(summary["requests"]),
        seconds=summary["duration_us"] / 1e6,
        errors=load_errors(summary),
        p50_ms=summary["p50_us"] / 1000,
        p99_ms=summary["p99_us"] / 1000,
        server_cpu_s=server_s,
        database_cpu_s=(
            database_after - database_before
            if database_before is not None and database_after is not None
            else None
        ),
    )


def measure_load(
    made: list[Target],
    cpu_of: dict[str, Any],
    sizes: Sizes,
    results: GatewayResults,
) -> None:
    wrk = ensure_wrk()
    results.load_tool = (
        f"{wrk_version(wrk)} (`-t1 -c{CLIENTS}`, a Lua script for the POST)"
        if wrk
        else f"httpx {httpx.__version__}, {CLIENTS} asyncio clients in a process of their own "
        "(`scripts/bench_gateway_load.py`; wrk could not be installed)"
    )
    folder = LOG_DIR / "gateway"
    folder.mkdir(parents=True, exist_ok=True)
    order = random.Random(SEED + 1)
    for round_index in range(sizes.load_rounds):
        for target in order.sample(made, len(made)):
            settle(list(dict.fromkeys(cpu_of.values())))
            log(
                f"gateway: load round {round_index + 1}/{sizes.load_rounds}, {target.name}, "
                f"{CLIENTS} clients, {sizes.load_seconds:g} s …"
            )
            command = load_command(target, wrk, folder, sizes.load_seconds)
            results.load.append(run_load(target, command, cpu_of[target.name], sizes.load_seconds))
            drain(target)


def drain(target: Target) -> None:
    """Wait until the target answers one call within DRAIN_PROBE_OK_MS again: the calls the load
    tool left in flight when it stopped may still hold the server (waiting, not on the CPU)."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    with httpx.Client(timeout=DRAIN_TIMEOUT_S) as client:
        while time.monotonic() < deadline:
            try:
                if timed_call(client, target, target.body(False)) < DRAIN_PROBE_OK_MS:
                    return
            except (CallFailed, httpx.HTTPError):
                time.sleep(0.5)
    log(f"gateway: {target.name} still slow {DRAIN_TIMEOUT_S:g} s after its load run")


def settle(cpu_readers: list[Any], timeout_s: float = SETTLE_TIMEOUT_S) -> None:
    """Wait until every server is idle (under SETTLE_BUSY of a core for SETTLE_WINDOW_S): the
    requests a load tool left in flight when it stopped must not run into the next target's."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = [read() for read in cpu_readers]
        time.sleep(SETTLE_WINDOW_S)
        busy = [(read() - b) / SETTLE_WINDOW_S for read, b in zip(cpu_readers, before, strict=True)]
        if max(busy, default=0.0) < SETTLE_BUSY:
            return


# The section -------------------------------------------------------------------------------------


def gateway_env() -> dict[str, str]:
    return dict(os.environ)


def failover_gateway_env() -> dict[str, str]:
    # No cool-down: the dead deployment is tried first on every call of the failover route, so
    # every one of its calls fails over (the routes that do not fail are unaffected).
    return {**gateway_env(), "GATEWAY_FALLBACK_COOLDOWN_S": "0"}


def bare_proxy_command(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "scripts.bench_bare_proxy:app",
        "--host",
        HOST,
        "--port",
        str(port),
        "--workers",
        "1",
        "--loop",
        "uvloop",
        "--http",
        "httptools",
        "--no-access-log",
        "--log-level",
        "warning",
    ]


def running_bare_proxy(port: int, upstream_port: int) -> contextlib.AbstractContextManager[Process]:
    env = {**gateway_env(), "BARE_PROXY_UPSTREAM": f"http://{HOST}:{upstream_port}"}
    return running("bare-proxy", bare_proxy_command(port), env, "/", port, ROOT)


def failed_attempt_ms(port: int) -> float:
    """A connection to ``port`` (nothing listening) refused: the median of a client's attempts,
    what the failover route's first attempt costs before the gateway moves on."""
    import socket

    times = []
    for _ in range(FAILED_ATTEMPT_PROBES):
        started = time.perf_counter()
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1.0):
            raise RuntimeError(f"something listens on port {port}: the dead deployment is not")
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return times[len(times) // 2]


def run_gateway(quick: bool) -> GatewayResults:
    started = time.perf_counter()
    sizes = QUICK_SIZES if quick else FULL_SIZES
    results = GatewayResults(date=utc_now(), quick=quick, sizes=sizes, targets=[])
    results.litellm_problem = install_litellm()
    if results.litellm_problem:
        log(f"gateway: LiteLLM left out: {results.litellm_problem}")
    upstream_port, dead_port, bare_port = free_port(), free_port(), free_port()
    prepared: Prepared | None = None
    with contextlib.ExitStack() as stack:
        upstream = stack.enter_context(running_upstream(upstream_port, gateway_env()))
        try:
            prepared = prepare_tenant(upstream_port, dead_port)
            results.key_limits = prepared.limits
            log("gateway: uvicorn (1 worker) …")
            gateway = stack.enter_context(
                running_server(1, failover_gateway_env(), log_name=GATEWAY_LOG)
            )
            results.config = gateway_config()
            bare = stack.enter_context(running_bare_proxy(bare_port, upstream_port))
            litellm = start_litellm(stack, upstream_port, results)
            made = targets(
                upstream_port,
                gateway,
                prepared.key,
                litellm.port if litellm else None,
                bare_port,
                failover=True,
            )
            clients = {t.name: stack.enter_context(httpx.Client(timeout=30.0)) for t in made}
            made = check_targets(clients, made, results)
            results.targets = [t.name for t in made]
            log(
                f"gateway: {sizes.rounds} rounds (after {sizes.warmup} warm-up) x "
                f"{len(made)} targets, non-streaming and streaming …"
            )
            measure_rounds(clients, made, sizes, results)
            results.failed_attempt_ms = failed_attempt_ms(dead_port)
            results.statements = count_statements(clients, made, gateway)
            for client in clients.values():
                client.close()  # the load runs bring their own connections
            cpu_of: dict[str, Any] = {
                DIRECT: upstream.cpu_seconds,
                BARE: bare.cpu_seconds,
                GATEWAY: gateway.cpu_seconds,
                GATEWAY_DEMO: gateway.cpu_seconds,
            }
            if litellm is not None and results.has(LITELLM):
                cpu_of[LITELLM] = litellm.cpu_seconds
            # The failover route's throughput is the bare route's plus a refused connection:
            # its latency in the rounds is what it is measured by.
            measure_load([t for t in made if t.name in cpu_of], cpu_of, sizes, results)
            if os.environ.get(PROFILE_ENV, "") not in ("", "0"):
                settle(list(dict.fromkeys(cpu_of.values())))
                results.profiles = profile_gateway(gateway, made, sizes)
        finally:
            stack.close()  # servers stopped (the gateway drains its replay writes) first
            clean_tenant(prepared)
            for written in (LOG_DIR / "gateway").glob("*"):
                if written.name.startswith(("wrk-", "body-")):  # they hold the run's key
                    written.unlink()
    results.server_log = log_problems(LOG_DIR / GATEWAY_LOG)
    results.load_average = load_average()
    results.runtime_s = time.perf_counter() - started
    save_results(results)
    return results


def log_problems(path: Path) -> dict[str, int]:
    """The server's JSON log lines at WARNING or above, counted by message and exception."""
    counted: dict[str, int] = {}
    if not path.exists():
        return counted
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("level") not in ("WARNING", "ERROR", "CRITICAL"):
            continue
        message = re.sub(r"rsv_[0-9a-f]+", "rsv_…", str(entry.get("msg", "")))
        trace = str(entry.get("exc_info") or "").strip().splitlines()
        if trace:
            message += f" ({re.sub(r'rsv_[0-9a-f]+', 'rsv_…', trace[-1])[:160]})"
        key = f"{entry['level']}: {message}"
        counted[key] = counted.get(key, 0) + 1
    return dict(sorted(counted.items(), key=lambda item: -item[1]))


def save_results(results: GatewayResults) -> Path:
    """Every sample, for a closer look than the page gives (var/ is not committed)."""
    folder = LOG_DIR / "gateway"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RESULTS_FILE
    path.write_text(json.dumps(dataclasses.asdict(results), indent=1), encoding="utf-8")
    return path


def start_litellm(
    stack: contextlib.ExitStack, upstream_port: int, results: GatewayResults
) -> Process | None:
    if results.litellm_problem:
        return None
    folder = BENCH_DIR / "litellm-run"
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.yaml"
    # JSON is YAML: no YAML writer needed in the bench's own environment.
    config.write_text(json.dumps(litellm_config(upstream_port), indent=2), encoding="utf-8")
    port = free_port()
    command = litellm_command(config, port)
    env = {k: v for k, v in os.environ.items() if k not in LITELLM_DROPPED_ENV}
    env.update(LITELLM_ENV)
    results.litellm_settings = litellm_settings(command)
    log(f"gateway: LiteLLM proxy {LITELLM_VERSION} …")
    try:
        return stack.enter_context(
            running("litellm", command, env, "/health/readiness", port, folder)
        )
    except RuntimeError as error:
        results.litellm_problem = f"the proxy did not start: {error}"
        log(f"gateway: LiteLLM left out: {results.litellm_problem}")
        return None


def gateway_config() -> dict[str, str]:
    config = server_config(1)
    return {
        "command": "uvicorn contextplatform.asgi:application --host 127.0.0.1 --port <free port> "
        "--workers 1 --no-access-log (as `make run`)",
        "uvicorn": config["uvicorn"],
        "event loop": config["event loop"],
        "http parser": config["http parser"],
        "REDIS_URL": "set (Redis cache and channel layer)"
        if os.environ.get("REDIS_URL", "").strip()
        else "unset (in-process cache, in-memory channel layer: the embedded default)",
    }


# Profiling (BENCH_GATEWAY_PROFILE=1) -------------------------------------------------------------


def install_py_spy() -> Path | None:
    spy = PY_SPY_VENV / "bin" / "py-spy"
    marker = PY_SPY_VENV / f".installed-py-spy-{PY_SPY_VERSION}"
    if marker.exists() and spy.exists():
        return spy
    python = shutil.which("python3.11") or sys.executable
    shutil.rmtree(PY_SPY_VENV, ignore_errors=True)
    for step in (
        [python, "-m", "venv", str(PY_SPY_VENV)],
        [str(PY_SPY_VENV / "bin" / "pip"), "install", "--quiet", f"py-spy=={PY_SPY_VERSION}"],
    ):
        if subprocess.run(step, capture_output=True, timeout=600, check=False).returncode != 0:
            return None
    marker.touch()
    return spy


def top_frames(raw: Path, top: int = PROFILE_TOP) -> str:
    """py-spy's collapsed stacks summed per function: the share of samples in which a function
    is on the stack (inclusive) and at its top (self)."""
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        frames = [
            frame.replace(str(ROOT) + "/", "").replace("/.venv/lib/python3.11/site-packages/", "")
            for frame in frames
        ]
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + count
        own[frames[-1]] = own.get(frames[-1], 0) + count
    if not total:
        return "no samples\n"

    def listing(counts: dict[str, int]) -> list[str]:
        ranked = sorted(counts.items(), key=lambda item: -item[1])[:top]
        return [f"{count / total * 100:6.1f} %  {frame}" for frame, count in ranked]

    lines = [f"{total} samples at {PROFILE_RATE_HZ} Hz (threads py-spy saw active)", ""]
    lines += ["inclusive, the platform's own code:"]
    lines += listing({f: n for f, n in inclusive.items() if f.split("(")[-1].startswith(OWN_CODE)})
    lines += ["", "inclusive:"]
    lines += listing(inclusive)
    lines += ["", "self:"]
    lines += listing(own)
    return "\n".join(lines) + "\n"


def sampled(spy: Path, pid: int, name: str, seconds: float, work: Callable[[], None]) -> Path:
    """Run ``work`` over and over while py-spy samples ``pid`` for ``seconds``."""
    folder = LOG_DIR / "gateway"
    raw = folder / f"profile-{name}.raw.txt"
    command = [
        str(spy),
        "record",
        "--pid",
        str(pid),
        "--rate",
        str(PROFILE_RATE_HZ),
        "--duration",
        f"{max(int(seconds), 1)}",
        "--format",
        "raw",
        "--nonblocking",
        "--output",
        str(raw),
    ]
    recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)  # attached before the first call
    while recorder.poll() is None:
        work()
    _, errors = recorder.communicate()
    if not raw.exists():
        raise RuntimeError(f"py-spy wrote no profile: {errors.decode(errors='replace')[-500:]}")
    summary = folder / f"profile-{name}.txt"
    summary.write_text(top_frames(raw), encoding="utf-8")
    return summary


def profile_gateway(gateway: Server, made: list[Target], sizes: Sizes) -> dict[str, str]:
    spy = install_py_spy()
    if spy is None:
        log(f"gateway: py-spy {PY_SPY_VERSION} could not be installed; no profile")
        return {}
    by_name = {t.name: t for t in made}
    seconds = 10.0 if sizes is QUICK_SIZES else 30.0
    written: dict[str, str] = {}
    with httpx.Client(timeout=30.0) as client:
        for name in (GATEWAY, GATEWAY_DEMO):
            target = by_name[name]
            plain, streamed = target.body(False), target.body(True)

            def calls(
                target: Target = target, plain: bytes = plain, streamed: bytes = streamed
            ) -> None:
                timed_call(client, target, plain)
                timed_stream(client, target, streamed)

            log(f"gateway: py-spy on the gateway, sequential calls of {name}, {seconds:g} s …")
            written[f"sequential {name}"] = str(
                sampled(spy, gateway.process.pid, f"sequential-{name}", seconds, calls)
            )
    wrk = ensure_wrk()
    folder = LOG_DIR / "gateway"
    target = by_name[GATEWAY]
    done: list[bool] = []

    def load() -> None:
        if not done:
            subprocess.run(
                load_command(target, wrk, folder, seconds - 1), capture_output=True, check=False
            )
            done.append(True)
        else:
            time.sleep(0.1)

    log(f"gateway: py-spy on the gateway, {CLIENTS} clients on {GATEWAY}, {seconds:g} s …")
    written[f"load {GATEWAY}"] = str(
        sampled(spy, gateway.process.pid, f"load-{GATEWAY}", seconds, load)
    )
    for name, path in written.items():
        log(f"gateway: profile ({name}): {Path(path).relative_to(ROOT)}")
    return written
