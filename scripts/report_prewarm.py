"""Section 10 of docs/benchmarks.md (pre-warm), between two HTML comments so that
``BENCH_ONLY=prewarm`` can replace it in the page of an earlier run."""

from __future__ import annotations

from pathlib import Path

from scripts import report
from scripts.bench_prewarm import (
    DEMO_TENANT,
    PREWARMED,
    SESSION,
    SETTINGS,
    PrewarmResults,
)
from scripts.bench_stats import SUMMARY_HEADER, summarize

START = "<!-- prewarm:start -->"
END = "<!-- prewarm:end -->"


def prewarm_checks(results: PrewarmResults) -> list[report.Check]:
    cold, warm = results.summary("cold"), results.summary("prewarmed")
    saved = summarize(results.saved())
    return [
        report.Check(
            "pre-warm's saving on the demo route's resolve p50 (cold - pre-warmed, paired)",
            "reported (no target); every pre-warmed resolve served profile and history from it",
            f"{saved.p50:.2f} ms (p50 cold {cold.p50:.2f} - pre-warmed {warm.p50:.2f} = "
            f"{cold.p50 - warm.p50:.2f} ms); {results.mismatches} resolves served otherwise",
            results.mismatches == 0 and saved.count > 0,
        )
    ]


def prewarm_section(results: PrewarmResults, commit: str) -> str:
    sizes = results.sizes
    rows = [
        [label, *results.summary(setting).row()]
        for setting, label in (("cold", "cold"), ("prewarmed", "pre-warmed"))
    ]
    rows.append(["saved (cold - pre-warmed, same round)", *summarize(results.saved()).row()])
    rows.append(["the pre-warm call itself", *summarize(results.prewarm_ms).row()])
    source_rows = [
        [
            name,
            *(f"{summarize(per[setting]).p50:.2f}" for setting in SETTINGS),
            "yes" if name in PREWARMED else "no",
        ]
        for name, per in results.source_ms.items()
    ]
    return "\n\n".join(
        [
            START,
            "## 10. Pre-warm: what it saves on the demo route's resolve (in process)",
            f"Measured {results.date} (commit {commit}) in {results.runtime_s:.0f} s by "
            "`scripts/bench_prewarm.py`; `BENCH_ONLY=prewarm make bench` refreshes this section "
            f"alone. Load average at the end of the run: {results.load_average}."
            + report.quick_note(results.quick),
            report.table(
                ["check", "target", "measured", "result"],
                report.check_rows(prewarm_checks(results)),
            ),
            f"The demo tenant's `support` route as `bootstrap_demo` writes it "
            f"({', '.join(results.route_sources)}), resolved in process by "
            "`pipeline.resolve()` with the demo question, recorded, for user `u_123` in the "
            f"bench's session `{SESSION}` (a copy of the demo session's 4 messages), "
            f"{sizes.rounds} measured rounds after {sizes.warmup} warm-up rounds. Every round "
            "runs both settings in a fresh random order (seeded): **cold**, the session's "
            "pre-warm invalidated first, so the resolve fetches every source and pays the "
            "pre-warm lookup that finds nothing usable; **pre-warmed**, the session pre-warmed "
            "just before (`prewarm_session`, what `POST /api/v1/sessions/{session}/prewarm` "
            "runs; timed apart, below), so profile and history are served from the pre-warm. "
            f"Cache: {results.cache}. The documents' retrieval is a RAG cache hit in both (the "
            "same question every time), and the query's embedding is remembered by the "
            f"embedder. What the bench adds to tenant `{DEMO_TENANT}` (its session and replay "
            "records) is removed afterwards.",
            "### Resolve wall time (ms)",
            report.table(["ms", *SUMMARY_HEADER], rows),
            "### Each source's fetch (ms, p50)",
            "A source's own time inside the parallel fetch (the outcome's `ms`); the database "
            "reads of the sources run one after another on the request's thread "
            "(`sync_to_async`), so what the pre-warmed ones no longer read comes off the fetch "
            "stage whole.",
            report.table(["source", "cold", "pre-warmed", "served from the pre-warm"], source_rows),
            END,
        ]
    )


def write_prewarm(results: PrewarmResults, docs_dir: Path, commit: str) -> list[Path]:
    return [report.write_section(docs_dir, prewarm_section(results, commit), START, END)]


def print_prewarm(results: PrewarmResults) -> None:
    print()
    print("Pre-warm (demo route, in process)")
    for setting in SETTINGS:
        summary = results.summary(setting)
        print(f"  {setting:<12} p50 {summary.p50:8.2f}  p99 {summary.p99:8.2f} ms")
    report.print_checks(prewarm_checks(results))
