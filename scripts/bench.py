"""``make bench``: measure the resolver and the HTTP API, then write docs/benchmarks.md.

Sections: (1) resolver overhead over the slowest source, in process; (2) parallel vs sequential
fetch; (3) ``POST /api/v1/resolve`` over loopback HTTP with uvicorn, 1 and 2 workers; (4) retrieval:
quality on Cranfield and recall speed over 100,000 chunks (``scripts/bench_retrieval.py``); (5)
compression: speed and a planted fact through 10x compression, in process
(``scripts/bench_compression.py``); (6) memory: write to searchable through a real Celery worker,
search over 1,000,000 memories, recall of planted facts (``scripts/bench_memory.py``); (7)
observability: metrics, replay and the live stream on vs off per resolve, in process, and live
fan-out to 50 WebSocket dashboards of a real uvicorn (``scripts/bench_observability.py``); (8)
the gateway: its overhead over calling a loopback upstream directly, non-streaming and time to
first token, and requests/s at 32 clients, beside LiteLLM's proxy (``scripts/bench_gateway.py``);
the pool strategies of ``model.balance`` on a fast and a slow upstream (``scripts/bench_balance.py``;
``BENCH_ONLY=balance``);
(9) connectors: each connector source's fetch overhead over calling its peer directly
(``scripts/bench_connectors.py``; ``BENCH_ONLY=connectors`` runs it alone); (10) pre-warm: the
demo route's resolve with and without a pre-warmed session, in process (``scripts/bench_prewarm.py``;
``BENCH_ONLY=prewarm`` runs it alone); (11) lazy retrieval: the context a lazy RAG source saves
on the demo route (``scripts/bench_lazy.py``; ``BENCH_ONLY=lazy``); (14) evaluation runs: a run of
50 cases and the live resolve p50 during runs beside it alone (``scripts/bench_evals.py``;
``BENCH_ONLY=evals``); (16) provider prompt caching: the prefix kept from turn to turn with
context injected (``scripts/bench_prompt_cache.py``; ``BENCH_ONLY=prompt_cache``); (15) re-runs: a recorded request re-run as is and against a draft beside
its live resolve, and a draft tried on the last 50 and 200 records (``scripts/bench_rerun.py``;
``BENCH_ONLY=rerun``); (16) thousands of tenants: creation, migrations, catalog, latency, RSS and
connections against the tenant count, in a database of its own (``scripts/bench_scale.py``;
``BENCH_ONLY=scale``); the HTTP path under wrk
(``BENCH_ONLY=http_path``), the request path's profile (``BENCH_ONLY=request_profile``); (12) a
hanging source's work after its deadline (``BENCH_ONLY=hanging``); (13) the soak: the cluster
shape of ``make cluster`` under a fixed rate of mixed work for ten minutes
(``scripts/bench_soak.py``; ``BENCH_ONLY=soak``); the replay spool's cost in resolves/s and the
replay records a worker SIGKILLed under load loses, before the spool and now
(``scripts/bench_faults.py``; ``BENCH_ONLY=faults``); a resolve with OpenTelemetry export on and off
(``scripts/bench_tracing.py``; ``BENCH_ONLY=tracing``).
The vector backends (``milvus`` on Milvus Lite, ``qdrant`` in local mode) beside ``vectorstore``
over the retrieval section's 100,000 chunks run right after it (``scripts/bench_backends.py``;
``BENCH_ONLY=backends`` runs it alone).
The memory store's evidence recall over long conversations, dense, BM25 and the search API's
default, what the default memory source injects, and search latency at 10,000 memories of one user
(``scripts/bench_memory_recall.py``; ``BENCH_ONLY=memory_recall`` runs it alone;
``BENCH_MEMORY_DATA=assistant`` measures it on its former conversations of a user with an assistant).
``BENCH_QUICK=1`` shrinks every run (for trying the script; the page then says so).
``BENCH_BEFORE=<commit>`` with ``BENCH_ONLY=http_path`` or ``BENCH_ONLY=gateway``: that section's
throughput for the code of ``<commit>`` beside this one's, in paired rounds of the same run
(``scripts/bench_compare.py``), written right after the section instead of the section itself.
``BENCH_ONLY=retrieval``, ``BENCH_ONLY=compression``, ``BENCH_ONLY=memory``,
``BENCH_ONLY=observability`` or ``BENCH_ONLY=gateway`` runs section 4, 5, 6, 7 or 8 alone and
replaces it in the existing page (section 5 needs no database).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts import bench_sources  # noqa: F401  (registers the bench-only source kind)
from scripts.bench_backends import run_backends
from scripts.bench_balance import print_balance, run_balance, write_balance
from scripts.bench_compare import (
    BEFORE_ENV,
    before_commit,
    run_gateway_compare,
    run_http_path_compare,
)
from scripts.bench_compression import run_compression
from scripts.bench_connectors import run_connectors
from scripts.bench_env import environment, git_revision
from scripts.bench_evals import print_evals, run_evals, write_evals
from scripts.bench_faults import run_faults
from scripts.bench_gateway import run_gateway
from scripts.bench_hanging import run_hanging
from scripts.bench_http import measure_http, server_config
from scripts.bench_lazy import print_lazy, run_lazy, write_lazy
from scripts.bench_memory import run_memory
from scripts.bench_memory_recall import (
    print_memory_recall,
    run_memory_recall,
    write_memory_recall,
)
from scripts.bench_observability import run_observability
from scripts.bench_prewarm import run_prewarm
from scripts.bench_profile import run_profile
from scripts.bench_prompt_cache import (
    print_prompt_cache,
    run_prompt_cache,
    write_prompt_cache,
)
from scripts.bench_rerun import print_rerun, run_rerun, write_rerun
from scripts.bench_resolver import (
    PARALLEL_FACTOR,
    PARALLEL_SLEEP_MS,
    TARGET_P50_MS,
    TARGET_P99_MS,
    OverheadResult,
    ParallelResult,
    measure_estimation,
    measure_overhead,
    measure_parallelism,
    prepare_routes,
)
from scripts.bench_retrieval import RetrievalResults, run_retrieval
from scripts.bench_scale import print_scale, run_scale, write_scale
from scripts.bench_setup import (
    BENCH_TENANT,
    ROOT,
    clear_bench_replay,
    delete_replay,
    ensure_tenant,
    log,
    manage,
    prepare_database,
    setup_django,
)
from scripts.bench_soak import run_soak
from scripts.bench_stats import Summary, summarize
from scripts.bench_tracing import run_tracing
from scripts.bench_wrk import run_http_path
from scripts.report import (
    BenchResults,
    Check,
    HttpRun,
    print_checks,
    worker_split,
    write_report,
)
from scripts.report_backends import print_backends, write_backends
from scripts.report_compare import print_compare, write_compare
from scripts.report_compression import print_compression, write_compression
from scripts.report_connectors import print_connectors, write_connectors
from scripts.report_faults import print_faults, write_faults
from scripts.report_gateway import print_gateway, write_gateway
from scripts.report_hanging import print_hanging, write_hanging
from scripts.report_memory import print_memory, write_memory
from scripts.report_observability import print_observability, write_observability
from scripts.report_prewarm import print_prewarm, write_prewarm
from scripts.report_profile import print_profile, write_profile
from scripts.report_retrieval import print_retrieval, write_retrieval
from scripts.report_soak import print_soak, write_soak
from scripts.report_tracing import print_tracing, write_tracing
from scripts.report_wrk import print_http_path, write_http_path

DEMO_TENANT = "demo"


@dataclass(frozen=True)
class RunSizes:
    overhead_iterations: int = 1000
    overhead_warmup: int = 50
    parallel_runs: int = 40
    sequential_runs: int = 12
    parallel_warmup: int = 3
    http_clients: int = 32
    http_requests: int = 3000
    http_warmup: int = 128
    http_cap_s: float = 60.0
    http_workers: tuple[int, ...] = (1, 2)

    def describe(self, quick: bool) -> dict[str, str]:
        return {
            "mode": "QUICK (BENCH_QUICK=1): reduced sizes, not for comparison" if quick else "full",
            "overhead": f"{self.overhead_iterations} recorded + {self.overhead_iterations} "
            f"unrecorded resolves after {self.overhead_warmup} warm-up pairs",
            "parallelism": f"{self.parallel_runs} parallel and {self.sequential_runs} sequential "
            f"resolves after {self.parallel_warmup} warm-up",
            "http": f"{self.http_clients} clients, {self.http_requests} requests per worker "
            f"count (cap {self.http_cap_s:g} s) after {self.http_warmup} warm-up requests",
        }


QUICK = RunSizes(
    overhead_iterations=100,
    overhead_warmup=10,
    parallel_runs=10,
    sequential_runs=3,
    http_requests=300,
    http_warmup=64,
    http_cap_s=20.0,
)


def resolver_checks(overhead: OverheadResult, parallel: ParallelResult) -> list[Check]:
    full = overhead.overhead()
    target_ms = parallel_target(overhead)
    total = parallel.parallel_total()
    return [
        Check(
            "overhead p50",
            f"≤ {TARGET_P50_MS:g} ms",
            f"{full.p50:.2f} ms",
            full.p50 <= TARGET_P50_MS,
        ),
        Check(
            "overhead p99",
            f"≤ {TARGET_P99_MS:g} ms",
            f"{full.p99:.2f} ms",
            full.p99 <= TARGET_P99_MS,
        ),
        Check(
            "6 x 50 ms sources, resolve p50",
            f"≤ {PARALLEL_FACTOR} x {PARALLEL_SLEEP_MS:g} + {full.p50:.2f} = {target_ms:.2f} ms",
            f"{total.p50:.2f} ms (sequential {parallel.sequential_total().p50:.1f} ms)",
            total.p50 <= target_ms,
        ),
    ]


def http_checks(runs: list[HttpRun]) -> list[Check]:
    checks = []
    for run in runs:
        result = run.result
        latency = summarize(result.latencies_ms)
        checks.append(
            Check(
                f"HTTP resolve, {result.clients} clients, workers={result.workers}",
                "reported (no target); no errors",
                f"{result.requests_per_s:.0f} req/s, p50 {latency.p50:.1f} ms, "
                f"p99 {latency.p99:.1f} ms, {sum(result.errors.values())} errors",
                not result.errors,
            )
        )
    return checks


def parallel_target(overhead: OverheadResult) -> float:
    return PARALLEL_FACTOR * PARALLEL_SLEEP_MS + overhead.overhead().p50


def run_resolver(
    sizes: RunSizes,
) -> tuple[OverheadResult, ParallelResult, dict[str, Summary]]:
    ensure_tenant(BENCH_TENANT)
    prepare_routes()
    clear_bench_replay()
    log(f"resolver overhead: {sizes.overhead_iterations} iterations x 2 …")
    overhead = measure_overhead(sizes.overhead_iterations, sizes.overhead_warmup)
    log("parallelism: 6 sources of 50 ms, parallel and sequential …")
    parallel = measure_parallelism(
        sizes.parallel_runs, sizes.sequential_runs, sizes.parallel_warmup
    )
    return overhead, parallel, measure_estimation()


def run_http(sizes: RunSizes, key: str) -> list[HttpRun]:
    runs: list[HttpRun] = []
    made: list[str] = []
    for workers in sizes.http_workers:
        log(f"HTTP: uvicorn --workers {workers}, {sizes.http_clients} clients …")
        result, ids = measure_http(
            key,
            workers=workers,
            clients=sizes.http_clients,
            total=sizes.http_requests,
            warmup=sizes.http_warmup,
            cap_s=sizes.http_cap_s,
        )
        runs.append(HttpRun(result=result, config=server_config(workers)))
        made += ids
    removed = delete_replay(DEMO_TENANT, made)
    log(f"removed {removed} replay records the benchmark added to tenant {DEMO_TENANT!r}")
    return runs


def print_summary(results: BenchResults) -> None:
    overhead = results.overhead
    print()
    print("Benchmark summary")
    rows = [
        ("overhead, resolve() with replay write", overhead.overhead()),
        ("overhead, record=False", overhead.overhead_without_replay()),
        ("replay write alone", overhead.replay_write()),
        ("6x50 ms parallel total", results.parallel.parallel_total()),
        ("6x50 ms sequential total", results.parallel.sequential_total()),
    ]
    for label, summary in rows:
        print(
            f"  {label:<40} p50 {summary.p50:8.2f}  p95 {summary.p95:8.2f}  p99 {summary.p99:8.2f} ms"
        )
    for run in results.http:
        result = run.result
        latency = summarize(result.latencies_ms)
        print(
            f"  HTTP workers={result.workers}: {result.requests_per_s:.1f} req/s, "
            f"p50 {latency.p50:.1f} ms, p99 {latency.p99:.1f} ms, "
            f"errors {sum(result.errors.values())} ({result.completed} requests), "
            f"CPU split across workers {worker_split(result)}"
        )
    print_checks(results.checks)
    print(f"  runtime {results.runtime_s:.0f} s")


def retrieval_part(quick: bool) -> RetrievalResults:
    ensure_tenant(BENCH_TENANT)
    return run_retrieval(quick)


@dataclass(frozen=True)
class Section:
    """One of sections 4-8: run it, write it into the page, print its summary."""

    run: Callable[[bool], Any]
    write: Callable[[Any, Path, str], list[Path]]
    show: Callable[[Any], None]
    database: bool = True


# In page order; BENCH_ONLY=<name> runs one alone and replaces it in the existing page.
SECTIONS = {
    "retrieval": Section(retrieval_part, write_retrieval, print_retrieval),
    "backends": Section(run_backends, write_backends, print_backends),
    "compression": Section(run_compression, write_compression, print_compression, database=False),
    "memory": Section(run_memory, write_memory, print_memory),
    "memory_recall": Section(run_memory_recall, write_memory_recall, print_memory_recall),
    "observability": Section(run_observability, write_observability, print_observability),
    "gateway": Section(run_gateway, write_gateway, print_gateway),
    "balance": Section(run_balance, write_balance, print_balance),
    "connectors": Section(run_connectors, write_connectors, print_connectors),
    "prewarm": Section(run_prewarm, write_prewarm, print_prewarm),
    "lazy": Section(run_lazy, write_lazy, print_lazy),
    "evals": Section(run_evals, write_evals, print_evals),
    "rerun": Section(run_rerun, write_rerun, print_rerun),
    "prompt_cache": Section(run_prompt_cache, write_prompt_cache, print_prompt_cache),
    # Thousands of tenants in a database of its own (var/bench/scale, removed afterwards).
    "scale": Section(run_scale, write_scale, print_scale, database=False),
    "http_path": Section(run_http_path, write_http_path, print_http_path),
    "request_profile": Section(run_profile, write_profile, print_profile),
    "hanging": Section(run_hanging, write_hanging, print_hanging),
    "faults": Section(run_faults, write_faults, print_faults),
    "tracing": Section(run_tracing, write_tracing, print_tracing),
    # The cluster shape brings its own PostgreSQL and Redis: not the bench's database.
    "soak": Section(run_soak, write_soak, print_soak, database=False),
}
# BENCH_BEFORE=<commit>: these sections' code of <commit> beside this one's, in the same run.
COMPARED = {
    "http_path": Section(run_http_path_compare, write_compare, print_compare),
    "gateway": Section(run_gateway_compare, write_compare, print_compare),
}


def main_only(section: Section, quick: bool) -> None:
    if section.database:
        log("migrate_schemas …")
        manage("migrate_schemas", "--noinput", "-v", "0")
        setup_django()
    results = section.run(quick)
    written = section.write(results, ROOT / "docs", git_revision())
    section.show(results)
    for path in written:
        print(f"  wrote {path.relative_to(ROOT)}")


def main() -> None:
    started = time.perf_counter()
    quick = os.environ.get("BENCH_QUICK", "") not in {"", "0"}
    only = os.environ.get("BENCH_ONLY", "").strip()
    if before_commit():
        if only not in COMPARED:
            raise SystemExit(f"{BEFORE_ENV} needs BENCH_ONLY= one of {sorted(COMPARED)}")
        main_only(COMPARED[only], quick)
        return
    if only:
        if only not in SECTIONS:
            raise SystemExit(f"BENCH_ONLY={only!r}: expected one of {sorted(SECTIONS)} or unset")
        main_only(SECTIONS[only], quick)
        return
    sizes = QUICK if quick else RunSizes()
    log("migrate_schemas and bootstrap_demo …")
    key = prepare_database()
    setup_django()
    overhead, parallel, estimation = run_resolver(sizes)
    http = run_http(sizes, key)
    measured = [(section, section.run(quick)) for section in SECTIONS.values()]
    results = BenchResults(
        environment=environment(),
        overhead=overhead,
        parallel=parallel,
        parallel_target_ms=parallel_target(overhead),
        estimation=estimation,
        http=http,
        checks=resolver_checks(overhead, parallel) + http_checks(http),
        settings=sizes.describe(quick),
    )
    results.runtime_s = time.perf_counter() - started
    written = write_report(results, ROOT / "docs")
    for section, measurement in measured:
        written += section.write(measurement, ROOT / "docs", results.environment["commit"])
    print_summary(results)
    for section, measurement in measured:
        section.show(measurement)
    for path in dict.fromkeys(written):
        print(f"  wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
