"""The soak's section of docs/benchmarks.md and its plot, between two HTML comments so that
``BENCH_ONLY=soak`` can replace it in the page of an earlier run."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt

from scripts import report
from scripts.bench_soak import (
    KINDS,
    MIX,
    USERS,
    WINDOW_S,
    SoakResults,
    latency_summary,
    ok,
    percentile,
)

START = "<!-- soak:start -->"
END = "<!-- soak:end -->"
PLOT = "soak.png"
FLAT = 0.05  # memory at the end within 5 % of the start (after the warm-up)
PSS, USS = 0, 1
# PostgreSQL and Redis hold the data the soak writes (documents, memories, cached results with an
# hour's expiry): their memory may grow with it, which the platform's processes' must not.
DATA_STORES = frozenset({"postgres", "redis"})


def growth(results: SoakResults, kind: int) -> dict[str, float]:
    """Each part's memory at the end over the start, less one; ``kind`` 0 is PSS, 1 USS."""
    return {
        name: results.end_memory_mb.get(name, (math.nan, math.nan))[kind] / start[kind] - 1
        for name, start in results.start_memory_mb.items()
        if start[kind] > 0
    }


def soak_checks(results: SoakResults) -> list[report.Check]:
    answers = results.answers
    failed = [answer for answer in answers if not ok(answer)]
    grown = growth(results, USS)
    platform = {name: change for name, change in grown.items() if name not in DATA_STORES}
    stores = {name: change for name, change in grown.items() if name in DATA_STORES}
    worst = max(platform.items(), key=lambda item: item[1]) if platform else ("-", 0.0)
    shared = growth(results, PSS)
    worst_shared = max(
        ((name, change) for name, change in shared.items() if name not in DATA_STORES),
        key=lambda item: item[1],
        default=("-", 0.0),
    )
    pending = results.turns.get("pending", 0)
    lost_turns = pending + results.turns.get("failed", 0)
    unfinished = sum(count for status, count in results.jobs.items() if status != "done")
    connections = [window.connections for window in results.windows]
    return [
        report.Check(
            f"errors over {results.seconds:g} s at {results.rate:g} requests/s",
            "0",
            f"{len(failed)} of {len(answers)}",
            not failed,
        ),
        report.Check(
            "memory each platform process holds alone (USS: web, Celery, beat, the stand-in), "
            f"end vs start (from {results.warmup_s:.0f} s)",
            f"within {FLAT:.0%}",
            f"largest change {worst[1]:+.1%} ({worst[0]}); with shared pages (PSS) "
            f"{worst_shared[1]:+.1%} ({worst_shared[0]})",
            all(abs(change) <= FLAT for change in platform.values()),
        ),
        report.Check(
            "memory of the data stores (USS), end vs start: they hold what the soak writes",
            f"reported (within {FLAT:.0%} would mean no growth)",
            ", ".join(
                f"{name} {change:+.1%} "
                f"({results.start_memory_mb[name][USS]:,.1f} → "
                f"{results.end_memory_mb.get(name, (math.nan, math.nan))[USS]:,.1f} MiB)"
                for name, change in stores.items()
            )
            or "-",
            True,
        ),
        report.Check(
            "memory turns written after the load (none pending or failed)",
            "0 left",
            f"{lost_turns} left; {dict(sorted(results.turns.items()))}, drained in "
            f"{results.drain_s:.0f} s",
            lost_turns == 0,
        ),
        report.Check(
            "ingestion jobs done",
            "all",
            f"{results.jobs.get('done', 0)} of {sum(results.jobs.values())}",
            unfinished == 0,
        ),
        report.Check(
            "database connections (every window)",
            "bounded (reported)",
            f"min {min(connections, default=0)}, max {max(connections, default=0)}",
            True,
        ),
    ]


def kind_rows(results: SoakResults) -> list[list[str]]:
    rows = []
    for kind in KINDS:
        answers = [answer for answer in results.answers if answer.kind == kind]
        p50, p99 = latency_summary(answers)
        errors = sum(1 for answer in answers if not ok(answer))
        rows.append([kind, f"{len(answers):,}", str(errors), f"{p50:.1f}", f"{p99:.1f}"])
    return rows


def window_rows(results: SoakResults) -> list[list[str]]:
    rows = []
    for window in results.windows[:: max(1, len(results.windows) // 10)]:
        times = [answer.ms for answer in window.answers if ok(answer)]
        errors = sum(1 for answer in window.answers if not ok(answer))
        rows.append(
            [
                f"{window.start_s:.0f}",
                str(len(window.answers)),
                str(errors),
                f"{percentile(times, 50):.1f}",
                f"{percentile(times, 99):.1f}",
                str(window.connections),
                f"{sum(pss for pss, _ in window.memory_mb.values()):,.0f}",
                f"{sum(uss for _, uss in window.memory_mb.values()):,.0f}",
            ]
        )
    return rows


def memory_rows(results: SoakResults) -> list[list[str]]:
    shared, alone = growth(results, PSS), growth(results, USS)
    rows = []
    for name, start in results.start_memory_mb.items():
        end = results.end_memory_mb.get(name, (math.nan, math.nan))
        rows.append(
            [
                name,
                f"{start[PSS]:,.1f}",
                f"{end[PSS]:,.1f}",
                f"{shared.get(name, math.nan):+.1%}",
                f"{start[USS]:,.1f}",
                f"{end[USS]:,.1f}",
                f"{alone.get(name, math.nan):+.1%}",
            ]
        )
    return rows


def draw(results: SoakResults, path: Path) -> None:
    fig, (latency, memory, connections) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    starts = [window.start_s for window in results.windows]
    for kind in KINDS:
        p50 = [percentile([a.ms for a in w.of(kind) if ok(a)], 50) for w in results.windows]
        p99 = [percentile([a.ms for a in w.of(kind) if ok(a)], 99) for w in results.windows]
        (line,) = latency.plot(starts, p50, label=f"{kind} p50")
        latency.plot(starts, p99, linestyle="--", color=line.get_color(), label=f"{kind} p99")
    latency.set_ylabel("ms (per 10 s window)")
    latency.set_yscale("log")
    latency.legend(fontsize=7, ncol=4)
    latency.set_title("Soak: latency, memory (PSS) and database connections over time")
    for name in results.start_memory_mb:
        (line,) = memory.plot(
            starts,
            [w.memory_mb.get(name, (math.nan,) * 2)[USS] for w in results.windows],
            label=name,
        )
        memory.plot(
            starts,
            [w.memory_mb.get(name, (math.nan,) * 2)[PSS] for w in results.windows],
            linestyle=":",
            color=line.get_color(),
        )
    memory.axvline(results.warmup_s, color="grey", linewidth=0.8)
    memory.set_ylabel("MiB: USS (solid), PSS (dotted)")
    memory.legend(fontsize=7, ncol=3)
    connections.plot(starts, [w.connections for w in results.windows])
    connections.set_ylabel("DB connections")
    connections.set_xlabel("seconds into the soak")
    report.save_figure(fig, path)


def soak_section(results: SoakResults) -> str:
    mix = ", ".join(f"{MIX.count(kind)} {kind}" for kind in KINDS)
    return report.with_figure(
        [
            START,
            "## 13. Soak: the cluster shape under mixed work",
            f"Measured {results.date} on `{results.commit}` by `scripts/bench_soak.py`; "
            "`BENCH_ONLY=soak make bench` refreshes this section alone. Load average before "
            f"{results.load_before}, after {results.load_after}.{report.quick_note(results.quick)}",
            "The cluster of `make cluster` (`scripts/cluster.py`): PostgreSQL as its own server "
            "over TCP, Redis of its own, gunicorn with two uvicorn workers, two Celery workers "
            "and beat, the stand-in model, on this one machine with the load generator. "
            f"{results.rate:g} requests/s, open loop (each sent at its time, whatever the answers "
            f"before it took), for {results.seconds:g} s; each cycle of {len(MIX)} requests is "
            f"{mix}: resolves of the demo route, gateway calls of the demo route, gateway calls "
            "of a route whose memory source stores every turn (so the workers write memories "
            f"all along; {USERS} users), and one document posted to a collection (an ingestion "
            f"job each). Every {WINDOW_S:g} s: each process's memory and the database's "
            "connection count. Memory is measured two ways, a part's children (web workers "
            "apart) counted with it: USS, what a process holds alone (what a leak grows), and "
            "PSS, which adds its share of the pages it shares (plain RSS would count PostgreSQL's "
            "shared buffers again in every backend that touched them, and follow the connection "
            "count); PostgreSQL's PSS also grows as its buffer cache fills with the data the soak "
            "writes. Memory is compared from the first window a third of the way in "
            f"({results.warmup_s:.0f} s): by then every kind of work has run many times, each "
            "worker's first judge calibration included (a one-time step of about 50 MiB, at 140 "
            "and 195 s in the first 600 s run). After the load, the queued turns and jobs are "
            "waited for.",
            report.table(
                ["check", "target", "measured", "result"], report.check_rows(soak_checks(results))
            ),
            "### By kind (ms, answered requests)",
            report.table(["kind", "requests", "errors", "p50", "p99"], kind_rows(results)),
            "### Over time",
            report.table(
                [
                    "window start s",
                    "requests",
                    "errors",
                    "p50 ms",
                    "p99 ms",
                    "DB connections",
                    "PSS MiB, all",
                    "USS MiB, all",
                ],
                window_rows(results),
            ),
            "### Memory (MiB): PSS, and USS (held alone)",
            report.table(
                [
                    "process",
                    "PSS start",
                    "PSS end",
                    "PSS change",
                    "USS start",
                    "USS end",
                    "USS change",
                ],
                memory_rows(results),
            ),
            (
                "Errors: " + "; ".join(f"{text} ({n})" for text, n in results.errors.most_common(8))
                if results.errors
                else ""
            ),
        ],
        "the soak over time",
        PLOT,
        END,
    )


def write_soak(results: SoakResults, docs_dir: Path, commit: str) -> list[Path]:
    return report.write_plotted_section(
        docs_dir, PLOT, lambda path: draw(results, path), soak_section(results), START, END
    )


def print_soak(results: SoakResults) -> None:
    print("soak:")
    report.print_checks(soak_checks(results))
