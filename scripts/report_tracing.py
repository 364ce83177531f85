"""The tracing section of docs/benchmarks.md (a resolve with OpenTelemetry export on and off, in
the same run), between two HTML comments so that ``BENCH_ONLY=tracing`` can replace it in the
page of an earlier run."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scripts import report
from scripts.bench_stats import SUMMARY_HEADER
from scripts.bench_tracing import ROUTE, SOURCE_SLEEPS_MS, TracingResults

START = "<!-- tracing:start -->"
END = "<!-- tracing:end -->"


def paired(results: TracingResults, measure: str) -> tuple[float, float]:
    """Mean of on minus off within each round (they ran next to each other), and the half-width
    of its 95 % confidence interval."""
    samples = getattr(results, measure)
    data = np.asarray(samples["on"]) - np.asarray(samples["off"])
    if len(data) < 2:
        return float("nan"), float("nan")
    return float(data.mean()), float(1.96 * data.std(ddof=1) / np.sqrt(len(data)))


def tracing_section(results: TracingResults, commit: str) -> str:
    rounds = len(results.wall["on"])
    wall_mean, wall_ci = paired(results, "wall")
    cpu_mean, cpu_ci = paired(results, "cpu")
    rows = [
        [f"{setting} ({measure})", *results.summary(setting, measure).row()]
        for measure in ("wall", "cpu")
        for setting in ("off", "on")
    ]
    parts = [
        START,
        "## Tracing: a resolve with OpenTelemetry export on and off",
        f"Measured {results.date} (commit {commit}) in {results.runtime_s:.0f} s by "
        "`scripts/bench_tracing.py`; `BENCH_ONLY=tracing make bench` refreshes this section "
        f"alone. Load average after the run: {results.load_average}."
        + report.quick_note(results.quick),
        f"The bench route `{ROUTE}` ({len(SOURCE_SLEEPS_MS)} bench sources of "
        f"{SOURCE_SLEEPS_MS[0]:g} ms each) resolved in process and recorded, {rounds} rounds "
        f"after {results.sizes.warmup} warm-up rounds; each round resolves once with tracing "
        "**on** (the SDK provider exporting over OTLP/HTTP to a receiver on loopback in the "
        "bench process: a `resolve`, a `source.fetch` per source and a `compress` span per "
        "resolve) and once **off** (no provider, as when `OTEL_EXPORTER_OTLP_ENDPOINT` is "
        "unset), in a fresh seeded random order. *wall* is the resolve's own time (the export "
        "runs on the batch processor's thread, which it does not wait on); *cpu* is the "
        "process's CPU from the resolve's start until its spans were flushed to the receiver "
        f"(every thread: the export's included). Each traced resolve's spans are flushed at once, "
        "one export request each where a server's batch carries up to 512 spans a second, and "
        "the receiver's own reading runs in the same process: the CPU figure is an upper bound. "
        f"{results.exports} export requests, {results.exported_bytes / 1024:.0f} KiB in all.",
        report.table(["ms", *SUMMARY_HEADER], rows),
        f"On minus off, paired by round: wall {wall_mean:+.3f} ms (95 % CI ±{wall_ci:.3f}), "
        f"CPU {cpu_mean:+.3f} ms (±{cpu_ci:.3f}).",
        END,
    ]
    return "\n\n".join(parts)


def write_tracing(results: TracingResults, docs_dir: Path, commit: str) -> list[Path]:
    return [report.write_section(docs_dir, tracing_section(results, commit), START, END)]


def print_tracing(results: TracingResults) -> None:
    wall_mean, wall_ci = paired(results, "wall")
    cpu_mean, cpu_ci = paired(results, "cpu")
    print()
    print("Tracing (OTLP/HTTP export to loopback) on vs off, resolve p50 ms:")
    for setting in ("off", "on"):
        print(
            f"  {setting:<4} wall p50 {results.summary(setting).p50:7.3f}  "
            f"cpu p50 {results.summary(setting, 'cpu').p50:7.3f}"
        )
    print(
        f"  on - off: wall {wall_mean:+.3f} ±{wall_ci:.3f} ms, cpu {cpu_mean:+.3f} ±{cpu_ci:.3f} ms"
    )
