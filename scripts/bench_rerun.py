"""Section 15: what a re-run of a recorded request costs (in process).

A copy of the demo's ``support`` route (guardrails, profile, history, documents, u_123's memories)
whose requests are captured (the replay record keeps the request, as a rerun needs). Its records:
live resolves of the demo's sample questions, one after the other. Measured in the same run, in
random order: the live resolve of one recorded request (the resolve use case, replay record
written, no memory write), its re-run against the route as it is (``reruns.rerun_and_diff``, what
``POST /api/v1/replay/{id}/rerun`` runs) and its re-run against a draft of the route without its
RAG source (the draft validated as the API validates it, then the rerun). Then the route page's
"try this draft" (``reruns.try_draft``) over the route's last 50 and last 200 captured records,
against that draft. The bench's route and every record it wrote are removed afterwards.
"""

from __future__ import annotations

import copy
import random
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

ROUTE = "bench-rerun"
RAG_SOURCE = "docs"
USER = "u_123"
RECORDS = 200
TRIAL_LIMITS = (50, 200)
START, END = "<!-- rerun:start -->", "<!-- rerun:end -->"
FULL_SIZES = Sizes(rounds=200, warmup=10)
QUICK_SIZES = Sizes(rounds=30, warmup=3)
FULL_TRIALS, QUICK_TRIALS = 3, 1
KINDS = ("live", "rerun", "draft")


@dataclass
class TrialTimes:
    limit: int
    wall_s: list[float] = field(default_factory=list)
    records: int = 0
    errors: int = 0
    tokens_saved: int = 0
    items_changed: int = 0

    def per_record_ms(self) -> list[float]:
        return [seconds * 1000 / self.records for seconds in self.wall_s] if self.records else []


@dataclass
class RerunResults:
    date: str
    quick: bool
    sizes: Sizes
    trials_each: int
    samples_ms: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    # Of each draft rerun: the draft's validation alone (``routes.drafts.draft_spec``).
    draft_spec_ms: list[float] = field(default_factory=list)
    # Reruns whose diff against the record was empty (as-is) / that dropped the RAG items (draft).
    rerun_unchanged: int = 0
    draft_dropped_docs: int = 0
    recorded_docs_kept: int = 0
    trials: list[TrialTimes] = field(default_factory=list)
    records_written: int = 0
    records_removed: int = 0
    load_average: str = ""
    runtime_s: float = 0.0

    def summary(self, kind: str) -> Summary:
        return summarize(self.samples_ms[kind])


def draft_context(route_context: dict[str, Any]) -> dict[str, Any]:
    """The route's own ``context`` without its RAG source."""
    drafted = copy.deepcopy(route_context)
    drafted["sources"] = [s for s in drafted["sources"] if s["name"] != RAG_SOURCE]
    return drafted


def prepare() -> tuple[Any, Any, dict[str, Any]]:
    """The demo tenant (as one that captures content), the bench's route and its draft's
    ``context``."""
    from django_tenants.utils import schema_context

    from contextplatform.demo.defaults import DEMO_ADDED_SOURCES, SUPPORT_ROUTE_CORE
    from contextplatform.replay.models import ReplayRecord
    from contextplatform.replay.writer import REPLAY_WRITER
    from contextplatform.routes.models import Route
    from contextplatform.routes.services import create_route, prepare_route

    tenant = copy.copy(demo_tenant("rerun"))
    # The records must keep their requests; the tenant row itself is left as it is.
    tenant.capture_content = True
    with schema_context(DEMO_TENANT):
        ensure_demo_documents("rerun")
        Route.objects.filter(name=ROUTE).delete()
        REPLAY_WRITER.flush()
        ReplayRecord.objects.filter(route=ROUTE).delete()
        written = copy.deepcopy(SUPPORT_ROUTE_CORE)
        written["name"] = ROUTE
        memories = next(s for s in DEMO_ADDED_SOURCES if s["type"] == "memory")
        written["context"]["sources"].append(copy.deepcopy(memories))
        prepared = prepare_route(written)
        route = create_route(spec=prepared.spec, layer=prepared.layer, recipe=prepared.recipe)
    return tenant, route, draft_context(written["context"])


def request_body(question: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": question}]}


def live_resolve(tenant: Any, body: dict[str, Any]) -> str:
    from contextplatform.resolve.use_cases import ResolveCall, resolve_context

    resolution = resolve_context(
        ResolveCall(tenant=tenant, route=ROUTE, request_body=body, user=USER, store_memory=False)
    )
    return resolution.id


def record_requests(tenant: Any) -> Any:
    """``RECORDS`` captured records of the demo's sample questions, in turn; the latest record of
    the demo's own question whose sources all answered (the process' first resolves may time out
    while it warms up), read back as a rerun reads it."""
    from contextplatform.demo.defaults import DEMO_QUESTION, DEMO_SAMPLE_QUESTIONS
    from contextplatform.replay.models import ReplayRecord
    from contextplatform.replay.writer import flush_current_tenant
    from contextplatform.resolve.reruns import FAILED

    questions = list(DEMO_SAMPLE_QUESTIONS)
    asked = []
    for index in range(RECORDS):
        question = questions[index % len(questions)]
        record_id = live_resolve(tenant, request_body(question))
        if question == DEMO_QUESTION:
            asked.append(record_id)
    flush_current_tenant()
    for record in ReplayRecord.objects.filter(pk__in=asked).order_by("-created_at"):
        if not any(source.get("status") in FAILED for source in record.sources or []):
            return record
    raise RuntimeError(f"rerun: no record of {DEMO_QUESTION!r} whose sources all answered")


def docs_kept(side: dict[str, Any]) -> int:
    return sum(1 for item in side["items"] if item["source"] == RAG_SOURCE and item["kept"])


def measure_interleaved(
    tenant: Any, route: Any, record: Any, drafted: dict[str, Any], results: RerunResults
) -> None:
    """The live resolve of ``record``'s request, its rerun as is and against the draft: each
    ``rounds`` times after ``warmup``, the three kinds shuffled together."""
    from contextplatform.replay import rerun_diff
    from contextplatform.resolve.reruns import rerun_and_diff
    from contextplatform.routes.drafts import draft_spec

    def run(kind: str) -> None:
        if kind == "live":
            live_resolve(tenant, record.request_body)
        elif kind == "rerun":
            result = rerun_and_diff(tenant=tenant, record=record)
            results.rerun_unchanged += rerun_diff.is_empty(result["diff"])
        else:
            begun = time.perf_counter()
            spec = draft_spec(route, drafted)
            validations.append((time.perf_counter() - begun) * 1000)
            result = rerun_and_diff(tenant=tenant, record=record, spec=spec)
            results.draft_dropped_docs += docs_kept(result["rerun"]) == 0
            results.recorded_docs_kept = docs_kept(result["recorded"])

    validations: list[float] = []
    sizes = results.sizes
    for kind in KINDS:
        for _ in range(sizes.warmup):
            run(kind)
    results.rerun_unchanged = results.draft_dropped_docs = 0
    validations.clear()
    order = [kind for kind in KINDS for _ in range(sizes.rounds)]
    random.Random(15).shuffle(order)
    for kind in order:
        begun = time.perf_counter()
        run(kind)
        results.samples_ms[kind].append((time.perf_counter() - begun) * 1000)
    results.draft_spec_ms = validations


def measure_trials(tenant: Any, route: Any, drafted: dict[str, Any], results: RerunResults) -> None:
    from contextplatform.resolve.reruns import try_draft
    from contextplatform.routes.drafts import draft_spec

    spec = draft_spec(route, drafted)  # once, as the route page does before its trial
    for limit in TRIAL_LIMITS:
        times = TrialTimes(limit=limit)
        for _ in range(results.trials_each):
            begun = time.perf_counter()
            trial = try_draft(tenant=tenant, route=ROUTE, spec=spec, limit=limit)
            times.wall_s.append(time.perf_counter() - begun)
            times.records, times.errors = trial.records, len(trial.errors)
            times.tokens_saved, times.items_changed = trial.tokens_saved, trial.items_changed
        results.trials.append(times)


def remove_bench_data() -> int:
    from django_tenants.utils import schema_context

    from contextplatform.replay.models import ReplayRecord
    from contextplatform.replay.writer import REPLAY_WRITER
    from contextplatform.routes.models import Route

    REPLAY_WRITER.flush()
    with schema_context(DEMO_TENANT):
        removed, _ = ReplayRecord.objects.filter(route=ROUTE).delete()
        Route.objects.filter(name=ROUTE).delete()
    return removed


def run_rerun(quick: bool) -> RerunResults:
    from django_tenants.utils import schema_context

    sizes = QUICK_SIZES if quick else FULL_SIZES
    results = RerunResults(
        date=utc_now(),
        quick=quick,
        sizes=sizes,
        trials_each=QUICK_TRIALS if quick else FULL_TRIALS,
    )
    started = time.perf_counter()
    tenant, route, drafted = prepare()
    try:
        with schema_context(DEMO_TENANT):
            log(f"rerun: {RECORDS} captured records of the demo's questions …")
            record = record_requests(tenant)
            log(f"rerun: try_draft over the last {TRIAL_LIMITS} records …")
            measure_trials(tenant, route, drafted, results)
            log(f"rerun: {sizes.rounds} live resolves, reruns and draft reruns, shuffled …")
            measure_interleaved(tenant, route, record, drafted, results)
    finally:
        results.records_removed = remove_bench_data()
    results.records_written = RECORDS + sizes.warmup + sizes.rounds  # the live resolves'
    results.load_average = load_average()
    results.runtime_s = time.perf_counter() - started
    return results


def rerun_checks(results: RerunResults) -> list[Check]:
    live, again, draft = (results.summary(kind) for kind in KINDS)
    rounds = results.sizes.rounds
    checks = [
        Check(
            "re-run of a recorded request, route as is, beside its live resolve",
            "reported (no target); every round ran",
            f"p50 {again.p50:.2f} ms (p95 {again.p95:.2f}) vs live {live.p50:.2f} ms "
            f"(p95 {live.p95:.2f}); {results.rerun_unchanged}/{rounds} diffs empty",
            again.count == live.count == rounds,
        ),
        Check(
            f"re-run against a draft without the RAG source ({RAG_SOURCE})",
            "reported (no target); its items gone from every rerun",
            f"p50 {draft.p50:.2f} ms (p95 {draft.p95:.2f}); {RAG_SOURCE} items kept: "
            f"{results.recorded_docs_kept} recorded, 0 in "
            f"{results.draft_dropped_docs}/{rounds} reruns",
            draft.count == rounds and results.draft_dropped_docs == rounds,
        ),
    ]
    for trial in results.trials:
        wall = summarize(trial.wall_s)
        checks.append(
            Check(
                f"try_draft over the last {trial.limit} captured records",
                "reported (no target); every record ran",
                f"{wall.p50:.2f} s, {wall.p50 * 1000 / max(trial.records, 1):.1f} ms per record "
                f"({trial.records} records, {trial.tokens_saved} tokens saved)",
                trial.records == trial.limit and trial.errors == 0,
            )
        )
    checks.append(
        Check(
            "the bench's records and route removed; reruns wrote none",
            "removed = the live resolves' records",
            f"{results.records_removed} removed of {results.records_written} live resolves",
            results.records_removed == results.records_written,
        )
    )
    return checks


def rerun_section(results: RerunResults, commit: str) -> str:
    trial_rows: list[tuple[str, Summary]] = []
    for trial in results.trials:
        trial_rows += [
            (f"try_draft, last {trial.limit} records (s)", summarize(trial.wall_s)),
            (f"try_draft, last {trial.limit}: per record (ms)", summarize(trial.per_record_ms())),
        ]
    lines = [
        START,
        "",
        "## 15. Re-runs: a recorded request resolved again, and a draft tried on the latest "
        "records (in process)",
        "",
        f"Measured {results.date} (commit {commit}) in {results.runtime_s:.0f} s by "
        "`scripts/bench_rerun.py`; `BENCH_ONLY=rerun make bench` refreshes this section alone. "
        f"Load average at the end of the run: {results.load_average}." + quick_note(results.quick),
        "",
        table(["check", "target", "measured", "result"], check_rows(rerun_checks(results))),
        "",
        "A copy of the demo's `support` route with its memories source, its requests captured; "
        f"{RECORDS} live resolves of the demo's sample questions (user `{USER}`, no session) "
        "give it its records. The latest of them for the demo's own question whose sources all "
        "answered is then resolved live "
        "(the resolve use case, replay record written, memory write opted out), re-run against "
        "the route as it is (`reruns.rerun_and_diff`, what `POST /api/v1/replay/{id}/rerun` "
        "runs: the rerun, the record's side and the diff) and re-run against a draft of the "
        f"route's `context` without its RAG source `{RAG_SOURCE}` (the draft validated as the "
        "API validates it, in the timing, then the rerun): "
        f"{results.sizes.rounds} rounds of each after {results.sizes.warmup} unmeasured ones, the "
        "three kinds shuffled together in one run. A rerun reads no cache, where the live "
        "resolve of the same question reads the RAG result cache: the rerun measures the "
        'sources themselves. `try_draft` (the route page\'s "try this draft") reruns the '
        "route's last captured records one after the other against the same draft "
        f"({results.trials_each} trial(s) of each size); its draft validated once, outside "
        "the timing.",
        "",
        "### Time",
        "",
        summary_table(
            [
                ("live resolve (ms)", results.summary("live")),
                ("re-run, route as is (ms)", results.summary("rerun")),
                (f"re-run, draft without {RAG_SOURCE} (ms)", results.summary("draft")),
                ("of which the draft's validation (ms)", summarize(results.draft_spec_ms)),
                *trial_rows,
            ]
        ),
        "",
        END,
    ]
    return "\n".join(lines)


def write_rerun(results: RerunResults, docs_dir: Path, commit: str) -> list[Path]:
    return [write_section(docs_dir, rerun_section(results, commit), START, END)]


def print_rerun(results: RerunResults) -> None:
    print()
    print("Re-runs (demo route copy, in process)")
    print_checks(rerun_checks(results))
