"""The soak: the cluster shape (``scripts/cluster.py``) under a fixed rate of mixed work for ten
minutes, watched every ten seconds.

The load is open-loop: each request is sent at its own time whatever the answers before it took,
so a slow stretch shows as latency, not as fewer requests. The mix, in a fixed repeating order:
resolves of the demo route, gateway calls of the demo route (the stand-in model behind it),
gateway calls of a route with a memory source that stores every turn (users rotating, so the
Celery workers write memories all along), and documents posted to a collection of their own (an
ingestion job each). Every window records each kind's answers, errors and latencies, the resident
memory of every process of the cluster (the web arbiter and its workers, the Celery workers with
their pool children, beat, the stand-in, Redis, PostgreSQL and its backends) and the database's
connection count. At the end the memory turns and ingestion jobs are waited for: every turn
written and every job done, nothing pending.

``SOAK_SECONDS`` (default 600) and ``SOAK_RATE`` (requests/s, default 8) size it; quick mode
(``BENCH_QUICK=1``) runs one minute.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg

from scripts.bench_env import load_average, utc_now
from scripts.bench_setup import log
from scripts.cluster import Cluster

ROOT = Path(__file__).resolve().parent.parent
WINDOW_S = 10.0
DEFAULT_SECONDS = 600.0
QUICK_SECONDS = 60.0
DEFAULT_RATE = 5.0  # well inside what the cluster serves here: a soak looks for drift, not the peak
# Memory is compared from a third of the way in: by then every kind of work has run many times,
# each worker's first judge calibration included (a one-time step of some 50 MiB, seen at 140 and
# 195 s in a 600 s run), so what still grows is growth, not a first use.
WARMUP_SHARE = 1 / 3
DRAIN_TIMEOUT_S = 180.0  # what the queued turns and jobs may take after the load stops
REQUEST_TIMEOUT_S = 30.0
USERS = 40
MEMORY_ROUTE = "soak-memory"
COLLECTION = "soak-docs"
# One cycle of the mix (8 requests): its order repeats for the whole run.
MIX = ("resolve", "gateway", "resolve", "memory", "resolve", "gateway", "memory", "ingest")
KINDS = ("resolve", "gateway", "memory", "ingest")
QUESTIONS = (
    "Can I get a refund for my headphones?",
    "How long is the warranty on the speaker?",
    "Where is my order?",
    "Do you ship abroad?",
)
FACTS = (
    "I live in Lisbon and I prefer email over phone calls.",
    "My daughter plays the cello and I usually travel on Fridays.",
    "I am allergic to peanuts and I run every morning.",
    "I work as a nurse and my favourite colour is green.",
)


@dataclass
class Answer:
    kind: str
    sent_at: float  # seconds since the load started
    ms: float
    status: int  # 0: no answer (a connection error or a timeout)
    error: str = ""


@dataclass
class Window:
    """What one ten-second window saw."""

    start_s: float
    memory_mb: dict[str, tuple[float, float]]  # (PSS, USS) by part
    connections: int
    answers: list[Answer] = field(default_factory=list)

    def of(self, kind: str) -> list[Answer]:
        return [answer for answer in self.answers if answer.kind == kind]


@dataclass
class SoakResults:
    date: str
    commit: str
    seconds: float
    rate: float
    windows: list[Window]
    start_memory_mb: dict[str, tuple[float, float]]
    end_memory_mb: dict[str, tuple[float, float]]
    warmup_s: float
    turns: dict[str, int]  # memory turns by status at the end
    jobs: dict[str, int]  # ingestion jobs by status at the end
    drain_s: float
    load_before: str
    load_after: str
    quick: bool
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def answers(self) -> list[Answer]:
        return [answer for window in self.windows for answer in window.answers]


def ok(answer: Answer) -> bool:
    return answer.status in {200, 201, 202}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# --- the cluster's processes -------------------------------------------------------------------


def process_groups(cluster: Cluster) -> dict[str, list[psutil.Process]]:
    """Every process of the cluster, by part: a part's children (gunicorn's workers, a Celery
    worker's pool, PostgreSQL's backends) are counted with it."""
    groups: dict[str, list[psutil.Process]] = {}
    for name, part in cluster.parts.items():
        try:
            root = psutil.Process(part.pid)
            groups[name] = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            groups[name] = []
    return groups


def memory_by_part(cluster: Cluster) -> dict[str, tuple[float, float]]:
    """Each part's memory in MiB as (PSS, USS). PSS splits each shared page among the processes
    that map it (plain RSS counts PostgreSQL's shared buffers again in every backend that touched
    them, so it follows the connection count); USS is the memory a process holds alone: what a
    leak grows, where PSS also grows as PostgreSQL's buffer cache fills with new data. Each web
    worker on its own (they are the ones that could leak), the other parts with their children."""
    sizes: dict[str, tuple[float, float]] = {}
    for name, processes in process_groups(cluster).items():
        if name == "web" and processes:
            arbiter, *workers = processes
            sizes["web arbiter"] = memory_of([arbiter])
            for index, worker in enumerate(sorted(workers, key=lambda p: p.pid)):
                sizes[f"web worker {index}"] = memory_of([worker])
        else:
            sizes[name] = memory_of(processes)
    return sizes


def memory_of(processes: list[psutil.Process]) -> tuple[float, float]:
    pss = uss = 0
    for process in processes:
        try:
            info = process.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        pss, uss = pss + info.pss, uss + info.uss
    return pss / 2**20, uss / 2**20


def database_connections(cluster: Cluster) -> int:
    with psycopg.connect(cluster.database_url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def counts_by_status(cluster: Cluster, table: str) -> dict[str, int]:
    with psycopg.connect(cluster.database_url, autocommit=True) as connection:
        rows = connection.execute(
            f'SELECT status, count(*) FROM demo."{table}" GROUP BY status'  # the two table names above
        ).fetchall()
    return {str(status): int(count) for status, count in rows}


# --- the work -----------------------------------------------------------------------------------


def prepare(cluster: Cluster) -> None:
    """The memory route (the demo's deployment, a memory source storing every turn) and the
    collection the documents go to."""
    headers = {"Authorization": f"Bearer {cluster.api_key}"}
    with httpx.Client(base_url=cluster.base_url, headers=headers, timeout=30) as api:
        route = {
            "name": MEMORY_ROUTE,
            "model": {"upstream": "demo-model"},
            "context": {
                "sources": [{"type": "memory", "name": "memories", "store": {"auto": True}}]
            },
        }
        answer = api.post("/api/v1/routes", json=route)
        if answer.status_code not in {201, 409}:
            raise RuntimeError(f"the soak's route: {answer.status_code} {answer.text}")
        answer = api.post("/api/v1/collections", json={"name": COLLECTION})
        if answer.status_code not in {201, 409}:
            raise RuntimeError(f"the soak's collection: {answer.status_code} {answer.text}")


def request_of(kind: str, number: int) -> tuple[str, dict[str, Any], dict[str, str]]:
    """(path, body, extra headers) of the ``number``-th request of ``kind``."""
    user = f"soak_u{number % USERS}"
    question = QUESTIONS[number % len(QUESTIONS)]
    if kind == "resolve":
        body = {
            "route": "support",
            "user": user,
            "session": f"soak_s{number % USERS}",
            "request": {
                "model": "gpt-4o-mini",
                "max_tokens": 256,
                "messages": [{"role": "user", "content": question}],
            },
        }
        return "/api/v1/resolve", body, {}
    if kind in {"gateway", "memory"}:
        text = question if kind == "gateway" else f"{FACTS[number % len(FACTS)]} (note {number})"
        body = {
            "model": "support" if kind == "gateway" else MEMORY_ROUTE,
            "messages": [{"role": "user", "content": text}],
        }
        headers = {"x-user-id": user, "x-session-id": f"soak_{kind}_s{number % USERS}"}
        return "/v1/chat/completions", body, headers
    document = {
        "id": f"soak-{number}",
        "title": f"Soak note {number}",
        "text": " ".join(
            f"Soak document {number}, paragraph {p}: {FACTS[(number + p) % len(FACTS)]}"
            for p in range(12)
        ),
    }
    return f"/api/v1/collections/{COLLECTION}/documents", {"documents": [document]}, {}


async def send(client: httpx.AsyncClient, kind: str, number: int, started: float) -> Answer:
    path, body, headers = request_of(kind, number)
    sent_at = time.monotonic()
    try:
        answer = await client.post(path, json=body, headers=headers)
        status, error = answer.status_code, "" if answer.status_code < 400 else answer.text[:200]
    except httpx.HTTPError as failure:
        status, error = 0, f"{type(failure).__name__}: {failure}"[:200]
    return Answer(kind, sent_at - started, 1000 * (time.monotonic() - sent_at), status, error)


async def load(
    cluster: Cluster, seconds: float, rate: float, on_window: Callable[[float], Window]
) -> list[Window]:
    """Requests at ``rate`` per second for ``seconds``; a window every ``WINDOW_S``."""
    headers = {"Authorization": f"Bearer {cluster.api_key}"}
    # Idle connections are dropped before the server's keep-alive (gunicorn's 5 s) closes them:
    # at equal timeouts a request sent on a connection the server is closing fails (ReadError),
    # the likely cause of the one error (a gateway ReadError) of a soak run beside CI's load.
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=2.0)
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S)
    windows: list[Window] = []
    pending: set[asyncio.Task[Answer]] = set()
    async with httpx.AsyncClient(
        base_url=cluster.base_url, headers=headers, limits=limits, timeout=timeout
    ) as client:
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        number = 0
        next_window = 0.0
        while (now := time.monotonic() - started) < seconds:
            if now >= next_window:
                windows.append(await loop.run_in_executor(None, on_window, next_window))
                next_window += WINDOW_S
            due = number / rate
            if due > now:
                await asyncio.sleep(min(due - now, next_window - now))
                continue
            task = asyncio.create_task(send(client, MIX[number % len(MIX)], number, started))
            pending.add(task)
            task.add_done_callback(pending.discard)
            task.add_done_callback(lambda done: place(windows, done.result()))
            number += 1
        if pending:
            await asyncio.wait(pending)
    return windows


def place(windows: list[Window], answer: Answer) -> None:
    """An answer goes to the window it was sent in."""
    for window in reversed(windows):
        if window.start_s <= answer.sent_at:
            window.answers.append(answer)
            return
    windows[0].answers.append(answer)


def drain(cluster: Cluster) -> float:
    """Seconds until no memory turn is pending and every ingestion job has ended."""
    started = time.monotonic()
    while time.monotonic() - started < DRAIN_TIMEOUT_S:
        turns = counts_by_status(cluster, "memory_memoryturn")
        jobs = counts_by_status(cluster, "sources_ingestionjob")
        if not turns.get("pending") and not jobs.get("queued") and not jobs.get("running"):
            break
        time.sleep(1)
    return time.monotonic() - started


def run_soak(quick: bool) -> SoakResults:
    from scripts.bench_env import git_revision

    seconds = QUICK_SECONDS if quick else float(os.environ.get("SOAK_SECONDS") or DEFAULT_SECONDS)
    rate = float(os.environ.get("SOAK_RATE") or DEFAULT_RATE)
    root = ROOT / "var" / "soak"
    shutil.rmtree(root, ignore_errors=True)
    load_before = load_average()
    log(f"soak: starting the cluster in {root} …")
    with Cluster(root=root) as cluster:
        prepare(cluster)
        log(f"soak: {rate:g} requests/s for {seconds:g} s against {cluster.base_url} …")

        def window(start_s: float) -> Window:
            return Window(start_s, memory_by_part(cluster), database_connections(cluster))

        windows = asyncio.run(load(cluster, seconds, rate, window))
        end_memory = memory_by_part(cluster)
        log("soak: waiting for the queued memory turns and ingestion jobs …")
        drain_s = drain(cluster)
        turns = counts_by_status(cluster, "memory_memoryturn")
        jobs = counts_by_status(cluster, "sources_ingestionjob")
    warmup_s = seconds * WARMUP_SHARE
    after_warmup = [w for w in windows if w.start_s >= warmup_s] or windows
    results = SoakResults(
        date=utc_now(),
        commit=git_revision(),
        seconds=seconds,
        rate=rate,
        windows=windows,
        start_memory_mb=after_warmup[0].memory_mb,
        end_memory_mb=end_memory,
        warmup_s=after_warmup[0].start_s,
        turns=turns,
        jobs=jobs,
        drain_s=drain_s,
        load_before=load_before,
        load_after=load_average(),
        quick=quick,
    )
    for answer in results.answers:
        if not ok(answer):
            results.errors[f"{answer.kind}: {answer.status} {answer.error[:80]}"] += 1
    return results


def latency_summary(answers: list[Answer]) -> tuple[float, float]:
    times = [answer.ms for answer in answers if ok(answer)]
    return (statistics.median(times) if times else float("nan")), percentile(times, 99)
