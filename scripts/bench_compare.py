"""Before and after: the http_path and gateway sections' throughput for another commit's code
beside this one's, in the same run.

``BENCH_BEFORE=<commit> BENCH_ONLY=http_path make bench`` (or ``BENCH_ONLY=gateway``): the code of
``<commit>`` is extracted with ``git archive`` (as the faults section extracts its older code) and
served from its own folder, by its own ``manage.py`` settings, beside a server of the working tree.
The two codes share the bench's database: the migrations are the same in both (the older code's
``showmigrations`` must find every one of its migrations applied, or the comparison stops), and the
bench's demo key, routes and upstream deployment are written once for both. Each server has a
``REPLAY_SPOOL_DIR`` and a ``PROMETHEUS_MULTIPROC_DIR`` of its own.

Both servers are up at once; in each of 3 paired rounds every measurement loads one code, then the
other, the first of a round alternating between rounds, so that the machine's drift falls on both
alike. A measurement's figure is the median of its rounds; after / before at or above
``NO_SLOWER`` passes.

- http_path: gunicorn with the project's worker class (``contextplatform.server.UvicornWorker``, in
  both codes), 2 workers, as ``make run`` serves it; ``POST /api/v1/resolve`` on the demo route and
  ``GET /healthz`` under ``wrk -t2 -c32``.
- gateway: uvicorn, one worker, as the gateway section serves it; ``POST /v1/chat/completions`` on a
  route without sources forwarding to the loopback upstream, at 32 clients (requests/s), and the
  sequential overhead over calling the upstream directly (the three called in a fresh random order
  each round; reported beside the requests/s, the gateway section's own targets judge it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from scripts.bench_env import git_revision, load_average, utc_now
from scripts.bench_faults import Code, code_env, manage_in
from scripts.bench_gateway import (
    FULL_SIZES,
    GATEWAY,
    QUICK_SIZES,
    ROUTE_BARE,
    GatewayResults,
    Prepared,
    Sizes,
    Target,
    clean_tenant,
    drain,
    ensure_wrk,
    gateway_env,
    load_command,
    measure_rounds,
    prepare_tenant,
    run_load,
    running_upstream,
    settle,
    targets,
)
from scripts.bench_http import LOG_DIR
from scripts.bench_profile import database_url, extract_before
from scripts.bench_server import free_port
from scripts.bench_setup import ROOT, log
from scripts.bench_stats import median
from scripts.bench_wrk import (
    FOLDER,
    GUNICORN,
    HEALTHZ,
    PLATFORM_APP,
    RESOLVE,
    UVICORN,
    Request,
    Served,
    ServerKind,
    delete_resolve_replay,
    full_plan,
    measure,
    quick_plan,
    requests_for,
    serving,
)

BEFORE_ENV = "BENCH_BEFORE"
COMPARED = ("http_path", "gateway")
CODES = ("before", "after")
ROUNDS = 3
NO_SLOWER = 0.95  # after's requests/s at least this share of before's, medians of the same run
HTTP_PATH_WORKERS = 2
GATEWAY_WORKERS = 1
GATEWAY_OVERHEAD = "gateway overhead"
COMPARE_FOLDER = LOG_DIR / "compare"

LABELS = {
    RESOLVE: f"POST /api/v1/resolve, demo route, {HTTP_PATH_WORKERS} workers",
    HEALTHZ: f"GET /healthz, {HTTP_PATH_WORKERS} workers",
    GATEWAY: "gateway, route without sources, 1 worker, 32 clients",
}


def before_commit() -> str:
    """The commit ``BENCH_BEFORE`` names, or "" when the sections run as usual."""
    return os.environ.get(BEFORE_ENV, "").strip()


def short_commit(commit: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", commit],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


# Results -----------------------------------------------------------------------------------------


@dataclass
class ComparedRun:
    measurement: str
    code: str  # "before" or "after"
    round: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    server_cpu_ms_per_request: float
    load_average: float


@dataclass
class CompareResults:
    section: str  # "http_path" or "gateway"
    date: str
    quick: bool
    before: str
    after: str
    seconds: float
    warmup_s: float
    server: str
    measurements: list[str] = field(default_factory=list)
    runs: list[ComparedRun] = field(default_factory=list)
    # The gateway's sequential overhead over the direct call, p50 ms per code (non-streaming).
    overhead_p50_ms: dict[str, float] = field(default_factory=dict)
    overhead_calls: int = 0
    problems: list[str] = field(default_factory=list)
    load_average_start: str = ""
    load_average_end: str = ""
    runtime_s: float = 0.0

    def of(self, measurement: str, code: str) -> list[ComparedRun]:
        return [r for r in self.runs if (r.measurement, r.code) == (measurement, code)]

    def median_rate(self, measurement: str, code: str) -> float:
        rates = [run.requests_per_s for run in self.of(measurement, code)]
        return median(rates) if rates else float("nan")

    def ratio(self, measurement: str) -> float:
        before = self.median_rate(measurement, "before")
        return self.median_rate(measurement, "after") / before if before else float("nan")

    def round_ratios(self, measurement: str) -> list[float]:
        before = {run.round: run.requests_per_s for run in self.of(measurement, "before")}
        return [
            run.requests_per_s / before[run.round]
            for run in self.of(measurement, "after")
            if before.get(run.round)
        ]


# The two codes -----------------------------------------------------------------------------------


def check_schema(folder: Path, url: str) -> None:
    """The older code's migrations all applied to the shared database: else the two codes would
    not read the same tables, and the comparison stops."""
    listed = manage_in(folder, url, "showmigrations", "--list")
    missing = [line.strip() for line in listed.splitlines() if line.strip().startswith("[ ]")]
    if missing:
        raise RuntimeError(
            f"the code of {BEFORE_ENV} has migrations this database lacks: {', '.join(missing)}"
        )


@contextlib.contextmanager
def codes_at(commit: str, request: Request) -> Iterator[dict[str, Code]]:
    """``before`` (``commit``, extracted) and ``after`` (the working tree) on the shared database."""
    folder = extract_before(COMPARE_FOLDER / "before", commit)
    try:
        url = database_url()
        check_schema(folder, url)
        yield {
            "before": Code("before", folder, url, request),
            "after": Code("after", ROOT, url, request),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def served_codes(
    codes: dict[str, Code], kind: ServerKind, workers: int, section: str
) -> Iterator[dict[str, Served]]:
    """A server of each code, both up at once, each with its own spool and metrics folder."""
    scratch = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    try:
        with contextlib.ExitStack() as stack:
            servers = {}
            for name, code in codes.items():
                env = code_env(code, scratch / f"spool-{name}", scratch / f"metrics-{name}")
                (scratch / f"metrics-{name}").mkdir()
                log(f"{section}: compare: serving {name} ({code.folder}) …")
                servers[name] = stack.enter_context(
                    serving(
                        kind,
                        PLATFORM_APP,
                        workers,
                        env,
                        cwd=code.folder,
                        log_name=f"compare-{section}-{name}",
                    )
                )
            yield servers
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def paired_rounds(
    results: CompareResults, measure_one: Callable[[str, str, int], ComparedRun]
) -> None:
    """``ROUNDS`` rounds: each measurement on one code then the other, the first alternating."""
    for number in range(ROUNDS):
        order = CODES if number % 2 == 0 else CODES[::-1]
        for measurement in results.measurements:
            for code in order:
                log(f"{results.section}: compare round {number + 1}, {measurement}, {code} …")
                run = measure_one(measurement, code, number)
                results.runs.append(run)
                log(
                    f"{results.section}:   {run.requests_per_s:,.0f} req/s, p99 "
                    f"{run.p99_ms:.1f} ms, errors {run.errors}"
                )


def new_results(
    section: str, quick: bool, server: str, seconds: float, warmup: float
) -> CompareResults:
    commit = before_commit()
    return CompareResults(
        section=section,
        date=utc_now(),
        quick=quick,
        before=short_commit(commit),
        after=git_revision(),
        seconds=seconds,
        warmup_s=warmup,
        server=server,
        load_average_start=load_average(),
    )


def finished(results: CompareResults, started: float) -> CompareResults:
    results.load_average_end = load_average()
    results.runtime_s = time.perf_counter() - started
    return results


# http_path ---------------------------------------------------------------------------------------


def run_http_path_compare(quick: bool) -> CompareResults:
    started = time.perf_counter()
    began = time.time()
    plan = quick_plan() if quick else full_plan()
    results = new_results(
        "http_path",
        quick,
        GUNICORN.shown(PLATFORM_APP, HTTP_PATH_WORKERS),
        plan.seconds,
        plan.warmup_s,
    )
    results.measurements = [RESOLVE, HEALTHZ]
    wrk = ensure_wrk()
    if wrk is None:
        results.problems.append("wrk is missing and apt-get could not install it")
        return finished(results, started)
    FOLDER.mkdir(parents=True, exist_ok=True)
    prepared: Prepared | None = None
    upstream_port = free_port()
    try:
        with running_upstream(upstream_port, dict(os.environ)):
            prepared = prepare_tenant(upstream_port)
            requests = requests_for(prepared.key)
            with (
                codes_at(before_commit(), requests[RESOLVE]) as codes,
                served_codes(codes, GUNICORN, HTTP_PATH_WORKERS, "http_path") as servers,
            ):

                def measure_one(target: str, code: str, number: int) -> ComparedRun:
                    run = measure(
                        wrk,
                        servers[code],
                        requests[target],
                        target=target,
                        redis=False,
                        seconds=plan.seconds,
                        warmup_s=plan.warmup_s,
                    )
                    return ComparedRun(
                        measurement=target,
                        code=code,
                        round=number,
                        requests_per_s=run.requests_per_s,
                        p50_ms=run.p50,
                        p99_ms=run.p99,
                        errors=run.failed,
                        server_cpu_ms_per_request=run.server_cpu_ms_per_request,
                        load_average=run.load_average[0],
                    )

                paired_rounds(results, measure_one)
    finally:
        clean_tenant(prepared)
        with contextlib.suppress(Exception):
            log(f"http_path: removed {delete_resolve_replay(began)} replay records of the resolves")
        for written in FOLDER.glob("wrk-*.lua"):
            written.unlink()  # they hold the run's key
    return finished(results, started)


# gateway -----------------------------------------------------------------------------------------


def gateway_targets(upstream_port: int, servers: dict[str, Served], key: str) -> list[Target]:
    """The direct call, then the route without sources through each code's gateway (named
    gateway-<code>: the load runs read the database's CPU for targets named after the gateway)."""
    made = [targets(upstream_port, servers[code], key, None) for code in CODES]
    bare = [next(t for t in each if t.name == GATEWAY) for each in made]
    return [made[0][0]] + [
        Target(f"{GATEWAY}-{code}", target.url, target.headers, ROUTE_BARE)
        for code, target in zip(CODES, bare, strict=True)
    ]


def run_gateway_compare(quick: bool) -> CompareResults:
    started = time.perf_counter()
    sizes = QUICK_SIZES if quick else FULL_SIZES
    results = new_results(
        "gateway",
        quick,
        UVICORN.shown(PLATFORM_APP, GATEWAY_WORKERS),
        sizes.load_seconds,
        0.0,
    )
    results.measurements = [GATEWAY]
    wrk = ensure_wrk()
    upstream_port = free_port()
    prepared: Prepared | None = None
    folder = LOG_DIR / "gateway"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with running_upstream(upstream_port, gateway_env()):
            prepared = prepare_tenant(upstream_port)
            with (
                codes_at(before_commit(), requests_for(prepared.key)[GATEWAY]) as codes,
                served_codes(codes, UVICORN, GATEWAY_WORKERS, "gateway") as servers,
            ):
                made = gateway_targets(upstream_port, servers, prepared.key)
                through = dict(zip(CODES, made[1:], strict=True))
                measure_overhead(results, made, sizes)
                cpu_of = [server.cpu_seconds for server in servers.values()]

                def measure_one(target: str, code: str, number: int) -> ComparedRun:
                    settle(cpu_of)
                    command = load_command(through[code], wrk, folder, sizes.load_seconds)
                    run = run_load(
                        through[code], command, servers[code].cpu_seconds, sizes.load_seconds
                    )
                    drain(through[code])
                    rate = run.ok / run.seconds if run.seconds else 0.0
                    return ComparedRun(
                        measurement=target,
                        code=code,
                        round=number,
                        requests_per_s=rate,
                        p50_ms=run.p50_ms,
                        p99_ms=run.p99_ms,
                        errors=run.failed,
                        server_cpu_ms_per_request=(
                            run.server_cpu_s * 1000 / run.ok if run.ok else float("nan")
                        ),
                        load_average=os.getloadavg()[0],
                    )

                paired_rounds(results, measure_one)
    finally:
        clean_tenant(prepared)
        for written in folder.glob("*"):
            if written.name.startswith(("wrk-", "body-")):  # they hold the run's key
                written.unlink()
    return finished(results, started)


def measure_overhead(results: CompareResults, made: list[Target], sizes: Sizes) -> None:
    """The gateway section's sequential rounds (every target once a round, in a fresh random
    order) over the direct call and both gateways: each code's p50 overhead, non-streaming."""
    calls = GatewayResults(date=results.date, quick=results.quick, sizes=sizes, targets=[])
    log(f"gateway: compare: {sizes.rounds} sequential rounds, direct and both gateways …")
    with contextlib.ExitStack() as stack:
        clients = {t.name: stack.enter_context(httpx.Client(timeout=30.0)) for t in made}
        measure_rounds(clients, made, sizes, calls)
    for code in CODES:
        added = calls.added("latency_ms", f"{GATEWAY}-{code}")
        if added:
            results.overhead_p50_ms[code] = median(added)
    results.overhead_calls = sizes.rounds
    for name, failures in calls.failures.items():
        for kind, count in failures.items():
            results.problems.append(f"{name}: {count} sequential calls failed ({kind})")
