"""Section 9 of docs/benchmarks.md (connectors: fetch overhead over the peer) and its plot;
``BENCH_ONLY=connectors`` replaces it alone (``report.write_section``). One table row, one check
and one curve per connector run (``scripts/bench_connectors.py``, ``MEASUREMENTS``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt

from scripts import report
from scripts.bench_connectors import TARGET_P50_MS, ConnectorRun, ConnectorsResults
from scripts.bench_stats import pct

START = "<!-- connectors:start -->"
END = "<!-- connectors:end -->"
PLOT = "connectors.png"


def ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def connectors_checks(results: ConnectorsResults) -> list[report.Check]:
    checks = []
    for run in results.runs:
        overhead = run.overhead()
        p50 = pct(overhead, 50)
        checks.append(
            report.Check(
                f"{run.kind} fetch overhead p50 over its peer (same round)",
                f"≤ {TARGET_P50_MS:g} ms",
                f"{ms(p50)} ms (p99 {ms(pct(overhead, 99))} ms)",
                p50 <= TARGET_P50_MS,
            )
        )
    return checks


def latency_rows(run: ConnectorRun) -> list[list[str]]:
    def row(label: str, samples: Sequence[float], added: Sequence[float] | None) -> list[str]:
        cells = [label, str(len(samples)), ms(pct(samples, 50)), ms(pct(samples, 90))]
        cells.append(ms(pct(samples, 99)))
        if added is None:
            return [*cells, "-", "-", "-"]
        return [*cells, ms(pct(added, 50)), ms(pct(added, 90)), ms(pct(added, 99))]

    rows = [
        row(f"{run.kind}: {run.direct_label} (direct)", run.direct_ms, None),
        row(f"{run.kind}: the source's fetch", run.fetch_ms, run.overhead()),
    ]
    for label, samples in run.context_ms.items():
        rows.append(row(f"{run.kind}: {label} (context)", samples, None))
    return rows


HEADER = ["series", "n", "p50 ms", "p90", "p99", "fetch - direct: p50", "p90", "p99"]


def plot(results: ConnectorsResults, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    everything: list[float] = []
    for run in results.runs:
        overhead = run.overhead()
        everything += overhead
        report.ecdf(ax, overhead, f"{run.kind}: fetch - direct")
    ax.axvline(TARGET_P50_MS, color="tab:green", linestyle="--", linewidth=1, label="target p50")
    ax.axhline(0.5, color="grey", linewidth=0.5)
    ax.axhline(0.99, color="grey", linewidth=0.5)
    if everything:
        ax.set_xlim(min(0.0, pct(everything, 0.5)), max(pct(everything, 99.5), TARGET_P50_MS) * 1.1)
    report.label_axes(
        ax,
        "ms the source's fetch adds over calling its peer (same round)",
        "fraction of rounds",
        "Connectors: fetch overhead over the peer's own latency",
        fontsize=8,
    )
    report.save_figure(fig, path)


def section(results: ConnectorsResults, commit: str) -> str:
    sizes = results.sizes
    parts = [
        START,
        "## 9. Connectors: fetch overhead over the peer's own latency",
        f"Measured {results.date} at commit `{commit}` (load average {results.load_before} before, "
        f"{results.load_after} after; {results.runtime_s:.0f} s)."
        f"{report.quick_note(results.quick)}",
        "Each connector's source is fetched as a resolve fetches it, against a real peer on "
        "loopback in its own process, and compared with calling that peer directly in the same "
        "round (the two in a fresh random order each round, seeded): the *overhead* is the "
        "fetch's time minus the direct call's of the same round. "
        f"{sizes.rounds} measured rounds after {sizes.warmup} warm-up rounds per connector; "
        "client, peer and PostgreSQL share the machine's 2 cores.",
    ]
    for run in results.runs:
        parts.append(f"**{run.kind}** against {run.peer}. " + " ".join(run.notes))
        if run.kind == "mcp_resources":
            parts.append(
                "*Direct* is a bare client of the official SDK connected once, its session kept "
                "open, reading the same resources at once: the server's handling and the loopback "
                "round trips, what any client pays. *The source's fetch* is "
                "`sources.fetch.fetch_source` on an `mcp_resources` source (its deadline; the "
                "server's row, with its header values decrypted, as each process remembers it for "
                "a second after reading it in the tenant's schema; an SDK client over the guarded "
                "HTTP client kept for the event loop, its connections reused, adopting the version "
                "the server negotiated before; the reads; "
                "the items built, logged and counted). *Connecting each time* (context only, "
                f"{sizes.connect_rounds} rounds) is a bare SDK client opened for every read "
                "with the SDK's defaults: its own TLS context and a version probe each time, "
                "what the source's shared TLS context and remembered negotiation avoid."
            )
        if run.kind == "realtime_apis":
            parts.append(
                "*Direct* is a bare httpx client, its connections kept open, making the same two "
                "GETs at once and decoding both answers: the API's handling and the loopback "
                "round trips, the least any client pays. *The source's fetch* is "
                "`sources.fetch.fetch_source` on a `realtime_apis` source with two connectors and "
                "no cache (its deadline; the templates filled and encoded; the guarded client "
                "kept for the event loop and allow-list, as a worker's resolves share one loop: "
                "every request and redirect checked, its connections reused, no cookies kept; "
                "the bounded reads; the JSON paths; the items built, logged and counted). For "
                f"context ({sizes.connect_rounds} rounds each): a bare client opening a new "
                "connection for every call with httpx's defaults (a TLS context of its own each "
                "time), and the source's fetch served from its per-user cache "
                "(`cache_ttl_seconds` 5: two reads of Django's cache, Redis when `REDIS_URL` is "
                "set)."
            )
        parts.append(report.table(HEADER, latency_rows(run)))
    parts.append(f"![connectors](bench/{PLOT})")
    parts.append(
        report.table(
            ["check", "target", "measured", "verdict"],
            report.check_rows(connectors_checks(results)),
        )
    )
    parts.append(END)
    return "\n\n".join(parts) + "\n"


def write_connectors(results: ConnectorsResults, docs_dir: Path, commit: str) -> list[Path]:
    plot_path = report.image_path(docs_dir, PLOT)
    plot(results, plot_path)
    page = report.write_section(docs_dir, section(results, commit), START, END)
    return [page, plot_path]


def print_connectors(results: ConnectorsResults) -> None:
    print("connectors (section 9):")
    for run in results.runs:
        overhead = run.overhead()
        print(
            f"  {run.kind}: direct p50 {ms(pct(run.direct_ms, 50))} ms, fetch p50 "
            f"{ms(pct(run.fetch_ms, 50))} ms, overhead p50 {ms(pct(overhead, 50))} / p99 "
            f"{ms(pct(overhead, 99))} ms"
        )
    report.print_checks(connectors_checks(results))
