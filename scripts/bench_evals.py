"""Section 14: what an evaluation run costs, and what it does to the live path meanwhile (in process).

A copy of the demo's ``support`` route (guardrails, profile, history, documents, u_123's memories)
with 50 evaluation cases (the demo's questions, each with the article that answers it, and the
demo's own cases, repeated under new ids). Measured: an evaluation run's wall time and its time
per case (``contextplatform/evals/runner.py``, as the Celery task runs it; inline in the server
process when Celery is eager, the embedded default), and the live path's resolve p50 (the resolve
use case, replay record written, no memory write) alone and while evaluation runs go on in a
second thread of the same process. The bench's route is removed afterwards.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.bench_env import load_average, utc_now
from scripts.bench_setup import DEMO_TENANT, demo_tenant, ensure_demo_documents, log
from scripts.bench_stats import Sizes, Summary, summarize
from scripts.report import (
    Check,
    check_rows,
    print_checks,
    quick_note,
    summary_table,
    table,
    write_section,
)

ROUTE = "bench-evals"
CASES = 50
START, END = "<!-- evals:start -->", "<!-- evals:end -->"
FULL_SIZES = Sizes(rounds=300, warmup=20)
QUICK_SIZES = Sizes(rounds=40, warmup=5)
FULL_RUNS, QUICK_RUNS = 5, 2


@dataclass
class EvalsResults:
    date: str
    quick: bool
    sizes: Sizes
    runs: int
    run_s: list[float] = field(default_factory=list)
    hit_rates: list[float] = field(default_factory=list)
    live_alone_ms: list[float] = field(default_factory=list)
    live_during_ms: list[float] = field(default_factory=list)
    runs_during: int = 0
    load_average: str = ""
    runtime_s: float = 0.0

    def per_case_ms(self) -> list[float]:
        return [seconds * 1000 / CASES for seconds in self.run_s]

    def alone(self) -> Summary:
        return summarize(self.live_alone_ms)

    def during(self) -> Summary:
        return summarize(self.live_during_ms)


def bench_cases() -> list[dict[str, Any]]:
    from contextplatform.demo.defaults import DEMO_EVAL_CASES, DEMO_SAMPLE_QUESTIONS

    sample = [
        {"id": f"q{i}", "query": q, "expect": {"documents": [doc]}}
        for i, (q, doc) in enumerate(DEMO_SAMPLE_QUESTIONS.items())
    ]
    base = [*sample, *DEMO_EVAL_CASES]
    return [{**base[i % len(base)], "id": f"case-{i}"} for i in range(CASES)]


def prepare() -> tuple[Any, Any]:
    from django_tenants.utils import schema_context

    from contextplatform.demo.defaults import DEMO_ADDED_SOURCES, SUPPORT_ROUTE_CORE
    from contextplatform.evals.cases import parse_cases
    from contextplatform.evals.services import replace_cases
    from contextplatform.routes.models import Route
    from contextplatform.routes.services import create_route, prepare_route

    tenant = demo_tenant("evals")
    with schema_context(DEMO_TENANT):
        ensure_demo_documents("evals")
        Route.objects.filter(name=ROUTE).delete()
        written = copy.deepcopy(SUPPORT_ROUTE_CORE)
        written["name"] = ROUTE
        memories = next(s for s in DEMO_ADDED_SOURCES if s["type"] == "memory")
        written["context"]["sources"].append(copy.deepcopy(memories))
        prepared = prepare_route(written)
        route = create_route(spec=prepared.spec, layer=prepared.layer, recipe=prepared.recipe)
        replace_cases(route=route, cases=parse_cases({"cases": bench_cases()}))
    return tenant, route


def one_run(route: Any) -> tuple[float, float]:
    """An evaluation run as the task runs it: its wall time (s) and hit rate."""
    from contextplatform.evals.models import EvalRun
    from contextplatform.evals.runner import execute
    from contextplatform.evals.services import new_run_id

    run = EvalRun.objects.create(id=new_run_id(), route=route, route_version=route.version)
    begun = time.perf_counter()
    done = execute(run)
    seconds = time.perf_counter() - begun
    assert done.status == EvalRun.DONE, done.error
    return seconds, float(done.metrics["hit_rate"])


def live_resolve(tenant: Any) -> float:
    from contextplatform.resolve.use_cases import ResolveCall, resolve_context

    body = {"model": "m", "messages": [{"role": "user", "content": "Can I get a refund?"}]}
    begun = time.perf_counter()
    resolve_context(
        ResolveCall(tenant=tenant, route=ROUTE, request_body=body, user="u_123", store_memory=False)
    )
    return (time.perf_counter() - begun) * 1000


def live_samples(tenant: Any, sizes: Sizes) -> list[float]:
    from django_tenants.utils import schema_context

    with schema_context(DEMO_TENANT):
        for _ in range(sizes.warmup):
            live_resolve(tenant)
        return [live_resolve(tenant) for _ in range(sizes.rounds)]


def run_evals(quick: bool) -> EvalsResults:
    from django.db import connections
    from django_tenants.utils import schema_context

    from contextplatform.routes.models import Route

    sizes = QUICK_SIZES if quick else FULL_SIZES
    results = EvalsResults(
        date=utc_now(), quick=quick, sizes=sizes, runs=QUICK_RUNS if quick else FULL_RUNS
    )
    started = time.perf_counter()
    tenant, route = prepare()
    try:
        log(f"evals: {results.runs} evaluation runs of {CASES} cases …")
        with schema_context(DEMO_TENANT):
            for _ in range(results.runs):
                seconds, hit_rate = one_run(route)
                results.run_s.append(seconds)
                results.hit_rates.append(hit_rate)
        log(f"evals: {sizes.rounds} live resolves alone, then during evaluation runs …")
        results.live_alone_ms = live_samples(tenant, sizes)
        stop = threading.Event()

        def evaluate() -> None:
            try:
                with schema_context(DEMO_TENANT):
                    while not stop.is_set():
                        one_run(route)
                        results.runs_during += 1
            finally:
                connections.close_all()

        worker = threading.Thread(target=evaluate, name="bench-evals")
        worker.start()
        try:
            results.live_during_ms = live_samples(tenant, sizes)
        finally:
            stop.set()
            worker.join()
    finally:
        with schema_context(DEMO_TENANT):
            Route.objects.filter(name=ROUTE).delete()
    results.load_average = load_average()
    results.runtime_s = time.perf_counter() - started
    return results


def evals_checks(results: EvalsResults) -> list[Check]:
    run = summarize(results.run_s)
    alone, during = results.alone(), results.during()
    return [
        Check(
            f"an evaluation run of {CASES} cases (demo route copy)",
            "reported (no target); every run finished",
            f"p50 {run.p50:.2f} s, {run.p50 * 1000 / CASES:.1f} ms per case; "
            f"hit rate {min(results.hit_rates):.2f}",
            len(results.run_s) == results.runs,
        ),
        Check(
            "live resolve p50 during evaluation runs vs alone",
            "reported (no target)",
            f"{during.p50:.2f} ms during vs {alone.p50:.2f} ms alone "
            f"({results.runs_during} runs overlapped)",
            results.runs_during > 0,
        ),
    ]


def evals_section(results: EvalsResults, commit: str) -> str:
    lines = [
        START,
        "",
        "## 14. Evaluation runs: their cost, and the live path meanwhile (in process)",
        "",
        f"Measured {results.date} (commit {commit}) in {results.runtime_s:.0f} s by "
        "`scripts/bench_evals.py`; `BENCH_ONLY=evals make bench` refreshes this section alone. "
        f"Load average at the end of the run: {results.load_average}." + quick_note(results.quick),
        "",
        table(["check", "target", "measured", "result"], check_rows(evals_checks(results))),
        "",
        f"A copy of the demo's `support` route with its memories source and {CASES} evaluation "
        "cases (the demo's sample questions and its own cases, repeated); each run resolves every "
        "case in the pipeline's `evaluate` mode (nothing written, no model asked) and stores its "
        "metrics, as the Celery task does. The live path: the resolve use case on the same route "
        "(replay record written, memory write opted out), alone and while evaluation runs go on "
        "in another thread of the same process (the embedded default runs them inline in the "
        "server process; with a Celery worker they run in the worker's).",
        "",
        "### Time",
        "",
        summary_table(
            [
                ("evaluation run (s)", summarize(results.run_s)),
                ("per case (ms)", summarize(results.per_case_ms())),
                ("live resolve, alone (ms)", results.alone()),
                ("live resolve, during evaluation runs (ms)", results.during()),
            ]
        ),
        "",
        END,
    ]
    return "\n".join(lines)


def write_evals(results: EvalsResults, docs_dir: Path, commit: str) -> list[Path]:
    return [write_section(docs_dir, evals_section(results, commit), START, END)]


def print_evals(results: EvalsResults) -> None:
    print()
    print("Evaluation runs (demo route copy, in process)")
    print_checks(evals_checks(results))
