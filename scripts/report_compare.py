"""Before and after (``BENCH_BEFORE=<commit>``) in docs/benchmarks.md: a part of its own right
after the http_path or gateway section, between HTML comments of its own, so that a run of the
section without ``BENCH_BEFORE`` leaves it, and a compare run leaves the section, as they were."""

from __future__ import annotations

import math
from pathlib import Path

from scripts import report
from scripts.bench_compare import (
    BEFORE_ENV,
    CODES,
    LABELS,
    NO_SLOWER,
    ROUNDS,
    CompareResults,
)
from scripts.bench_wrk import CONNECTIONS, WRK_THREADS
from scripts.report_wrk import ms, rate

TITLES = {
    "http_path": "HTTP path under wrk",
    "gateway": "the gateway's requests/s",
}


def markers(section: str) -> tuple[str, str]:
    return f"<!-- {section}_compare:start -->", f"<!-- {section}_compare:end -->"


def ratio_text(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3f} x"


def compare_checks(results: CompareResults) -> list[report.Check]:
    checks = []
    for measurement in results.measurements:
        ratio = results.ratio(measurement)
        errors = sum(run.errors for run in results.runs if run.measurement == measurement)
        rounds = results.round_ratios(measurement)
        checks.append(
            report.Check(
                f"{LABELS[measurement]}: after beside before",
                f"≥ {NO_SLOWER:.2f} x before (medians of {ROUNDS} paired rounds)",
                f"{ratio_text(ratio)} (rounds {' / '.join(f'{r:.2f}' for r in rounds) or 'n/a'})"
                f", errors {errors}",
                not math.isnan(ratio) and ratio >= NO_SLOWER and errors == 0,
            )
        )
    return checks


def median_rows(results: CompareResults) -> list[list[str]]:
    rows = []
    for measurement, check in zip(results.measurements, compare_checks(results), strict=True):
        rounds = results.round_ratios(measurement)
        rows.append(
            [
                f"{LABELS[measurement]}, requests/s",
                rate(results.median_rate(measurement, "before")),
                rate(results.median_rate(measurement, "after")),
                ratio_text(results.ratio(measurement)),
                " / ".join(f"{r:.2f}" for r in rounds) or "n/a",
                f"**{check.verdict}**",
            ]
        )
    if len(results.overhead_p50_ms) == len(CODES):
        before, after = (results.overhead_p50_ms[code] for code in CODES)
        rows.append(
            [
                f"gateway overhead over the direct call, p50 ms ({results.overhead_calls} "
                "sequential calls each, lower is better)",
                ms(before),
                ms(after),
                ratio_text(after / before) if before > 0 else "n/a",
                "-",
                "reported",
            ]
        )
    return rows


def round_rows(results: CompareResults) -> list[list[str]]:
    return [
        [
            str(run.round + 1),
            LABELS[run.measurement],
            run.code,
            rate(run.requests_per_s),
            ms(run.p50_ms),
            ms(run.p99_ms),
            str(run.errors),
            f"{run.server_cpu_ms_per_request:.2f}",
            f"{run.load_average:.2f}",
        ]
        for run in results.runs
    ]


def load_text(results: CompareResults) -> str:
    if results.section == "http_path":
        return (
            f"`wrk -t{WRK_THREADS} -c{CONNECTIONS} -d{results.seconds:g}s` after "
            f"{results.warmup_s:g} s of the same load (discarded)"
        )
    return f"wrk at 32 clients for {results.seconds:g} s, as the gateway section loads it"


def section(results: CompareResults, commit: str) -> str:
    start, end = markers(results.section)
    parts = [
        start,
        f"### Before and after: {TITLES[results.section]}, `{results.before}` beside `{commit}`",
        f"Measured {results.date} in {results.runtime_s:.0f} s (`scripts/bench_compare.py`, "
        f"`{BEFORE_ENV}={results.before} BENCH_ONLY={results.section} make bench`). The code of "
        f"`{results.before}` extracted with `git archive` and served from its own folder (its own "
        "`manage.py` settings, the same virtualenv) beside the working tree's, both on the "
        "bench's database (the same migrations; the older code's `showmigrations` found all of "
        f"its own applied), both up at once: `{results.server}`. {ROUNDS} paired rounds, each "
        "loading one code then the other, the first of a round alternating between rounds; "
        f"{load_text(results)}. A figure is the median of its rounds. Load average "
        f"{results.load_average_start} at start, {results.load_average_end} at the end: the "
        "machine is shared, so only the ratio within this run means anything."
        + report.quick_note(results.quick),
        report.table(
            [
                "measurement",
                f"before (`{results.before}`)",
                f"after (`{commit}`)",
                "ratio (after / before)",
                "rounds' ratios",
                f"ratio ≥ {NO_SLOWER:.2f}, no errors",
            ],
            median_rows(results),
        ),
        "Round by round:",
        report.table(
            [
                "round",
                "measurement",
                "code",
                "requests/s",
                "p50 ms",
                "p99 ms",
                "errors",
                "server CPU ms / request",
                "load avg (1 min)",
            ],
            round_rows(results),
        ),
    ]
    parts += [f"- {problem}" for problem in results.problems]
    parts.append(end)
    return "\n\n".join(part for part in parts if part)


def write_compare(results: CompareResults, docs_dir: Path, commit: str) -> list[Path]:
    """The comparison right after its section's end marker (in place of an earlier one)."""
    start, end = markers(results.section)
    after = f"<!-- {results.section}:end -->"
    return [report.write_section(docs_dir, section(results, commit), start, end, after)]


def print_compare(results: CompareResults) -> None:
    print()
    print(f"{results.section}: {results.before} (before) beside {results.after} (after)")
    for run in results.runs:
        print(
            f"  round {run.round + 1} {run.measurement:<9} {run.code:<7} "
            f"{rate(run.requests_per_s):>8}/s  p99 {ms(run.p99_ms):>7} ms  errors {run.errors}"
        )
    for label, before, after, ratio, rounds, verdict in median_rows(results):
        print(f"  median {label}: before {before}, after {after}, {ratio} ({rounds}) {verdict}")
    report.print_checks(compare_checks(results))
    for problem in results.problems:
        print(f"  problem: {problem}")
