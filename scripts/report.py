"""Plots (PNG, Agg) and docs/benchmarks.md from the measured results."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import matplotlib

# Every report module imports this one: the backend is Agg (files only) before any of them draws.
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from scripts.bench_http import LoadResult
from scripts.bench_resolver import (
    OVERHEAD_SLEEPS_MS,
    PARALLEL_SLEEP_MS,
    TARGET_P50_MS,
    TARGET_P99_MS,
    OverheadResult,
    ParallelResult,
)
from scripts.bench_setup import SOURCE_COUNT, TOTAL_ITEMS
from scripts.bench_stats import SUMMARY_HEADER, Summary, summarize


@dataclass(frozen=True)
class Check:
    name: str
    target: str
    measured: str
    passed: bool

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "FAIL"


@dataclass
class HttpRun:
    result: LoadResult
    config: dict[str, str]


@dataclass
class BenchResults:
    environment: dict[str, str]
    overhead: OverheadResult
    parallel: ParallelResult
    parallel_target_ms: float
    estimation: dict[str, Summary]
    http: list[HttpRun]
    checks: list[Check]
    settings: dict[str, str]
    runtime_s: float = 0.0


# Plots -------------------------------------------------------------------------------------------


def save_figure(fig: plt.Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def image_path(docs_dir: Path, name: str) -> Path:
    """Where a section's plot goes (docs/bench/), the folder made if need be."""
    images = docs_dir / "bench"
    images.mkdir(parents=True, exist_ok=True)
    return images / name


def label_axes(
    ax: plt.Axes,
    xlabel: str,
    ylabel: str,
    title: str,
    loc: str = "lower right",
    fontsize: int | None = None,
) -> None:
    """A plot's labels, title, legend and light grid, alike in every figure of the page."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if fontsize is None:
        ax.legend(loc=loc)
    else:
        ax.legend(loc=loc, fontsize=fontsize)
    ax.grid(alpha=0.3)


def ecdf(ax: plt.Axes, samples: Sequence[float], label: str) -> None:
    data = np.sort(np.asarray(samples, dtype=float))
    ax.step(data, np.arange(1, len(data) + 1) / len(data), where="post", label=label)


def plot_overhead(overhead: OverheadResult, path: Path) -> None:
    p50, p99 = TARGET_P50_MS, TARGET_P99_MS
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ecdf(ax, [s.overhead_ms for s in overhead.recorded], "resolve() with replay write")
    ecdf(ax, [s.overhead_ms for s in overhead.unrecorded], "resolve(record=False)")
    ax.axvline(p50, color="tab:green", linestyle="--", label=f"p50 target {p50:g} ms")
    ax.axvline(p99, color="tab:red", linestyle="--", label=f"p99 target {p99:g} ms")
    ax.axhline(0.5, color="grey", linewidth=0.5)
    ax.axhline(0.99, color="grey", linewidth=0.5)
    worst = max(s.overhead_ms for s in overhead.recorded)
    ax.set_xlim(0, max(p99 * 1.25, min(worst, p99 * 3)))
    label_axes(
        ax,
        "overhead over the slowest source (ms)",
        "fraction of requests",
        f"Resolver overhead, {SOURCE_COUNT} sources, {TOTAL_ITEMS} candidate items",
    )
    save_figure(fig, path)


def plot_parallelism(parallel: ParallelResult, target_ms: float, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 3.5))
    data = [[s.wall_ms for s in parallel.sequential], [s.wall_ms for s in parallel.parallel]]
    ax.boxplot(data, vert=False, widths=0.5)
    ax.set_yticks([1, 2], ["sequential", "parallel (resolve)"])
    ax.axvline(PARALLEL_SLEEP_MS, color="grey", linestyle=":", label="one source (50 ms)")
    ax.axvline(target_ms, color="tab:red", linestyle="--", label=f"target {target_ms:.1f} ms")
    ax.set_xlabel("resolve() wall time (ms)")
    ax.set_title(f"{SOURCE_COUNT} sources of {PARALLEL_SLEEP_MS:g} ms each")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3, axis="x")
    save_figure(fig, path)


def plot_http(runs: list[HttpRun], path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 1]})
    for run in runs:
        ecdf(left, run.result.latencies_ms, f"workers={run.result.workers}")
    left.set_xlim(left=0)
    label_axes(
        left,
        "latency (ms)",
        "fraction of requests",
        f"POST /api/v1/resolve, {runs[0].result.clients} concurrent clients",
    )
    labels = [f"workers={run.result.workers}" for run in runs]
    rates = [run.result.requests_per_s for run in runs]
    bars = right.bar(labels, rates, color=["tab:blue", "tab:orange"][: len(runs)])
    right.bar_label(bars, fmt="%.0f")
    right.set_ylabel("requests/s")
    right.set_title("throughput")
    save_figure(fig, path)


# Markdown ----------------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def summary_table(rows: Sequence[tuple[str, Summary]]) -> str:
    header = ["ms", *SUMMARY_HEADER]
    return table(header, [[label, *summary.row()] for label, summary in rows])


def header_section(results: BenchResults) -> str:
    env_rows = [[key, value] for key, value in results.environment.items()]
    setting_rows = [[key, value] for key, value in results.settings.items()]
    return "\n\n".join(
        [
            "# Benchmarks",
            "Written by `make bench` (`scripts/bench.py`); every number below comes from the run "
            f"of {results.environment['date']}, which took {results.runtime_s:.0f} s. "
            "Run it again to refresh this page; numbers from another machine will differ.",
            "## Results against the targets",
            "Sections 1-3 (resolver and HTTP); the retrieval targets are checked in section 4, "
            "the compression targets in section 5, the memory figures reported in section 6 and "
            "the observability target checked in section 7, which `BENCH_ONLY=retrieval make "
            "bench`, `BENCH_ONLY=compression make bench`, `BENCH_ONLY=memory make bench` and "
            "`BENCH_ONLY=observability make bench` can refresh alone (each then carries its own "
            "date).",
            table(["check", "target", "measured", "result"], check_rows(results.checks)),
            "## Environment",
            table(["", ""], env_rows),
            "Run sizes:",
            table(["", ""], setting_rows),
        ]
    )


def splice_section(page: str, text: str, start: str, end: str, after: str = "") -> str:
    """Replace the part of ``page`` from marker ``start`` to marker ``end`` by ``text`` (which
    carries the markers); when the page has no such part, put ``text`` right after the marker
    ``after`` (when given and found), else at the end."""
    if start in page and end in page:
        return page[: page.index(start)] + text + page[page.index(end) + len(end) :]
    if after and after in page:
        cut = page.index(after) + len(after)
        return page[:cut] + "\n\n" + text + page[cut:]
    return page.rstrip("\n") + "\n\n" + text + "\n"


def write_section(docs_dir: Path, text: str, start: str, end: str, after: str = "") -> Path:
    """Put ``text`` (a section between markers ``start`` and ``end``) into docs/benchmarks.md,
    in place of that section of an earlier run, or after the marker ``after``, or at the end;
    return the page's path.

    The markers are HTML comments: ``BENCH_ONLY=<section>`` replaces one section in the page of an
    earlier run and leaves the other sections as they were."""
    path = docs_dir / "benchmarks.md"
    page = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    path.write_text(splice_section(page, text, start, end, after), encoding="utf-8")
    return path


def with_figure(parts: Sequence[str], alt: str, plot_name: str, end: str) -> str:
    """A section's text: its non-empty ``parts``, then its figure and end marker."""
    return "\n\n".join(part for part in [*parts, f"![{alt}](bench/{plot_name})", end] if part)


def write_plotted_section(
    docs_dir: Path, plot_name: str, draw: Callable[[Path], None], text: str, start: str, end: str
) -> list[Path]:
    """Draw a section's figure into docs/bench/``plot_name`` and put its ``text`` into
    docs/benchmarks.md; both paths."""
    path = image_path(docs_dir, plot_name)
    draw(path)
    return [path, write_section(docs_dir, text, start, end)]


R = TypeVar("R")


def plotted_writer(
    plot: Callable[[R, Path], None],
    section: Callable[[R, str], str],
    plot_name: str,
    start: str,
    end: str,
) -> Callable[[R, Path, str], list[Path]]:
    """A section's writer: ``section(results, commit)`` into docs/benchmarks.md between ``start``
    and ``end``, ``plot(results, path)`` into docs/bench/``plot_name``."""

    def write(results: R, docs_dir: Path, commit: str) -> list[Path]:
        return write_plotted_section(
            docs_dir,
            plot_name,
            lambda path: plot(results, path),
            section(results, commit),
            start,
            end,
        )

    return write


def quick_note(quick: bool) -> str:
    return " QUICK mode (BENCH_QUICK=1): reduced sizes, not for comparison." if quick else ""


def print_checks(checks: Sequence[Check]) -> None:
    for check in checks:
        print(f"  [{check.verdict}] {check.name}: {check.measured} (target {check.target})")


def check_rows(checks: Sequence[Check]) -> list[list[str]]:
    return [[c.name, c.target, c.measured, f"**{c.verdict}**"] for c in checks]


def overhead_section(results: BenchResults) -> str:
    overhead = results.overhead
    sample = overhead.recorded[0]
    sleeps = ", ".join(f"{value:g}" for value in OVERHEAD_SLEEPS_MS)
    return "\n\n".join(
        [
            "## 1. Resolver overhead on top of the slowest source (in process)",
            f"A route in tenant `bench` with {SOURCE_COUNT} bench-only sources (`bench_static`, "
            f"registered by the bench process only) that return {TOTAL_ITEMS} candidate items in "
            f"total after `asyncio.sleep` of {sleeps} ms. Each request calls "
            "`contextplatform.resolve.pipeline.resolve()` for real: route lookup in PostgreSQL, "
            "parallel fetch (`async_to_sync`), budget, packing "
            f"({sample.kept} of {sample.candidates} items fit the 6000-token context cap), "
            "`tool_role` injection and, when recording, the replay record written to PostgreSQL. "
            "Recorded and unrecorded calls are interleaved. "
            "Overhead = wall time of the call - max(source `ms`).",
            "Note: `resolution.duration_ms` is stamped *before* the replay write, so the overhead "
            "measured against the targets uses the wall-clock time of the whole `resolve()` call; "
            "the `duration_ms`-based figure and the replay write alone are shown to split the "
            "time.",
            "Caveat: a source's `ms` is measured by `fetch_source` around the fetch *and* the "
            "token estimation of its items, on the one event loop that all sources share. So the "
            "slowest source's `ms` also contains CPU work of the platform (estimating the items "
            "of every source that finished just before it), which the overhead definition above "
            "does not count. The row *wall - longest sleep* counts it: it is everything the "
            "platform adds on top of the sources' own waiting.",
            summary_table(
                [
                    ("overhead, resolve() with replay write (vs targets)", overhead.overhead()),
                    (
                        "overhead from duration_ms (before the replay write)",
                        overhead.pipeline_overhead(),
                    ),
                    ("overhead, resolve(record=False)", overhead.overhead_without_replay()),
                    ("replay write alone (wall - duration_ms)", overhead.replay_write()),
                    ("slowest source `ms` (its sleep is 4 ms)", overhead.slowest_source()),
                    ("wall - longest sleep (all platform work)", overhead.over_sleep()),
                ]
            ),
            "Where the time goes: CPU pieces of the same resolve, each timed alone "
            "(`contextplatform.core.estimation`, default `heuristic` estimator):",
            summary_table(list(results.estimation.items())),
            "![Resolver overhead](bench/resolver_overhead.png)",
        ]
    )


def parallel_section(results: BenchResults) -> str:
    parallel = results.parallel
    par, seq = parallel.parallel_total(), parallel.sequential_total()
    return "\n\n".join(
        [
            "## 2. Parallelism",
            f"The same pipeline on a route of {SOURCE_COUNT} sources that each sleep "
            f"{PARALLEL_SLEEP_MS:g} ms ({TOTAL_ITEMS} items in total), replay write included. "
            "The sequential run is the same `resolve()` with `fetch_all` swapped (in the bench "
            "process only) for a loop that awaits `sources.fetch.fetch_source` one source after "
            "another. Target: p50 ≤ 1.15 x 50 ms + the overhead p50 of section 1 = "
            f"{results.parallel_target_ms:.2f} ms.",
            summary_table(
                [
                    ("parallel resolve() total", par),
                    ("sequential resolve() total", seq),
                    ("parallel, slowest source `ms`", parallel.slowest_source()),
                    ("parallel, wall - 50 ms (all platform work)", parallel.over_sleep()),
                ]
            ),
            f"Speed-up of the parallel fetch at p50: {seq.p50 / par.p50:.2f}x "
            f"(ideal {SOURCE_COUNT}x). All {SOURCE_COUNT} fetch intervals overlapped in "
            f"{parallel.overlapped()} of {len(parallel.parallel)} parallel resolves.",
            "The slowest source's `ms` is above 50 ms because the sources finish their sleeps "
            "together and then each one's items are token-estimated in turn on the shared "
            "event loop (see the caveat in section 1).",
            "![Parallel vs sequential](bench/parallelism.png)",
        ]
    )


def http_rows(runs: Sequence[HttpRun]) -> list[list[str]]:
    rows = []
    for run in runs:
        result = run.result
        latency = summarize(result.latencies_ms)
        errors = ", ".join(f"{k}: {v}" for k, v in result.errors.items()) or "0"
        rows.append(
            [
                str(result.workers),
                str(result.completed),
                f"{result.wall_s:.1f}",
                f"{result.requests_per_s:.1f}",
                f"{latency.p50:.1f}",
                f"{latency.p95:.1f}",
                f"{latency.p99:.1f}",
                errors,
                f"{result.server_cpu_s / result.wall_s:.2f}",
                worker_split(result),
                database_cores(result),
                sessions_per_request(result),
                f"{result.client_cpu_s / result.wall_s:.2f}",
                f"{result.machine_busy * 100:.0f} %",
                f"{other_cores(result):.2f}",
            ]
        )
    return rows


def database_cores(result: LoadResult) -> str:
    if result.database_cpu_s is None:
        return "n/a"
    return f"{result.database_cpu_s / result.wall_s:.2f}"


def worker_split(result: LoadResult) -> str:
    total = sum(result.worker_cpu_s)
    if not total:
        return "n/a"
    return " / ".join(f"{seconds / total * 100:.0f} %" for seconds in result.worker_cpu_s)


def other_cores(result: LoadResult) -> float:
    """Busy cores not explained by server, database and client: other load on the machine."""
    busy = result.machine_busy * (os.cpu_count() or 1)
    ours = result.server_cpu_s + (result.database_cpu_s or 0.0) + result.client_cpu_s
    return max(busy - ours / result.wall_s, 0.0)


def sessions_per_request(result: LoadResult) -> str:
    if result.database_sessions is None or not result.completed:
        return "n/a"
    return f"{result.database_sessions / result.completed:.2f}"


def http_section(results: BenchResults) -> str:
    runs = results.http
    header = [
        "workers",
        "requests",
        "seconds",
        "requests/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "errors",
        "server CPU (cores)",
        "CPU split across workers",
        "PostgreSQL CPU (cores)",
        "DB sessions per request",
        "client CPU (cores)",
        "machine CPU busy",
        "other processes (cores)",
    ]
    config = {k: v for k, v in runs[0].config.items() if k not in {"workers", "command"}}
    config_rows = [["command", "; ".join(f"`{run.config['command']}`" for run in runs)]]
    config_rows += [[key, value] for key, value in config.items()]
    config_rows.append(["database", results.environment["database"]])
    return "\n\n".join(
        [
            "## 3. `POST /api/v1/resolve` over HTTP (loopback)",
            "`manage.py migrate_schemas` and `manage.py bootstrap_demo` run first; then uvicorn "
            "serves `contextplatform.asgi:application` on 127.0.0.1 and a free port, once with "
            "each worker count. "
            f"{runs[0].result.clients} concurrent clients (one `httpx.AsyncClient` each, "
            "keep-alive) post the demo request of `bootstrap_demo` (route `support`: guardrails, "
            "profile and history of user `u_123`, session `s_9`) until the request count or the "
            "time cap is reached, after a discarded warm-up. The clients open their connections "
            "one by one, 20 ms apart, before the clock starts: a burst of simultaneous connects "
            "is all accepted by the one worker that wakes first, leaving the other idle. "
            "*CPU split across workers* shows how the load actually spread.",
            "Latency is measured by the client and includes its own queueing. The client runs on "
            "the same 2 cores as the server and the database, so the CPU of each is shown; "
            "*other processes* is the rest of the machine's busy CPU (anything else running "
            "during the benchmark). *DB sessions per request* counts PostgreSQL connections "
            "opened (`pg_stat_database.sessions`) per request. The replay records the benchmark "
            "adds to the demo tenant are deleted afterwards.",
            table(header, http_rows(runs)),
            "Server configuration:",
            table(["", ""], config_rows),
            "![HTTP latency and throughput](bench/http.png)",
        ]
    )


def write_report(results: BenchResults, docs_dir: Path) -> list[Path]:
    written = [
        image_path(docs_dir, "resolver_overhead.png"),
        image_path(docs_dir, "parallelism.png"),
        image_path(docs_dir, "http.png"),
        docs_dir / "benchmarks.md",
    ]
    plot_overhead(results.overhead, written[0])
    plot_parallelism(results.parallel, results.parallel_target_ms, written[1])
    plot_http(results.http, written[2])
    sections = [
        header_section(results),
        overhead_section(results),
        parallel_section(results),
        http_section(results),
    ]
    written[3].write_text("\n\n".join(sections) + "\n", encoding="utf-8")
    return written
