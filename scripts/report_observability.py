"""Section 7 of docs/benchmarks.md (observability) and its plot; ``BENCH_ONLY=observability``
replaces it alone (``report.write_section``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from scripts import report
from scripts.bench_fanout import DASHBOARDS, IN_FLIGHT, RATE_PER_S, SOURCES, FanoutResult
from scripts.bench_observability import (
    ALL_ON,
    CHANNEL_PREFIX,
    SOURCE_SLEEPS_MS,
    TARGET_P50_MS,
    LayerRun,
    ObservabilityResults,
)
from scripts.bench_setup import TOTAL_ITEMS
from scripts.bench_stats import summarize

START = "<!-- observability:start -->"
END = "<!-- observability:end -->"
PLOT = "observability.png"
LABELS = {
    "on": "metrics + replay + live",
    "off": "all off",
    "metrics": "metrics alone",
    "replay": "replay alone",
    "live": "live alone",
    "replay+live": "replay + live (no metrics)",
}


def percentiles(samples: Sequence[float]) -> tuple[float, float, float]:
    if not samples:
        return math.nan, math.nan, math.nan
    p50, p90, p99 = np.percentile(np.asarray(samples, dtype=float), [50, 90, 99])
    return float(p50), float(p90), float(p99)


def ms3(samples: Sequence[float]) -> list[str]:
    return [f"{value:.2f}" for value in percentiles(samples)]


# Checks ------------------------------------------------------------------------------------------


def overhead_check(run: LayerRun) -> report.Check:
    diff = summarize(run.differences(ALL_ON.name))
    on, off = run.summary(ALL_ON.name), run.summary("off")
    mean, half = run.mean_interval(ALL_ON.name)
    return report.Check(
        f"observability overhead p50, {run.layer} channel layer (on - off, paired)",
        f"≤ {TARGET_P50_MS:g} ms",
        f"{diff.p50:.2f} ms (p50 on {on.p50:.2f} - off {off.p50:.2f} = "
        f"{on.p50 - off.p50:.2f} ms; mean {mean:.2f} ± {half:.2f} ms)",
        diff.p50 <= TARGET_P50_MS,
    )


def fanout_check(fanout: FanoutResult) -> report.Check:
    latency = summarize(fanout.latencies_ms())
    lost = sum(fanout.lost())
    return report.Check(
        f"live fan-out, {fanout.dashboards} dashboards, {RATE_PER_S:g} resolves/s",
        "reported (no target); every dashboard gets every event",
        f"{fanout.events_per_s() / fanout.dashboards:.0f} events/s per dashboard, "
        f"{fanout.events_per_s():,.0f} in all; delivery p50 {latency.p50:.0f} ms, p99 "
        f"{latency.p99:.0f} ms; {lost} lost",
        lost == 0 and fanout.expected > 0,
    )


def observability_checks(results: ObservabilityResults) -> list[report.Check]:
    checks = [overhead_check(run) for run in results.layers]
    if results.fanout is not None:
        checks.append(fanout_check(results.fanout))
    return checks


# Plot --------------------------------------------------------------------------------------------


def plot_differences(ax: plt.Axes, results: ObservabilityResults) -> None:
    for run in results.layers:
        names = run.settings() if run.layer == "redis" else [ALL_ON.name]
        for name in names:
            report.ecdf(ax, run.differences(name), f"{LABELS[name]} ({run.layer})")
    ax.axvline(TARGET_P50_MS, color="tab:red", linestyle="--", label=f"target {TARGET_P50_MS:g} ms")
    ax.axvline(0, color="grey", linewidth=0.5)
    ax.axhline(0.5, color="grey", linewidth=0.5)
    everything = [d for run in results.layers for d in run.differences(ALL_ON.name)]
    low, high = np.percentile(everything, [2, 95]) if everything else (-1, 1)
    ax.set_xlim(min(low, -1), max(high, 2 * TARGET_P50_MS))
    report.label_axes(
        ax,
        "wall ms of resolve() minus all-off, same round",
        "fraction of rounds",
        "Per-request cost (paired differences)",
        fontsize=7,
    )


def plot_cpu(ax: plt.Axes, results: ObservabilityResults) -> None:
    labels, means, halves = [], [], []
    for run in results.layers:
        for name in run.settings():
            mean, half = run.mean_interval(name, "cpu")
            labels.append(f"{LABELS[name]}\n({run.layer})")
            means.append(mean)
            halves.append(half)
    bars = ax.barh(labels, means, xerr=halves, color="tab:blue", alpha=0.7)
    ax.bar_label(bars, fmt="%.2f", padding=3, fontsize=7)
    ax.axvline(0, color="grey", linewidth=0.5)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("bench process CPU ms per resolve minus all-off (mean, 95 % CI)")
    ax.set_title("Where the CPU goes")
    ax.grid(alpha=0.3, axis="x")


def plot_delivery(ax: plt.Axes, fanout: FanoutResult | None) -> None:
    if fanout is None or not fanout.latencies_ms():
        ax.text(0.5, 0.5, "fan-out not measured", ha="center", va="center")
        ax.set_axis_off()
        return
    report.ecdf(
        ax, fanout.latencies_ms(), f"event 'at' -> received, {fanout.dashboards} dashboards"
    )
    report.ecdf(ax, fanout.resolve_ms, "POST /api/v1/resolve latency")
    ax.axhline(0.5, color="grey", linewidth=0.5)
    ax.axhline(0.99, color="grey", linewidth=0.5)
    ax.set_xscale("log")
    ax.set_xlabel("ms (log scale)")
    ax.set_ylabel("fraction")
    ax.set_title(f"Live fan-out at {RATE_PER_S:g} resolves/s")
    ax.legend(loc="lower right", fontsize=7)
    ax.grid(alpha=0.3, which="both")


def plot(results: ObservabilityResults, path: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    plot_differences(axes[0], results)
    plot_cpu(axes[1], results)
    plot_delivery(axes[2], results.fanout)
    report.save_figure(fig, path)


# Markdown ----------------------------------------------------------------------------------------


def overhead_rows(run: LayerRun) -> list[list[str]]:
    rows = []
    for name in run.wall:
        if name == "off":
            rows.append([LABELS[name], *ms3(run.wall[name]), "-", "-", "-", "-", "-", "-"])
            continue
        mean, half = run.mean_interval(name)
        cpu_mean, cpu_half = run.mean_interval(name, "cpu")
        rows.append(
            [
                LABELS[name],
                *ms3(run.wall[name]),
                *ms3(run.differences(name)),
                f"{mean:.2f} ± {half:.2f}",
                f"{percentiles(run.differences(name, 'cpu'))[0]:.2f}",
                f"{cpu_mean:.2f} ± {cpu_half:.2f}",
            ]
        )
    return rows


OVERHEAD_HEADER = [
    "setting",
    "wall p50",
    "p90",
    "p99",
    "minus off: p50",
    "p90",
    "p99",
    "mean ± 95 % CI",
    "CPU minus off: p50",
    "mean ± 95 % CI",
]


def overhead_text(results: ObservabilityResults) -> str:
    sleeps = ", ".join(f"{value:g}" for value in SOURCE_SLEEPS_MS)
    sizes = results.sizes
    return (
        f"In process, tenant `bench`, route `bench-observability`: {len(SOURCE_SLEEPS_MS)} "
        f"bench-only sources (`bench_static`) that return {TOTAL_ITEMS} items in total after "
        f"`asyncio.sleep` of {sleeps} ms. Every resolve is a real recorded "
        "`resolve()` (route lookup, parallel fetch, packing, injection) run as the ASGI server "
        "runs a view: `sync_to_async` in a worker thread, with `fetch_all` back on the event "
        "loop through `async_to_sync`. On that loop a listener has joined the tenant's group "
        "`metrics.bench` (`layer.new_channel`, `group_add`, then `receive` in a loop), as a "
        "connected dashboard does. The three parts and how *off* is made (in the bench process "
        "only, with `unittest.mock.patch`; the platform has no switch for them, and "
        "`resolve(record=False)` would also turn compression records off and make sources dry "
        "runs):\n\n"
        "- **metrics**: `metrics.observe_source` (2 prometheus_client operations per source), "
        "`metrics.StageClock` (a histogram observation per stage: fetch, pack, inject, "
        "compress, replay), `context_live_events_total`, and the database engine's counters "
        "around each SQL query (`django_db_execute_total`, `django_db_query_duration_seconds`); "
        "off = no-op stand-ins. The engine's counting cursor class stays, as the backend is "
        "chosen at start-up. One process, so "
        "prometheus_client keeps values in memory (with `PROMETHEUS_MULTIPROC_DIR` each "
        "operation writes a memory-mapped file instead; not measured here).\n"
        "- **replay**: `resolver.save_replay`, which builds the `ReplayRecord` and hands it to "
        "`routing.replay_writer` (the production default, `REPLAY_WRITES=background`): the "
        "writer thread's INSERT is off the resolve path; the bench drains it after each resolve "
        "(`REPLAY_WRITER.flush()`, outside the timed call, its CPU counted); off = returns "
        "nothing.\n"
        "- **live**: `live_events.publish_source_events`, one group message per resolve; off = no-op. "
        "With Redis the resolve only enqueues and the process's sender thread does the "
        "`group_send` (its CPU is in the bench process and counted); with the in-memory layer "
        "the resolve schedules the `group_send` on the listeners' event loop "
        "(`asyncio.run_coroutine_threadsafe`) and returns.\n\n"
        "Settings per round: all on, all off, each part alone on, and replay + live without "
        "metrics (Redis layer: do the two parts that wait on I/O or hand work to another thread "
        "add up?); all on, all off and live alone (in-memory layer). "
        f"{sizes.rounds} measured rounds per layer after "
        f"{sizes.warmup} warm-up rounds; every round runs the settings in a fresh random order "
        "(seeded), so drift and the machine's other load fall on every setting alike, and after "
        "each resolve the bench waits (idle) until its live events have reached the listener, "
        "so no resolve inherits the background work of the one before. *Wall* is the "
        "`resolve()` call as its caller waits for it. *Minus off* is each resolve minus the "
        "all-off resolve of the same round (paired), so it is the part's own cost; its p50 is "
        "the figure checked against the target. *CPU* is the bench process's CPU time "
        "(`time.process_time`, all threads) from the start of the resolve until its events "
        "reached the listener: the resolve, the sender thread's `group_send` and the listener's "
        "receive, which waiting for a core does not lengthen; PostgreSQL's and Redis's own CPU "
        "are not in it. JSON log lines stay on in every setting (sent to /dev/null)."
    )


def layer_text(run: LayerRun, redis: str) -> str:
    where = (
        f"`channels_redis` at {redis}, key prefix `{CHANNEL_PREFIX}`"
        if run.layer == "redis"
        else "`channels.layers.InMemoryChannelLayer` (the embedded default)"
    )
    return (
        f"**{run.layer} channel layer** ({where}). The listener received "
        f"{run.events_received:,} of the {run.events_expected:,} events published "
        "(warm-up included)."
    )


def findings_text(run: LayerRun) -> str:
    """Where the time goes, in the Redis layer's numbers."""

    def wall(name: str) -> float:
        return percentiles(run.differences(name))[0]

    def cpu(name: str) -> float:
        return run.mean_interval(name, "cpu")[0]

    return (
        f"Reading (Redis layer, p50 of the paired differences): the replay record costs the "
        f"resolve {wall('replay'):.2f} ms of wall time (building the record and handing it to "
        f"the writer) while {cpu('replay'):.2f} ms of this process's CPU go to it in all, most "
        "of it the writer thread's INSERT, off the resolve path. The "
        f"metrics cost {wall('metrics'):.2f} ms ({cpu('metrics'):.2f} ms CPU). The live "
        f"stream alone costs {wall('live'):.2f} ms of wall time, since the resolve only "
        "enqueues, but its sender thread and the listener spend "
        f"{cpu('live'):.2f} ms CPU per resolve. Replay and live together cost "
        f"{wall('replay+live'):.2f} ms. The background work is CPU the server still spends: "
        "under full load it competes with the resolves for the cores (section 3 measures "
        "throughput with all of it on)."
    )


def fanout_rows(fanout: FanoutResult) -> list[list[str]]:
    latency = summarize(fanout.latencies_ms())
    resolve = summarize(fanout.resolve_ms)
    received = [d.received for d in fanout.per_dashboard]
    lost = fanout.lost()
    counters = ", ".join(f"{k} {v:.0f}" for k, v in sorted(fanout.live_events.items())) or "none"
    errors = ", ".join(f"{k}: {v}" for k, v in fanout.errors.items()) or "0"
    return [
        [
            "dashboards connected (server's gauge)",
            f"{fanout.dashboards} ({fanout.connections:.0f})",
        ],
        [
            "resolves (target rate)",
            f"{fanout.resolves} in {fanout.window_s:.1f} s = {fanout.resolves / fanout.window_s:.1f}"
            f"/s ({RATE_PER_S:g}/s); errors {errors}",
        ],
        ["POST /api/v1/resolve latency", f"p50 {resolve.p50:.1f} ms, p99 {resolve.p99:.1f} ms"],
        [
            "events per dashboard: expected / received",
            f"{fanout.expected:,} / min {min(received):,}, max {max(received):,}",
        ],
        [
            "lost events (all dashboards)",
            f"{sum(lost):,} (dashboards missing any: {sum(1 for n in lost if n > 0)})",
        ],
        [
            "events delivered per second",
            f"{fanout.events_per_s() / fanout.dashboards:.1f} per dashboard, "
            f"{fanout.events_per_s():,.0f} in all (over {fanout.delivery_s:.1f} s: first request "
            "to last event received)",
        ],
        [
            "delivery latency ('at' -> received)",
            f"p50 {latency.p50:.1f} ms, p90 {percentiles(fanout.latencies_ms())[1]:.1f} ms, "
            f"p99 {latency.p99:.1f} ms, max {latency.maximum:.1f} ms",
        ],
        [
            "server CPU per resolve",
            f"{fanout.server_cpu_ms_per_resolve():.1f} ms with the dashboards, "
            f"{fanout.baseline_cpu_ms_per_resolve():.1f} ms with none "
            f"({fanout.baseline_resolves} resolves before they connected)",
        ],
        [
            "server CPU per event frame (the difference / frames)",
            f"{fanout.fanout_cpu_us_per_frame():.0f} µs",
        ],
        ["server's context_live_events_total in the window", counters],
        [
            "CPU: server, client (bench process), machine busy",
            f"{fanout.server_cpu_s / fanout.delivery_s:.2f} cores, "
            f"{fanout.client_cpu_s / fanout.delivery_s:.2f} cores, "
            f"{fanout.machine_busy * 100:.0f} %",
        ],
    ]


def fanout_text(fanout: FanoutResult) -> str:
    config = fanout.config
    return (
        f"A real server: `{config['command']}` ({config['event loop']}, uvicorn "
        f"{config['uvicorn']}) with `REDIS_URL` set, so the Redis channel layer of production. "
        f"Route `bench-fanout` in tenant `bench`: {SOURCES} `skill_guardrails` sources (fixed "
        "texts, the server does not know the bench-only kind), so every resolve publishes "
        f"{SOURCES} events. {DASHBOARDS} dashboards connect to `ws://…/ws/metrics/` one by one "
        "(the `websockets` client, permessage-deflate as browsers negotiate it), each with "
        "`Authorization: Bearer` and an API key of the tenant that has scope `replay.read` only; "
        "the resolves use a second key with scope `resolve` (both revoked afterwards). An "
        f"`httpx` client sends `POST /api/v1/resolve` at a steady {RATE_PER_S:g} per second "
        f"(at most {IN_FLIGHT} in flight), first {fanout.baseline_resolves} with no dashboard "
        "connected (the CPU baseline), then, with the dashboards connected, a warm-up whose "
        "events are left out, then the measured window; afterwards the bench waits up to "
        "15 s for stragglers. Every event frame is parsed; delivery latency = receive time - "
        "the event's `at` (stamped by the server at publication, rounded to the ms; same "
        "clock). Lost = events every dashboard should have received (successful resolves x "
        f"{SOURCES}) - events it received. The dashboards' client runs in the bench process on "
        "the same cores as the server."
    )


def section(results: ObservabilityResults, commit: str) -> str:
    parts = [
        START,
        "## 7. Observability: the cost on the resolve path, and live fan-out",
        f"Measured {results.date} (commit {commit}) in {results.runtime_s:.0f} s by "
        "`scripts/bench_observability.py` (fan-out: `scripts/bench_fanout.py`); "
        "`BENCH_ONLY=observability make bench` refreshes this section alone. Load average at "
        f"the end of the run: {results.load_average} (2 cores, shared with whatever else runs "
        f"on the machine: every wall time here moves with it).{report.quick_note(results.quick)}",
        report.table(
            ["check", "target", "measured", "result"],
            report.check_rows(observability_checks(results)),
        ),
        f"**Skipped:** {results.skipped}." if results.skipped else "",
        "### Overhead per request, metrics + replay + live on versus off (in process)",
        overhead_text(results),
    ]
    for run in results.layers:
        parts += [
            layer_text(run, results.redis),
            report.table(OVERHEAD_HEADER, overhead_rows(run)),
        ]
    parts.append("All figures in ms.")
    redis = results.layer("redis")
    if redis is not None:
        parts.append(findings_text(redis))
    if results.fanout is not None:
        parts += [
            f"### Live fan-out to {results.fanout.dashboards} dashboards",
            fanout_text(results.fanout),
            report.table(["", ""], fanout_rows(results.fanout)),
        ]
    return report.with_figure(parts, "Observability benchmark", PLOT, END)


write_observability = report.plotted_writer(plot, section, PLOT, START, END)


def print_observability(results: ObservabilityResults) -> None:
    print()
    print("Observability benchmark summary")
    if results.skipped:
        print(f"  SKIPPED: {results.skipped}")
    for run in results.layers:
        print(f"  {run.layer} layer: listener got {run.events_received}/{run.events_expected}")
        for name in run.wall:
            p50, p90, p99 = percentiles(run.wall[name])
            line = f"    {LABELS[name]:<24} wall p50 {p50:7.2f}  p90 {p90:7.2f}  p99 {p99:7.2f}"
            if name != "off":
                d50, d90, d99 = percentiles(run.differences(name))
                cpu, half = run.mean_interval(name, "cpu")
                line += (
                    f" | minus off p50 {d50:6.2f}  p90 {d90:6.2f}  p99 {d99:6.2f}"
                    f" | CPU mean {cpu:5.2f} ± {half:.2f}"
                )
            print(line + " ms")
    fanout = results.fanout
    if fanout is not None:
        for label, value in fanout_rows(fanout):
            print(f"  fan-out, {label}: {value}")
    report.print_checks(observability_checks(results))
    print(f"  observability runtime {results.runtime_s:.0f} s, load average {results.load_average}")
