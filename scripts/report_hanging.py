"""Section 12 of docs/benchmarks.md (a hanging source: the work after its deadline) and its plot,
between two HTML comments so that ``BENCH_ONLY=hanging`` can replace it in the page of an earlier
run."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from scripts import report
from scripts.bench_hanging import (
    BEFORE_COMMIT,
    CODES,
    KINDS,
    PATHS,
    SESSION,
    TIMEOUT_MS,
    HangingResults,
)
from scripts.bench_stats import SUMMARY_HEADER, pct, summarize

START = "<!-- hanging:start -->"
END = "<!-- hanging:end -->"
PLOT = "hanging.png"
TARGET_P99_MS = 20.0
HANGS = tuple(kind for kind in KINDS if kind != "none")
PATH_WORDS = {"in_process": "in process", "http": "over HTTP"}


def hanging_checks(results: HangingResults) -> list[report.Check]:
    checks = []
    for kind in HANGS:
        now = results.of("http", kind, "now").after_deadline()
        before = results.of("http", kind, "before").after_deadline()
        p99 = pct(now, 99)
        checks.append(
            report.Check(
                f"{kind} hanging, over HTTP: deadline → answer p99 (now)",
                f"≤ {TARGET_P99_MS:g} ms",
                f"{p99:.1f} ms (p50 {pct(now, 50):.1f}; before {pct(before, 50):.1f} / "
                f"{pct(before, 99):.1f})",
                p99 <= TARGET_P99_MS,
            )
        )
    return checks


def outcome_rows(results: HangingResults) -> list[list[str]]:
    rows = []
    for kind in HANGS:
        for name in CODES:
            counted: dict[str, int] = {}
            for path in PATHS:
                for words, count in results.of(path, kind, name).outcomes().items():
                    # what was left when a bound was set varies from resolve to resolve
                    words = re.sub(r"\(\d+ ms left\)", "(… ms left)", words)
                    counted[words] = counted.get(words, 0) + count
            for words, count in sorted(counted.items(), key=lambda pair: -pair[1]):
                rows.append([kind, name, f"`{words}`", str(count)])
    return rows


def summary_rows(results: HangingResults, path: str) -> list[list[str]]:
    rows = []
    for kind in KINDS:
        for name in CODES:
            series = results.of(path, kind, name)
            rows.append(
                [f"{kind}, {name}: wall - timeout", *summarize(series.over_timeout(kind)).row()]
            )
            rows.append(
                [f"{kind}, {name}: deadline → answer", *summarize(series.after_deadline()).row()]
            )
            if kind != "none":
                held = summarize(series.held()).row()
                rows.append([f"{kind}, {name}: stuck source's ms - timeout", *held])
    return rows


def plot_hanging(results: HangingResults, path: Path) -> None:
    fig, axes = plt.subplots(1, len(PATHS), figsize=(11, 4.2), sharey=True)
    width = 0.38
    positions = np.arange(len(KINDS))
    for ax, where in zip(axes, PATHS, strict=True):
        for offset, name, colour in (
            (-width / 2, "before", "tab:grey"),
            (width / 2, "now", "tab:blue"),
        ):
            series = [results.of(where, kind, name).after_deadline() for kind in KINDS]
            p99 = [pct(s, 99) for s in series]
            p50 = [pct(s, 50) for s in series]
            ax.bar(positions + offset, p99, width, color=colour, alpha=0.55, label=f"{name} p99")
            ax.scatter(
                positions + offset, p50, color=colour, marker="o", zorder=3, label=f"{name} p50"
            )
        ax.axhline(
            TARGET_P99_MS, color="tab:red", linestyle="--", label=f"target p99 {TARGET_P99_MS:g} ms"
        )
        ax.set_xticks(positions, ["none\n(fetch end →)", *HANGS], fontsize=8)
        ax.set_title(PATH_WORDS[where])
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("deadline → answer (ms)")
    axes[-1].legend(loc="upper left", fontsize=8)
    fig.suptitle(
        f"A source hanging past its {TIMEOUT_MS} ms timeout beside the demo route's sources"
    )
    report.save_figure(fig, path)


def hanging_section(results: HangingResults, commit: str) -> str:
    sizes = results.sizes
    return report.with_figure(
        [
            START,
            "## 12. A hanging source: the work after its deadline",
            f"Measured {results.date} (commit {commit}) in {results.runtime_s:.0f} s by "
            "`scripts/bench_hanging.py`; `BENCH_ONLY=hanging make bench` refreshes this section "
            f"alone. Load average before the run: {results.load_before}; after: "
            f"{results.load_after}." + report.quick_note(results.quick),
            report.table(
                ["check", "target", "measured", "result"],
                report.check_rows(hanging_checks(results)),
            ),
            "The demo tenant's `support` route (guardrails, profile, history, the `support-kb` "
            f"documents) with one more source, `stuck`, its `timeout_ms` {TIMEOUT_MS}, whose peer "
            "never answers: **external_api**, a `rag` source whose HTTP peer on loopback accepts "
            "and reads the request and never answers; **realtime_apis**, a live connector to the "
            "same peer (its connector's bound is a hair shorter than the deadline, so it reports "
            "its own timeout); **mcp**, a `rag` source on the `mcp` backend calling a tool of an "
            "official-SDK MCP server that never returns; **database**, a `rag` source on "
            "`vectorstore` (results not cached) while another connection holds the chunk table "
            "locked, so its recall waits until `statement_timeout` cancels it. **none** is the "
            "`support` route alone. Each is resolved by `use_cases.resolve_context` for user "
            f"`u_123` in the bench's session `{SESSION}`, in process (asgiref's own event loop "
            "for the call) and over HTTP (`POST /api/v1/resolve`, uvicorn, one worker, one "
            f"client), {sizes.rounds} measured rounds per kind and path after {sizes.warmup} "
            "warm-up rounds. **now** is the code as it is; **before** has `sources.fetch.fetch_one` "
            f"as it was at {BEFORE_COMMIT} (loaded from git; over HTTP a server of its own), which "
            "waited in `asyncio.wait_for` for the cut fetch to finish unwinding. Every round runs "
            "both in a fresh random order (seeded).",
            "*wall - timeout* is the resolve's wall time minus the 300 ms (for none, its whole "
            "wall time): it also holds the work before the fetch starts (authentication, the "
            "route, building the sources). *deadline → answer* is timed from the stuck source's "
            "deadline on the machine's monotonic clock (over HTTP the bench's servers add when "
            "it fell to the report) to the answer reaching the caller; for none, from the "
            "fetch's end: the work every resolve does after its fetch (packing, injection, the "
            "replay hand-off, the session turn, the response). *stuck source's ms - timeout* "
            "is how long the stuck source's outcome came after its deadline: the wait for the "
            "cut fetch to unwind that `asyncio.wait_for` did (in process, now, the loop made for "
            "the call still lets the cut fetch finish before it ends; that wait is in *deadline "
            "→ answer*).",
            "### In process (ms)",
            report.table(["", *SUMMARY_HEADER], summary_rows(results, "in_process")),
            "### Over HTTP (ms)",
            report.table(["", *SUMMARY_HEADER], summary_rows(results, "http")),
            "### What the stuck source reported",
            report.table(["kind", "code", "status: error", "resolves"], outcome_rows(results)),
        ],
        "A hanging source's work after its deadline",
        PLOT,
        END,
    )


write_hanging = report.plotted_writer(plot_hanging, hanging_section, PLOT, START, END)


def print_hanging(results: HangingResults) -> None:
    print()
    print(f"Hanging source (timeout {TIMEOUT_MS} ms): deadline → answer, p50 / p99 ms")
    for where in PATHS:
        for kind in KINDS:
            figures = "  ".join(
                f"{name} {pct(results.of(where, kind, name).after_deadline(), 50):6.1f} / "
                f"{pct(results.of(where, kind, name).after_deadline(), 99):6.1f}"
                for name in CODES
            )
            print(f"  {PATH_WORDS[where]:<11} {kind:<14} {figures}")
    report.print_checks(hanging_checks(results))
