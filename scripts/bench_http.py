"""``POST /api/v1/resolve`` over loopback HTTP against uvicorn, with concurrent httpx clients."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from importlib.metadata import version

import httpx
import psutil

from contextplatform.demo.defaults import DEMO_RESOLVE_BODY
from scripts.bench_env import busy_fraction
from scripts.bench_server import (
    ServerProcess,
    free_port,
    listen_options,
    process_tree_cpu,
    python_m,
    wait_workers_ready,
)
from scripts.bench_setup import ROOT

HOST = "127.0.0.1"
RESOLVE_PATH = "/api/v1/resolve"
LOG_DIR = ROOT / "var" / "bench"
STARTUP_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
CONNECT_STAGGER_S = 0.02
SESSION_STATS_DELAY_S = 1.0  # PostgreSQL backends report their session statistics as they exit
DEMO_BODY = DEMO_RESOLVE_BODY


@dataclass
class Server(ServerProcess):
    def worker_processes(self) -> list[psutil.Process]:
        """The processes that serve requests: uvicorn itself, or its spawned workers."""
        root = psutil.Process(self.process.pid)
        if self.workers == 1:
            return [root]
        return [p for p in root.children() if "spawn_main" in " ".join(p.cmdline())]

    def worker_cpu_seconds(self) -> list[float]:
        seconds = []
        for proc in self.worker_processes():
            with suppress(psutil.Error):
                times = proc.cpu_times()
                seconds.append(times.user + times.system)
        return seconds


def database_cpu_seconds() -> float | None:
    """CPU time of the embedded PostgreSQL (postmaster and backends); None with DATABASE_URL."""
    if os.environ.get("DATABASE_URL", "").strip():
        return None
    from contextplatform.database import embedded_data_dir

    pid_file = embedded_data_dir(ROOT) / "postmaster.pid"
    try:
        postmaster = psutil.Process(int(pid_file.read_text().split()[0]))
    except (OSError, ValueError, IndexError, psutil.Error):
        return None
    return process_tree_cpu(postmaster)


def database_sessions() -> int | None:
    """Sessions (connections) PostgreSQL has seen on this database so far."""
    from django.db import DatabaseError, connection

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
            )
            row = cursor.fetchone()
    except DatabaseError:
        return None
    return int(row[0]) if row else None


@dataclass
class LoadResult:
    workers: int
    clients: int
    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    ids: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    server_cpu_s: float = 0.0
    worker_cpu_s: list[float] = field(default_factory=list)
    database_cpu_s: float | None = None
    database_sessions: int | None = None
    machine_busy: float = 0.0

    @property
    def completed(self) -> int:
        return len(self.latencies_ms) + sum(self.errors.values())

    @property
    def requests_per_s(self) -> float:
        return len(self.latencies_ms) / self.wall_s if self.wall_s else 0.0


@dataclass
class LoadState:
    remaining: int
    deadline: float

    def take(self) -> bool:
        if self.remaining <= 0 or time.perf_counter() > self.deadline:
            return False
        self.remaining -= 1
        return True


def server_command(port: int, workers: int) -> list[str]:
    return python_m(
        "uvicorn",
        "contextplatform.asgi:application",
        *listen_options(port, workers),
        "--no-access-log",
    )


def server_config(workers: int) -> dict[str, str]:
    has = importlib.util.find_spec
    return {
        "command": " ".join(["uvicorn", *server_command(0, workers)[4:]]).replace(
            "--port 0", "--port <free port>"
        ),
        "workers": str(workers),
        "uvicorn": version("uvicorn"),
        "event loop": "uvloop" if has("uvloop") else "asyncio",
        "http parser": "httptools" if has("httptools") else "h11",
        "access log": "off (--no-access-log); JSON app logs to a file",
    }


def start_server(
    workers: int, env: dict[str, str] | None = None, log_name: str | None = None
) -> Server:
    """uvicorn on a free port, with this process's environment or ``env``."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / (log_name or f"uvicorn-workers{workers}.log")
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            server_command(port, workers), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    server = Server(process=process, port=port, workers=workers, log_path=log_path)
    try:
        wait_ready(server)
    except BaseException:
        stop_server(server)
        raise
    return server


def wait_ready(server: Server) -> None:
    """Every worker has started and the health endpoint answers."""
    wait_workers_ready(server, "Application startup complete", "uvicorn", STARTUP_TIMEOUT_S)


def stop_server(server: Server) -> int:
    """SIGTERM, as a process manager would; kill only if it ignores that."""
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
    try:
        return server.process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        server.process.kill()
        return server.process.wait()


@contextmanager
def running_server(
    workers: int, env: dict[str, str] | None = None, log_name: str | None = None
) -> Iterator[Server]:
    server = start_server(workers, env, log_name)
    try:
        yield server
    finally:
        stop_server(server)


async def connect_clients(
    stack: AsyncExitStack, base_url: str, headers: dict[str, str], count: int
) -> list[httpx.AsyncClient]:
    """One keep-alive connection per client, opened one after another.

    A burst of simultaneous connects is accepted by whichever worker wakes first (asyncio
    accepts a whole backlog per wake-up), which would leave the other workers idle.
    """
    clients = []
    for _ in range(count):
        client = await stack.enter_async_context(
            httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30.0)
        )
        (await client.get("/healthz")).raise_for_status()
        clients.append(client)
        await asyncio.sleep(CONNECT_STAGGER_S)
    return clients


async def client_loop(
    client: httpx.AsyncClient, payload: bytes, state: LoadState, result: LoadResult
) -> None:
    while state.take():
        started = time.perf_counter()
        try:
            response = await client.post(RESOLVE_PATH, content=payload)
        except httpx.HTTPError as error:
            result.errors[type(error).__name__] += 1
            continue
        elapsed_ms = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            result.errors[f"HTTP {response.status_code}"] += 1
            continue
        result.latencies_ms.append(elapsed_ms)
        result.ids.append(response.json()["id"])


async def load(server: Server, key: str, *, clients: int, total: int, cap_s: float) -> LoadResult:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    payload = json.dumps(DEMO_BODY).encode()
    result = LoadResult(workers=server.workers, clients=clients)
    async with AsyncExitStack() as stack:
        connected = await connect_clients(stack, server.base_url, headers, clients)
        state = LoadState(remaining=total, deadline=time.perf_counter() + cap_s)
        machine_before = psutil.cpu_times()
        server_before = server.cpu_seconds()
        workers_before = server.worker_cpu_seconds()
        database_before = database_cpu_seconds()
        client_before = time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(client_loop(c, payload, state, result) for c in connected))
        result.wall_s = time.perf_counter() - started
        result.client_cpu_s = time.process_time() - client_before
        result.server_cpu_s = server.cpu_seconds() - server_before
        result.worker_cpu_s = [
            after - before
            for before, after in zip(workers_before, server.worker_cpu_seconds(), strict=False)
        ]
        database_after = database_cpu_seconds()
        result.machine_busy = busy_fraction(machine_before, psutil.cpu_times())
    if database_before is not None and database_after is not None:
        result.database_cpu_s = database_after - database_before
    return result


def measure_http(
    key: str, *, workers: int, clients: int, total: int, warmup: int, cap_s: float
) -> tuple[LoadResult, list[str]]:
    """One server run: warm-up requests (discarded), then the measured load.

    Returns the measured result and the ids of every resolve made (warm-up included), so the
    caller can remove the replay records the benchmark added to the demo tenant.
    """
    with running_server(workers) as server:
        warm = asyncio.run(load(server, key, clients=clients, total=warmup, cap_s=cap_s))
        if warm.errors:
            raise RuntimeError(f"warm-up failed: {dict(warm.errors)}; see {server.log_path}")
        time.sleep(SESSION_STATS_DELAY_S)
        sessions_before = database_sessions()
        result = asyncio.run(load(server, key, clients=clients, total=total, cap_s=cap_s))
        time.sleep(SESSION_STATS_DELAY_S)
        sessions_after = database_sessions()
    if sessions_before is not None and sessions_after is not None:
        result.database_sessions = sessions_after - sessions_before
    return result, warm.ids + result.ids
