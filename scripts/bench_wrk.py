"""Section "http_path": the HTTP path under ``wrk``, beside the bare-ASGI limit of the same server.

Every figure is ``wrk -t2 -c32 -d10s --latency`` (Debian's package; ``apt-get install wrk`` when it
is missing) against a server started here on the embedded database, the server and the load
generator on the same machine. Four targets: the bare ASGI app (``scripts/bare_asgi.py``, answering
``{"status": "ok"}``: the limit this server, these flags and wrk leave on this machine), the
platform's ``GET /healthz``, ``POST /api/v1/resolve`` with the demo body
(``contextplatform.demo.defaults.DEMO_RESOLVE_BODY``) and the gateway's ``POST /v1/chat/completions``
on a route without sources whose deployment is a loopback upstream
(``scripts/bench_gateway_upstream.py``, set up as section 8 sets it up). One and two worker
processes; the platform's targets also with ``REDIS_URL`` (cache, channel layer, rate-limit
counters in Redis). Several workers get an emptied ``PROMETHEUS_MULTIPROC_DIR``, as ``make run``
gives them.

Servers: uvicorn on h11 and asyncio, uvicorn on httptools and uvloop, gunicorn with the project's
worker class (``contextplatform.server.UvicornWorker``: uvicorn's, the request head capped) and granian (``--interface asgi``). The server
``make run`` starts (PRODUCTION) is measured on every target; the others on the targets that
compare servers (bare app, /healthz, resolve). What each run reports: requests/s, latency
percentiles, errors (non-2xx and socket errors), the load average, the CPU of the server's
processes and how wrk's 32 connections were spread over the workers.

``BENCH_ONLY=http_path make bench`` runs it alone; ``BENCH_QUICK=1`` shorter and fewer runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import psutil

from contextplatform.demo.defaults import DEMO_RESOLVE_BODY, DEMO_ROUTE
from scripts.bench_env import cpu_model, load_average, utc_now
from scripts.bench_gateway import (
    DEMO_TENANT,
    ROUTE_BARE,
    Prepared,
    clean_tenant,
    ensure_wrk,
    load_errors,
    lua_string,
    marked_json,
    prepare_tenant,
    running_upstream,
    settle,
    wrk_version,
)
from scripts.bench_http import (
    HOST,
    LOG_DIR,
    database_cpu_seconds,
)
from scripts.bench_server import (
    ServerProcess,
    free_port,
    listen_options,
    python_m,
    wait_workers_ready,
)
from scripts.bench_setup import ROOT, log

PLATFORM_APP = "contextplatform.asgi:application"
BARE_APP = "scripts.bare_asgi:application"
WRK_THREADS = 2
CONNECTIONS = 32
STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
CHECK_TIMEOUT_S = 30.0
FOLDER = LOG_DIR / "http_path"
RESULTS_FILE = "results.json"
# A Redis database of its own for the runs with REDIS_URL (keys under a per-run prefix as well).
REDIS_DB = 12
PERCENTILES = (1, 5, 10, 20, 30, 40, 50, 60, 70, 75, 80, 90, 95, 97.5, 99, 99.9, 100)

BARE, HEALTHZ, RESOLVE, GATEWAY = "bare", "healthz", "resolve", "gateway"
TARGET_LABELS = {
    BARE: "bare ASGI app (GET /)",
    HEALTHZ: "GET /healthz",
    RESOLVE: "POST /api/v1/resolve, demo route",
    GATEWAY: "gateway, route without sources (loopback upstream)",
}
PLATFORM_TARGETS = (HEALTHZ, RESOLVE, GATEWAY)

# Targets of issue 15 (checked on the production server in scripts/report_wrk.py).
HEALTHZ_PER_WORKER = 1500.0
HEALTHZ_OF_BARE = 0.3
RESOLVE_2_WORKERS = 300.0
RESOLVE_P99_MS = 200.0
GATEWAY_RPS = 400.0
REDIS_NO_SLOWER = 0.95  # with REDIS_URL ≥ this share of without, same run (the machine's noise)
FLAT_DELAY_MS = 40.0  # a p50 above this on the bare app means Nagle meeting delayed ACKs


# Servers -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerKind:
    """One way of serving an ASGI app: its command line and how to tell its workers are up."""

    name: str
    label: str
    argv: Callable[[str, int, int], list[str]]
    ready_line: str  # printed once per worker when it serves
    packages: tuple[str, ...]

    def command(self, app: str, port: int, workers: int) -> list[str]:
        return self.argv(app, port, workers)

    def shown(self, app: str, workers: int) -> str:
        words = self.command(app, 0, workers)
        words[0:1] = [] if words[0] == sys.executable else [Path(words[0]).name]
        if words[:1] == ["-m"]:
            words = words[1:]
        return (
            " ".join(words)
            .replace("--port 0", "--port <free port>")
            .replace(f"{HOST}:0", f"{HOST}:<free port>")
        )


def uvicorn_argv(loop: str, http: str) -> Callable[[str, int, int], list[str]]:
    def argv(app: str, port: int, workers: int) -> list[str]:
        return python_m(
            "uvicorn",
            app,
            *listen_options(port, workers),
            "--loop",
            loop,
            "--http",
            http,
            "--no-access-log",
        )

    return argv


# make run's worker class: uvicorn's protocol with the request head capped (contextplatform/server.py).
PROJECT_WORKER = "contextplatform.server.UvicornWorker"


def gunicorn_argv(
    app: str, port: int, workers: int, worker_class: str = PROJECT_WORKER
) -> list[str]:
    return python_m(
        "gunicorn",
        app,
        "--worker-class",
        worker_class,
        "--workers",
        str(workers),
        "--bind",
        f"{HOST}:{port}",
        # uvicorn's idle keep-alive (gunicorn's default is 2 s), as `make run` sets it.
        "--keep-alive",
        "5",
        # One control socket per user by default: two servers on one machine would share it.
        "--no-control-socket",
    )


def granian_argv(app: str, port: int, workers: int) -> list[str]:
    return python_m(
        "granian",
        app,
        "--interface",
        "asgi",
        *listen_options(port, workers),
        "--workers-kill-timeout",
        "10",
    )


UVICORN_H11 = ServerKind(
    "uvicorn-h11",
    "uvicorn, h11 + asyncio",
    uvicorn_argv("asyncio", "h11"),
    "Application startup complete",
    ("uvicorn", "h11"),
)
UVICORN = ServerKind(
    "uvicorn",
    "uvicorn, httptools + uvloop",
    uvicorn_argv("uvloop", "httptools"),
    "Application startup complete",
    ("uvicorn", "httptools", "uvloop"),
)
GUNICORN = ServerKind(
    "gunicorn",
    "gunicorn + the project's UvicornWorker (httptools + uvloop, the request head capped)",
    gunicorn_argv,
    "Application startup complete",
    ("gunicorn", "uvicorn-worker", "httptools", "uvloop"),
)
GRANIAN = ServerKind(
    "granian", "granian, ASGI interface", granian_argv, "Started worker-", ("granian",)
)
SERVERS = {kind.name: kind for kind in (UVICORN_H11, UVICORN, GUNICORN, GRANIAN)}
# What `make run` starts (the Makefile's `run` target says the same): picked on this section's
# numbers (see docs/benchmarks.md, the HTTP path section).
PRODUCTION = GUNICORN.name


@dataclass(frozen=True)
class Plan:
    """Which target runs on which server, workers and Redis setting."""

    seconds: float
    warmup_s: float
    # (server, workers, with Redis, targets), in run order
    runs: list[tuple[str, int, bool, tuple[str, ...]]]
    # Rounds of the resolve at 2 workers without and with REDIS_URL, the two servers up side by
    # side and loaded in turn (the order alternating), so that the machine's drift falls on both.
    paired_rounds: int = 0


def full_plan() -> Plan:
    """The production server on every target with 1 and 2 workers (/healthz and the gateway with
    Redis at 2 workers too, the resolve without and with Redis in 5 paired rounds); each other
    server on the bare app with 1 worker and on the bare app, /healthz and resolve with 2 (the
    shape that tells servers apart): about 32 runs of 10 s."""
    runs: list[tuple[str, int, bool, tuple[str, ...]]] = []
    for workers in (1, 2):
        runs.append((PRODUCTION, workers, False, (BARE, *PLATFORM_TARGETS)))
        if workers == 2:  # the resolve with REDIS_URL runs in the paired rounds
            runs.append((PRODUCTION, workers, True, (HEALTHZ, GATEWAY)))
        others = (BARE,) if workers == 1 else (BARE, HEALTHZ, RESOLVE)
        runs += [(name, workers, False, others) for name in SERVERS if name != PRODUCTION]
    # 5 rounds, not 3: the machine drifts by a third within a minute, and 3 rounds of each let one
    # slow phase decide the comparison.
    return Plan(seconds=10.0, warmup_s=2.0, runs=runs, paired_rounds=5)


def quick_plan() -> Plan:
    runs: list[tuple[str, int, bool, tuple[str, ...]]] = [
        (PRODUCTION, 1, False, (BARE, HEALTHZ, RESOLVE)),
        (PRODUCTION, 2, False, (BARE, *PLATFORM_TARGETS)),
    ]
    runs += [(name, 2, False, (BARE, RESOLVE)) for name in SERVERS if name != PRODUCTION]
    return Plan(seconds=3.0, warmup_s=1.0, runs=runs, paired_rounds=1)


# Results -----------------------------------------------------------------------------------------


@dataclass
class WrkRun:
    server: str
    workers: int
    target: str
    redis: bool
    requests: int
    seconds: float
    errors: dict[str, int]
    percentiles_ms: dict[str, float]
    load_average: list[float]
    server_cpu_s: float
    worker_cpu_s: list[float]
    connections: list[int]  # wrk's connections each worker held, half-way through the run
    database_cpu_s: float | None = None
    paired_round: int | None = None  # its round of the paired comparison, else None

    @property
    def failed(self) -> int:
        return sum(self.errors.values())

    @property
    def requests_per_s(self) -> float:
        ok = self.requests - self.errors.get("status", 0)
        return ok / self.seconds if self.seconds else 0.0

    @property
    def server_cpu_ms_per_request(self) -> float:
        return self.server_cpu_s * 1000 / self.requests if self.requests else float("nan")

    def percentile(self, q: float) -> float:
        return self.percentiles_ms.get(f"{q:g}", float("nan"))

    @property
    def p50(self) -> float:
        return self.percentile(50)

    @property
    def p99(self) -> float:
        return self.percentile(99)


@dataclass
class HttpPathResults:
    date: str
    quick: bool
    production: str
    seconds: float
    warmup_s: float
    runs: list[WrkRun] = field(default_factory=list)
    machine: str = ""
    load_tool: str = ""
    servers: dict[str, dict[str, str]] = field(default_factory=dict)
    redis: str = ""
    problems: list[str] = field(default_factory=list)
    load_average_start: str = ""
    load_average_end: str = ""
    runtime_s: float = 0.0
    paired: list[WrkRun] = field(default_factory=list)  # the paired rounds, in run order

    def find(self, server: str, workers: int, target: str, redis: bool = False) -> WrkRun | None:
        for run in self.runs:
            if (run.server, run.workers, run.target, run.redis) == (server, workers, target, redis):
                return run
        return None


# Processes ---------------------------------------------------------------------------------------


@dataclass
class Served(ServerProcess):
    kind: ServerKind
    app: str

    def worker_processes(self) -> list[psutil.Process]:
        """The processes that serve requests: the server's children (multiprocessing's helpers
        left out), or the server itself when it has none."""
        try:
            root = psutil.Process(self.process.pid)
            children = [
                child
                for child in root.children()
                if "resource_tracker" not in " ".join(child.cmdline())
            ]
        except psutil.Error:
            return []
        return children or [root]


def worker_cpu(processes: list[psutil.Process]) -> list[float]:
    seconds = []
    for process in processes:
        try:
            times = process.cpu_times()
            seconds.append(times.user + times.system)
        except psutil.Error:
            seconds.append(0.0)
    return seconds


def connections_per_worker(processes: list[psutil.Process], port: int) -> list[int]:
    counts = []
    for process in processes:
        try:
            held = process.net_connections(kind="tcp")
        except psutil.Error:
            counts.append(0)
            continue
        counts.append(
            sum(
                1
                for c in held
                if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port
            )
        )
    return counts


def server_env(workers: int, redis_url: str | None, metrics_dir: Path | None) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PROMETHEUS_MULTIPROC_DIR")
    }
    if redis_url:
        env["REDIS_URL"] = redis_url
        env["CACHE_KEY_PREFIX"] = f"bench-http-path-{os.getpid()}"
    if metrics_dir is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    return env


def wait_ready(served: Served) -> None:
    wait_workers_ready(served, served.kind.ready_line, served.kind.name, STARTUP_TIMEOUT_S)


def stop(served: Served) -> None:
    """SIGTERM to the server, as a process manager sends it; the whole group killed if it has
    not exited in time (a worker stuck in its shutdown must not outlive the run)."""
    with contextlib.suppress(ProcessLookupError):
        served.process.send_signal(signal.SIGTERM)
    try:
        served.process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log(f"http_path: {served.kind.name} ignored SIGTERM for {STOP_TIMEOUT_S:g} s; killed")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(served.process.pid, signal.SIGKILL)
        served.process.wait()
    # Workers that outlived their parent (the group is the server's own).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(served.process.pid, signal.SIGKILL)


@contextlib.contextmanager
def serving(
    kind: ServerKind,
    app: str,
    workers: int,
    env: dict[str, str],
    *,
    cwd: Path = ROOT,
    log_name: str = "",
) -> Iterator[Served]:
    """``kind`` serving ``app`` from the code in ``cwd`` (another commit's, extracted), its output
    in ``log_name``.log (named after the server by default: two servers up at once need two);
    stopped on leaving, or when it never gets ready."""
    FOLDER.mkdir(parents=True, exist_ok=True)
    short = "bare" if app == BARE_APP else "platform"
    log_path = FOLDER / f"{log_name or f'{kind.name}-{short}-w{workers}'}.log"
    port = free_port()
    with log_path.open("wb") as sink:
        process = subprocess.Popen(
            kind.command(app, port, workers),
            cwd=cwd,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped whole, nothing left behind
        )
    served = Served(process, port, workers, log_path, kind=kind, app=app)
    try:
        wait_ready(served)
        yield served
    finally:
        stop(served)


# Redis -------------------------------------------------------------------------------------------


def redis_reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis_server() -> Iterator[str | None]:
    """REDIS_URL for the runs with Redis: the environment's, else a Redis on 127.0.0.1:6379,
    else a ``redis-server`` started here (no persistence) for the section; None without any."""
    given = os.environ.get("REDIS_URL", "").strip()
    if given:
        yield given
        return
    if redis_reachable(HOST, 6379):
        yield f"redis://{HOST}:6379/{REDIS_DB}"
        return
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not redis_reachable(HOST, port) and time.monotonic() < deadline:
            time.sleep(0.1)
        yield f"redis://{HOST}:{port}/{REDIS_DB}"
    finally:
        process.terminate()
        process.wait(timeout=10)


# Load --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    path: str
    method: str = "GET"
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


WRK_DONE = """done = function(summary, latency, requests)
  local e = summary.errors
  local points = {{}}
  for _, p in ipairs({{{percentiles}}}) do
    table.insert(points, string.format('"%g": %d', p, latency:percentile(p)))
  end
  io.write(string.format(
    'WRK_JSON {{"requests": %d, "duration_us": %d, "connect": %d, "read": %d, "write": %d, '
    .. '"status": %d, "timeout": %d, "percentiles_us": {{%s}}}}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    table.concat(points, ", ")))
end
"""


def wrk_script(request: Request, name: str) -> Path:
    lines = []
    if request.method != "GET":
        lines.append(f"wrk.method = {lua_string(request.method)}")
        lines.append(f"wrk.body = {lua_string(request.body.decode())}")
    lines += [
        f"wrk.headers[{lua_string(key)}] = {lua_string(value)}"
        for key, value in request.headers.items()
    ]
    percentiles = ", ".join(f"{p:g}" for p in PERCENTILES)
    lines.append(WRK_DONE.format(percentiles=percentiles))
    path = FOLDER / f"wrk-{name}.lua"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


# The load generator shares the 2 cores with the server it saturates: at the default priority the
# scheduler left wrk's own threads waiting for up to 1-2 s now and then, which wrk counted as the
# server's latency (a p99 of 400-1,000 ms in some 6 s runs, 130 ms in others, with the server's
# own histogram far below). Raised above the server, wrk reads each answer when it arrives.
WRK_NICE = -20


def load_generator_priority() -> list[str]:
    """``nice -n -10`` where this process may raise a priority (root); nothing otherwise."""
    return ["nice", "-n", str(WRK_NICE)] if os.geteuid() == 0 and shutil.which("nice") else []


def wrk_command(wrk: str, script: Path, url: str, seconds: float) -> list[str]:
    return [
        *load_generator_priority(),
        wrk,
        f"-t{WRK_THREADS}",
        f"-c{CONNECTIONS}",
        f"-d{seconds:g}s",
        "--latency",
        "--timeout",
        "10s",
        "-s",
        str(script),
        url,
    ]


def check(served: Served, request: Request) -> None:
    """One request before the load: anything but 200 stops the run with the answer."""
    response = httpx.request(
        request.method,
        served.base_url + request.path,
        content=request.body or None,
        headers=request.headers,
        timeout=CHECK_TIMEOUT_S,
    )
    if response.status_code != 200:
        raise RuntimeError(
            f"{served.kind.name} {request.method} {request.path}: HTTP {response.status_code} "
            f"{response.text[:300]!r}"
        )


def run_wrk(
    wrk: str, served: Served, request: Request, name: str, seconds: float
) -> dict[str, Any] | None:
    script = wrk_script(request, name)
    command = wrk_command(wrk, script, served.base_url + request.path, seconds)
    completed = subprocess.run(
        command, capture_output=True, text=True, timeout=seconds + 60, check=False
    )
    (FOLDER / f"wrk-{name}.txt").write_text(completed.stdout + completed.stderr, encoding="utf-8")
    return marked_json(completed.stdout, "WRK_JSON")


def measure(
    wrk: str,
    served: Served,
    request: Request,
    *,
    target: str,
    redis: bool,
    seconds: float,
    warmup_s: float,
) -> WrkRun:
    name = f"{served.kind.name}-w{served.workers}-{target}{'-redis' if redis else ''}"
    check(served, request)
    if warmup_s > 0:
        run_wrk(wrk, served, request, f"{name}-warmup", warmup_s)
    settle([served.cpu_seconds], timeout_s=10.0)
    workers = served.worker_processes()
    cpu_before = served.cpu_seconds()
    workers_before = worker_cpu(workers)
    database_before = database_cpu_seconds() if served.app == PLATFORM_APP else None
    held: list[list[int]] = []

    def sample_connections() -> None:
        time.sleep(seconds / 2)
        held.append(connections_per_worker(workers, served.port))

    with ThreadPoolExecutor(max_workers=1) as pool:
        sampled = pool.submit(sample_connections)
        summary = run_wrk(wrk, served, request, name, seconds)
        sampled.result()
    database_after = database_cpu_seconds() if database_before is not None else None
    if summary is None:
        raise RuntimeError(f"wrk printed no summary for {name}; see {FOLDER / f'wrk-{name}.txt'}")
    return WrkRun(
        server=served.kind.name,
        workers=served.workers,
        target=target,
        redis=redis,
        requests=int(summary["requests"]),
        seconds=summary["duration_us"] / 1e6,
        errors=load_errors(summary),
        percentiles_ms={k: v / 1000 for k, v in summary["percentiles_us"].items()},
        load_average=[round(value, 2) for value in os.getloadavg()],
        server_cpu_s=served.cpu_seconds() - cpu_before,
        worker_cpu_s=[
            after - before
            for before, after in zip(workers_before, worker_cpu(workers), strict=True)
        ],
        connections=held[0] if held else [],
        database_cpu_s=(
            database_after - database_before
            if database_before is not None and database_after is not None
            else None
        ),
    )


def requests_for(key: str) -> dict[str, Request]:
    json_type = {"Content-Type": "application/json"}
    bearer = {**json_type, "Authorization": f"Bearer {key}"}
    gateway_body = {
        "model": ROUTE_BARE,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Say OK."}],
    }
    return {
        BARE: Request("/"),
        HEALTHZ: Request("/healthz"),
        RESOLVE: Request("/api/v1/resolve", "POST", json.dumps(DEMO_RESOLVE_BODY).encode(), bearer),
        GATEWAY: Request("/v1/chat/completions", "POST", json.dumps(gateway_body).encode(), bearer),
    }


# The section -------------------------------------------------------------------------------------


def server_versions(kind: ServerKind) -> dict[str, str]:
    found = {}
    for package in kind.packages:
        with contextlib.suppress(Exception):
            found[package] = version(package)
    return {
        "label": kind.label,
        "command": kind.shown(PLATFORM_APP, 2).replace("--workers 2", "--workers N"),
        "versions": ", ".join(f"{name} {number}" for name, number in found.items()),
    }


def delete_resolve_replay(since: float) -> int:
    """The replay records the resolve runs added to the demo tenant (after the servers drained
    their writers)."""
    from datetime import UTC, datetime

    from django_tenants.utils import schema_context

    from contextplatform.replay.models import ReplayRecord

    with schema_context(DEMO_TENANT):
        removed, _ = ReplayRecord.objects.filter(
            route=DEMO_ROUTE, created_at__gte=datetime.fromtimestamp(since, UTC)
        ).delete()
    return int(removed)


def run_http_path(quick: bool) -> HttpPathResults:
    started = time.perf_counter()
    began = time.time()
    plan = quick_plan() if quick else full_plan()
    results = HttpPathResults(
        date=utc_now(),
        quick=quick,
        production=PRODUCTION,
        seconds=plan.seconds,
        warmup_s=plan.warmup_s,
        machine=f"{cpu_model()}, {os.cpu_count()} logical cores, "
        f"{psutil.virtual_memory().total / 2**30:.1f} GiB; server, load generator and "
        "PostgreSQL on the same machine",
        load_average_start=load_average(),
    )
    wrk = ensure_wrk()
    if wrk is None:
        results.problems.append("wrk is missing and apt-get could not install it")
        return results
    results.load_tool = (
        f"{wrk_version(wrk)}: `wrk -t{WRK_THREADS} -c{CONNECTIONS} -d{plan.seconds:g}s "
        f"--latency` (a Lua script for the POST bodies and the summary)"
        + (
            f", at `nice -n {WRK_NICE}`"
            if load_generator_priority()
            else ", at the default priority"
        )
    )
    results.servers = {name: server_versions(kind) for name, kind in SERVERS.items()}
    FOLDER.mkdir(parents=True, exist_ok=True)
    prepared: Prepared | None = None
    upstream_port = free_port()
    try:
        with (
            running_upstream(upstream_port, dict(os.environ)),
            redis_server() as redis_url,
        ):
            results.redis = redis_url or ""
            prepared = prepare_tenant(upstream_port)
            requests = requests_for(prepared.key)
            for server, workers, redis, targets in plan.runs:
                if redis and not redis_url:
                    results.problems.append("no Redis: the runs with REDIS_URL were left out")
                    continue
                measure_group(
                    wrk,
                    results,
                    plan,
                    SERVERS[server],
                    workers,
                    redis_url if redis else None,
                    targets,
                    requests,
                )
            if plan.paired_rounds and redis_url:
                measure_paired(wrk, results, plan, redis_url, requests[RESOLVE])
    finally:
        clean_tenant(prepared)
        with contextlib.suppress(Exception):
            log(f"http_path: removed {delete_resolve_replay(began)} replay records of the resolves")
        for written in FOLDER.glob("wrk-*.lua"):
            written.unlink()  # they hold the run's key
    results.load_average_end = load_average()
    results.runtime_s = time.perf_counter() - started
    save_results(results)
    return results


# What a server that failed to start, answer or stop raises: noted, and the section goes on.
SERVING_FAILURES = (RuntimeError, httpx.HTTPError, subprocess.TimeoutExpired)


def log_run(run: WrkRun) -> None:
    log(
        f"http_path:   {run.requests_per_s:.0f} req/s, p50 {run.p50:.1f} ms, "
        f"p99 {run.p99:.1f} ms, errors {run.failed}, connections {run.connections}"
    )


def measure_group(
    wrk: str,
    results: HttpPathResults,
    plan: Plan,
    kind: ServerKind,
    workers: int,
    redis_url: str | None,
    targets: tuple[str, ...],
    requests: dict[str, Request],
) -> None:
    """One server start per app for these targets; a failure is noted and the run goes on."""
    apps = [
        (BARE_APP, [t for t in targets if t == BARE]),
        (PLATFORM_APP, [t for t in targets if t != BARE]),
    ]
    for app, wanted in apps:
        if not wanted:
            continue
        metrics = Path(tempfile.mkdtemp(prefix="bench-prometheus-")) if workers > 1 else None
        env = server_env(workers, redis_url if app == PLATFORM_APP else None, metrics)
        shown = f"{kind.name} --workers {workers}{' REDIS_URL' if redis_url else ''}"
        try:
            with serving(kind, app, workers, env) as served:
                for target in wanted:
                    log(f"http_path: {shown}, {target}, {plan.seconds:g} s …")
                    run = measure(
                        wrk,
                        served,
                        requests[target],
                        target=target,
                        redis=redis_url is not None,
                        seconds=plan.seconds,
                        warmup_s=plan.warmup_s,
                    )
                    results.runs.append(run)
                    log_run(run)
        except SERVING_FAILURES as error:
            results.problems.append(f"{shown} ({', '.join(wanted)}): {error}")
            log(f"http_path: {shown}: {error}")
        finally:
            if metrics is not None:
                shutil.rmtree(metrics, ignore_errors=True)


def measure_paired(
    wrk: str, results: HttpPathResults, plan: Plan, redis_url: str, request: Request
) -> None:
    """The resolve at 2 workers without and with REDIS_URL in alternating rounds: both production
    servers up at once (the idle one waits), each round loading one, then the other, the first of
    a round alternating. A failure is noted and the run goes on."""
    kind, workers = SERVERS[PRODUCTION], 2
    metrics = [Path(tempfile.mkdtemp(prefix="bench-prometheus-")) for _ in range(2)]
    try:
        with (
            serving(kind, PLATFORM_APP, workers, server_env(workers, None, metrics[0])) as plain,
            serving(
                kind, PLATFORM_APP, workers, server_env(workers, redis_url, metrics[1])
            ) as with_redis,
        ):
            for number in range(plan.paired_rounds):
                order = [(plain, False), (with_redis, True)]
                for served, redis in order if number % 2 == 0 else order[::-1]:
                    shown = "REDIS_URL" if redis else "embedded"
                    log(f"http_path: paired round {number + 1}, resolve, {shown} …")
                    run = measure(
                        wrk,
                        served,
                        request,
                        target=RESOLVE,
                        redis=redis,
                        seconds=plan.seconds,
                        warmup_s=plan.warmup_s,
                    )
                    run.paired_round = number
                    results.paired.append(run)
                    log_run(run)
    except SERVING_FAILURES as error:
        results.problems.append(f"paired rounds with and without REDIS_URL: {error}")
        log(f"http_path: paired rounds: {error}")
    finally:
        for folder in metrics:
            shutil.rmtree(folder, ignore_errors=True)


def save_results(results: HttpPathResults) -> Path:
    """Every run, for a closer look than the page gives (var/ is not committed)."""
    FOLDER.mkdir(parents=True, exist_ok=True)
    path = FOLDER / RESULTS_FILE
    path.write_text(json.dumps(dataclasses.asdict(results), indent=1), encoding="utf-8")
    return path


def load_results(path: Path = FOLDER / RESULTS_FILE) -> HttpPathResults:
    """A saved run back (to redraw the page without measuring again)."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    runs = [WrkRun(**run) for run in raw.pop("runs")]
    paired = [WrkRun(**run) for run in raw.pop("paired", [])]
    return HttpPathResults(**raw, runs=runs, paired=paired)
