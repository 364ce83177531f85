"""Section "faults": what the replay writer's write-ahead spool costs and what it saves.

The code of ``BEFORE`` (the commit before the spool, extracted with ``git archive``: same
virtualenv, same PostgreSQL server) and the working tree ("now") are served side by side, each on a
database of its own that its own code migrated and filled with ``bootstrap_demo`` (later
migrations changed tables the older code reads: a deployment's headers became tokens), as
``make run`` serves them but with uvicorn's own worker class (gunicorn +
``uvicorn_worker.UvicornWorker``, 2 workers: the older code has not the project's, so only the
spool differs), the replay writer in its default background mode, each with a
``REPLAY_SPOOL_DIR`` of its own under var/bench.

1. Speed: the demo route's ``POST /api/v1/resolve`` under ``wrk -t2 -c32`` in alternating paired
   rounds (both servers up, each round loading one then the other, the first of a round
   alternating); the figure is the median of the rounds' now / before ratios, so the machine's
   drift between rounds falls out.
2. Durability: a fresh server of each code under resolves from several kept-alive clients; one
   worker is SIGKILLed mid-load and gunicorn's arbiter starts another; once the load has ended and
   the replacement serves, every id answered 200 is looked up among the replay records: those
   without one are lost (the spool of now's killed worker is replayed by the process that
   replaces it).

``BENCH_ONLY=faults make bench`` runs it alone; ``BENCH_QUICK=1`` shorter and fewer rounds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg

from scripts.bench_env import load_average, utc_now
from scripts.bench_gateway import ensure_wrk
from scripts.bench_profile import database_url, extract_before
from scripts.bench_setup import DEMO_TENANT, ROOT, log, manage
from scripts.bench_wrk import (
    FOLDER,
    GUNICORN,
    PLATFORM_APP,
    RESOLVE,
    Request,
    Served,
    WrkRun,
    gunicorn_argv,
    measure,
    requests_for,
    server_env,
    serving,
)

BEFORE = "f7d288f"  # the commit before the replay spool
# The server make run starts, with uvicorn's own worker class: the code before has not the
# project's (which caps the request head), so both codes run this one and only the spool differs.
STOCK_GUNICORN = dataclasses.replace(
    GUNICORN, argv=functools.partial(gunicorn_argv, worker_class="uvicorn_worker.UvicornWorker")
)
CODES = ("before", "now")
WORKERS = 2
SPEED_TARGET = 0.90  # now's resolve requests/s at least this share of before's, same run
KILL_CLIENTS = 8
WARM_TIMEOUT_S = 120.0
REPLACED_TIMEOUT_S = 60.0
WRITTEN_TIMEOUT_S = 15.0  # how long the records answered may take to appear after the restart


@dataclass(frozen=True)
class Plan:
    rounds: int
    seconds: float
    warmup_s: float
    kill_rounds: int  # per code
    kill_after_answers: int  # the load warms the fresh server: the kill comes once it has answered
    after_kill_s: float  # the load goes on this long after the kill


FULL = Plan(
    rounds=4, seconds=8.0, warmup_s=2.0, kill_rounds=2, kill_after_answers=400, after_kill_s=4.0
)
QUICK = Plan(
    rounds=1, seconds=3.0, warmup_s=1.0, kill_rounds=1, kill_after_answers=100, after_kill_s=2.0
)


@dataclass
class PairedRun:
    code: str
    round: int
    run: WrkRun


@dataclass
class KillRun:
    code: str
    round: int
    answered: int
    lost: int
    failed: int  # calls that got no answer (their worker killed under them) or not a 200
    lost_after_stop: int  # still without a record once the server had stopped cleanly


@dataclass
class FaultsResults:
    date: str
    quick: bool
    before: str
    plan: Plan
    paired: list[PairedRun] = field(default_factory=list)
    kills: list[KillRun] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    load_average_start: str = ""
    load_average_end: str = ""
    runtime_s: float = 0.0

    def ratios(self) -> list[float]:
        """now / before requests/s of each round both were measured in."""
        by_round: dict[int, dict[str, float]] = {}
        for paired in self.paired:
            by_round.setdefault(paired.round, {})[paired.code] = paired.run.requests_per_s
        return [
            rates["now"] / rates["before"]
            for _, rates in sorted(by_round.items())
            if rates.get("before") and "now" in rates
        ]


@dataclass(frozen=True)
class Code:
    """One code under test: where it is, its own database, and the resolve its demo answers."""

    name: str  # "before" or "now"
    folder: Path
    database_url: str
    request: Request  # the demo route's resolve, with the key this code's bootstrap_demo issued


def own_database(name: str) -> str:
    """A new, empty database for one code on the bench's PostgreSQL server: its URL."""
    server = database_url()
    database = f"bench_faults_{name}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{database}"')
    return urlsplit(server)._replace(path=f"/{database}").geturl()


def drop_database(url: str) -> None:
    database = urlsplit(url).path.lstrip("/")
    with psycopg.connect(database_url(), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def manage_in(folder: Path, url: str, *args: str) -> str:
    """``manage.py`` of the code in ``folder`` on the database at ``url``: its output."""
    env = {**os.environ, "DATABASE_URL": url}
    env.pop("REDIS_URL", None)
    return manage(*args, cwd=folder, env=env)


def prepared(name: str, folder: Path) -> Code:
    """``name``'s code on a database of its own: migrated and given the demo by that code."""
    url = own_database(name)
    log(f"faults: {name}: migrate_schemas and bootstrap_demo …")
    manage_in(folder, url, "migrate_schemas", "--noinput", "-v", "0")
    printed = manage_in(folder, url, "bootstrap_demo")
    key = re.search(r"\bcp_[A-Za-z0-9_-]+", printed)
    if key is None:
        raise RuntimeError(f"{name}: bootstrap_demo printed no API key")
    return Code(name, folder, url, requests_for(key.group(0))[RESOLVE])


def code_env(code: Code, spool: Path, metrics: Path) -> dict[str, str]:
    env = server_env(WORKERS, None, metrics)
    env["DATABASE_URL"] = code.database_url
    env["REPLAY_SPOOL_DIR"] = str(spool)
    env.pop("REPLAY_WRITES", None)  # the default: the background writer
    return env


@contextlib.contextmanager
def served(code: Code, name: str) -> Iterator[Served]:
    """A production server of ``code`` with its own spool and metrics."""
    spool = FOLDER / f"faults-spool-{name}"
    shutil.rmtree(spool, ignore_errors=True)
    metrics = Path(tempfile.mkdtemp(prefix="bench-prometheus-"))
    try:
        with serving(
            STOCK_GUNICORN,
            PLATFORM_APP,
            WORKERS,
            code_env(code, spool, metrics),
            cwd=code.folder,
            log_name=f"faults-{name}",
        ) as server:
            yield server
    finally:
        shutil.rmtree(metrics, ignore_errors=True)
        shutil.rmtree(spool, ignore_errors=True)


# 1. Speed ----------------------------------------------------------------------------------------


def measure_speed(wrk: str, results: FaultsResults, codes: dict[str, Code]) -> None:
    plan = results.plan
    with contextlib.ExitStack() as stack:
        servers = {
            code: stack.enter_context(served(codes[code], f"speed-{code}")) for code in CODES
        }
        for number in range(plan.rounds):
            for code in CODES if number % 2 == 0 else CODES[::-1]:
                log(f"faults: round {number + 1}, resolve, {code} …")
                run = measure(
                    wrk,
                    servers[code],
                    codes[code].request,
                    target=RESOLVE,
                    redis=False,
                    seconds=plan.seconds,
                    warmup_s=plan.warmup_s,
                )
                run.paired_round = number
                results.paired.append(PairedRun(code, number, run))
                log(f"faults:   {run.requests_per_s:.0f} req/s, errors {run.failed}")


# 2. A worker SIGKILLed under load ----------------------------------------------------------------


def resolve_until(
    base_url: str, request: Request, stop: threading.Event, answered: list[str], failed: list[str]
) -> None:
    """Resolves on a kept-alive connection until ``stop``: the ids answered 200, the failures."""

    def client() -> httpx.Client:
        return httpx.Client(base_url=base_url, headers=request.headers, timeout=30.0)

    session = client()
    try:
        while not stop.is_set():
            try:
                response = session.post(request.path, content=request.body)
            except httpx.HTTPError as error:  # its worker killed under it: nothing acknowledged
                failed.append(type(error).__name__)
                session.close()
                session = client()
                continue
            if response.status_code == 200:
                answered.append(response.json()["id"])
            else:
                failed.append(str(response.status_code))
    finally:
        session.close()


def without_record(code: Code, ids: list[str]) -> int:
    with psycopg.connect(code.database_url, autocommit=True) as connection:
        found = connection.execute(
            f'SELECT id FROM "{DEMO_TENANT}".routing_replayrecord WHERE id = ANY(%s)', [ids]
        ).fetchall()
    written = {row[0] for row in found}
    return sum(1 for record_id in ids if record_id not in written)


def wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.25)
    return False


def kill_under_load(code: Code, number: int, plan: Plan) -> KillRun:
    answered: list[str] = []
    failed: list[str] = []
    request = code.request
    with served(code, f"kill-{code.name}-{number}") as server:
        stop = threading.Event()
        clients = [
            threading.Thread(
                target=resolve_until, args=(server.base_url, request, stop, answered, failed)
            )
            for _ in range(KILL_CLIENTS)
        ]
        for client in clients:
            client.start()
        try:
            if not wait_for(lambda: len(answered) >= plan.kill_after_answers, WARM_TIMEOUT_S):
                raise RuntimeError(f"{code.name}: {len(answered)} answers in {WARM_TIMEOUT_S:g} s")
            victim = server.worker_processes()[0].pid
            os.kill(victim, signal.SIGKILL)
            log(f"faults: {code.name}: SIGKILL to worker {victim} after {len(answered)} answers …")
            time.sleep(plan.after_kill_s)
        finally:
            stop.set()
            for client in clients:
                client.join(timeout=60)

        def replaced() -> bool:
            pids = [process.pid for process in server.worker_processes()]
            return len(pids) == WORKERS and victim not in pids

        if not wait_for(replaced, REPLACED_TIMEOUT_S):
            raise RuntimeError(f"gunicorn did not replace worker {victim}")
        # The replacement replays the dead worker's spool as it starts; the records the killed
        # worker held only in memory never come.
        wait_for(lambda: without_record(code, answered) == 0, WRITTEN_TIMEOUT_S)
        lost = without_record(code, answered)
    after_stop = without_record(code, answered)
    result = KillRun(code.name, number, len(answered), lost, len(failed), after_stop)
    log(
        f"faults: {code.name}: {result.lost} of {result.answered} answered resolves without a replay "
        f"record ({result.lost_after_stop} after a clean stop), {result.failed} calls failed"
    )
    return result


# The section -------------------------------------------------------------------------------------


def run_faults(quick: bool) -> FaultsResults:
    started = time.perf_counter()
    plan = QUICK if quick else FULL
    results = FaultsResults(
        date=utc_now(), quick=quick, before=BEFORE, plan=plan, load_average_start=load_average()
    )
    wrk = ensure_wrk()
    if wrk is None:
        results.problems.append("wrk is missing and apt-get could not install it")
        return results
    folders = {"before": extract_before(FOLDER / "faults-before", BEFORE), "now": ROOT}
    codes: dict[str, Code] = {}
    try:
        for name in CODES:
            codes[name] = prepared(name, folders[name])
        measure_speed(wrk, results, codes)
        for number in range(plan.kill_rounds):
            for name in CODES:
                results.kills.append(kill_under_load(codes[name], number, plan))
    finally:
        shutil.rmtree(folders["before"], ignore_errors=True)
        for written in FOLDER.glob("wrk-*.lua"):
            written.unlink()  # they hold the run's keys
        for code in codes.values():
            with contextlib.suppress(Exception):
                drop_database(code.database_url)
    results.load_average_end = load_average()
    results.runtime_s = time.perf_counter() - started
    return results
