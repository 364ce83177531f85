"""Section "http_path" of docs/benchmarks.md (the HTTP path under wrk, the servers side by side)
and its plot; ``BENCH_ONLY=http_path`` replaces it alone (``report.write_section``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from scripts import report
from scripts.bench_stats import median
from scripts.bench_wrk import (
    BARE,
    CONNECTIONS,
    FLAT_DELAY_MS,
    GATEWAY,
    GATEWAY_RPS,
    HEALTHZ,
    HEALTHZ_OF_BARE,
    HEALTHZ_PER_WORKER,
    PERCENTILES,
    REDIS_NO_SLOWER,
    RESOLVE,
    RESOLVE_2_WORKERS,
    RESOLVE_P99_MS,
    SERVERS,
    TARGET_LABELS,
    UVICORN_H11,
    HttpPathResults,
    WrkRun,
)

START = "<!-- http_path:start -->"
END = "<!-- http_path:end -->"
PLOT = "http_path.png"
TARGETS = (BARE, HEALTHZ, RESOLVE, GATEWAY)
COLOURS = {BARE: "tab:grey", HEALTHZ: "tab:blue", RESOLVE: "tab:green", GATEWAY: "tab:orange"}


def rate(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:,.1f}" if value < 10 else f"{value:,.0f}"


def ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1f}"


def bare_of(results: HttpPathResults, run: WrkRun) -> WrkRun | None:
    """The bare app's run on the same server with the same workers: the limit beside ``run``."""
    return results.find(run.server, run.workers, BARE)


def share_of_bare(results: HttpPathResults, run: WrkRun) -> float | None:
    bare = bare_of(results, run)
    if bare is None or not bare.requests_per_s:
        return None
    return run.requests_per_s / bare.requests_per_s


def cpu_split(run: WrkRun) -> str:
    total = sum(run.worker_cpu_s)
    if len(run.worker_cpu_s) < 2 or total <= 0:
        return "-"
    return " / ".join(f"{seconds / total * 100:.0f} %" for seconds in run.worker_cpu_s)


def errors_text(run: WrkRun) -> str:
    return ", ".join(f"{kind} {count}" for kind, count in run.errors.items()) or "0"


# Checks ------------------------------------------------------------------------------------------


def resolve_runs(results: HttpPathResults, *, redis: bool) -> list[WrkRun]:
    """Every run of the resolve on the production server at 2 workers: the plan's own and the
    paired rounds'."""
    return [
        run
        for run in [*results.runs, *results.paired]
        if (run.server, run.workers, run.target, run.redis)
        == (results.production, 2, RESOLVE, redis)
    ]


def runs_shown(runs: list[WrkRun], figure: Callable[[WrkRun], str]) -> str:
    if len(runs) == 1:
        return "one run"
    return f"median of {len(runs)} runs: " + " / ".join(figure(run) for run in runs)


def paired_rows(results: HttpPathResults) -> list[list[str]]:
    return [
        [
            str((run.paired_round or 0) + 1),
            "yes" if run.redis else "no",
            rate(run.requests_per_s),
            ms(run.p50),
            ms(run.p99),
            str(run.failed),
            f"{run.server_cpu_s / run.seconds:.2f}" if run.seconds else "-",
            f"{run.server_cpu_ms_per_request:.2f}" if run.requests else "-",
            f"{run.load_average[0]:.2f}" if run.load_average else "-",
        ]
        for run in results.paired
    ]


def round_by_round(plain: list[WrkRun], with_redis: list[WrkRun]) -> str:
    """Each round's Redis run beside the embedded run of the same round: the machine's drift
    between rounds falls out of these ratios, and the server's CPU per request does not depend on
    how wrk's connections split between the workers."""
    embedded = {run.paired_round: run for run in plain}
    pairs = [
        (embedded[run.paired_round], run)
        for run in with_redis
        if run.paired_round in embedded
        and embedded[run.paired_round].requests_per_s
        and embedded[run.paired_round].server_cpu_s
        and run.requests
    ]
    if not pairs:
        return "no round to compare"
    throughput = median([b.requests_per_s / a.requests_per_s for a, b in pairs])
    cpu = median([b.server_cpu_ms_per_request / a.server_cpu_ms_per_request for a, b in pairs])
    return (
        f"round by round, median: {throughput:.2f} x the requests/s, "
        f"{cpu:.2f} x the server CPU per request"
    )


def http_path_checks(results: HttpPathResults) -> list[report.Check]:
    prod = results.production
    checks: list[report.Check] = []

    def missing(name: str, target: str) -> None:
        checks.append(report.Check(name, target, "not measured in this run", False))

    for workers in (1, 2):
        healthz = results.find(prod, workers, HEALTHZ)
        bare = results.find(prod, workers, BARE)
        if healthz is None or bare is None:
            missing(f"/healthz, {workers} worker(s)", f"≥ {HEALTHZ_PER_WORKER:,.0f}/s per worker")
            continue
        per_worker = healthz.requests_per_s / workers
        share = healthz.requests_per_s / bare.requests_per_s if bare.requests_per_s else 0.0
        checks.append(
            report.Check(
                f"/healthz per worker, {workers} worker(s)",
                f"≥ {HEALTHZ_PER_WORKER:,.0f} requests/s per worker",
                f"{rate(per_worker)}/s ({rate(healthz.requests_per_s)}/s in all)",
                per_worker >= HEALTHZ_PER_WORKER,
            )
        )
        checks.append(
            report.Check(
                f"/healthz beside the bare ASGI app, {workers} worker(s)",
                f"≥ {HEALTHZ_OF_BARE:g} x bare ({rate(bare.requests_per_s)}/s, same run)",
                f"{share:.3f} x",
                share >= HEALTHZ_OF_BARE,
            )
        )
    plain = resolve_runs(results, redis=False)
    if not plain:
        missing("resolve, 2 workers", f"≥ {RESOLVE_2_WORKERS:g}/s")
    else:
        throughput = median([run.requests_per_s for run in plain])
        p99 = median([run.p99 for run in plain])
        checks += [
            report.Check(
                f"resolve (demo route), 2 workers, {CONNECTIONS} connections",
                f"≥ {RESOLVE_2_WORKERS:g} requests/s",
                f"{rate(throughput)}/s ({runs_shown(plain, lambda r: rate(r.requests_per_s))})",
                throughput >= RESOLVE_2_WORKERS,
            ),
            report.Check(
                "resolve p99, 2 workers",
                f"≤ {RESOLVE_P99_MS:g} ms",
                f"{ms(p99)} ms (p50 {ms(median([run.p50 for run in plain]))} ms; "
                f"{runs_shown(plain, lambda r: ms(r.p99))})",
                p99 <= RESOLVE_P99_MS,
            ),
        ]
    resolves = [
        run
        for run in [*results.runs, *results.paired]
        if run.server == prod and run.target == RESOLVE
    ]
    if resolves:
        failed = sum(run.failed for run in resolves)
        checks.append(
            report.Check(
                "resolve errors (non-2xx, socket), every run of the production server",
                "0",
                str(failed),
                failed == 0,
            )
        )
    paired_plain = [run for run in results.paired if not run.redis]
    paired_redis = [run for run in results.paired if run.redis]
    if paired_plain and paired_redis:
        without, with_ = (
            median([r.requests_per_s for r in runs]) for runs in (paired_plain, paired_redis)
        )
        ratio = with_ / without if without else 0.0
        failed = sum(run.failed for run in paired_redis)
        checks.append(
            report.Check(
                "resolve with REDIS_URL, 2 workers",
                f"no slower than without (≥ {REDIS_NO_SLOWER:g} x {rate(without)}/s, median of "
                f"{len(paired_plain)} rounds alternating with it)",
                f"{rate(with_)}/s ({ratio:.2f} x), p99 "
                f"{ms(median([r.p99 for r in paired_redis]))} ms, errors {failed}; "
                + round_by_round(paired_plain, paired_redis),
                ratio >= REDIS_NO_SLOWER and failed == 0,
            )
        )
    else:
        missing("resolve with REDIS_URL, 2 workers", "no slower than without")
    gateway = results.find(prod, 2, GATEWAY)
    if gateway is None:
        missing("gateway, route without sources, 2 workers", f"≥ {GATEWAY_RPS:g}/s")
    else:
        checks.append(
            report.Check(
                "gateway, route without sources, loopback upstream, 2 workers",
                f"≥ {GATEWAY_RPS:g} requests/s",
                f"{rate(gateway.requests_per_s)}/s, p99 {ms(gateway.p99)} ms, errors "
                f"{gateway.failed}",
                gateway.requests_per_s >= GATEWAY_RPS,
            )
        )
    several = [run for run in results.runs if run.server == prod and run.workers > 1]
    bare_2 = results.find(prod, 2, BARE)
    if bare_2 is not None:
        checks.append(
            report.Check(
                "several processes without the flat 44 ms (bare app, 2 workers, p50)",
                f"< {FLAT_DELAY_MS:g} ms",
                f"{ms(bare_2.p50)} ms ({rate(bare_2.requests_per_s)}/s)",
                bare_2.p50 < FLAT_DELAY_MS,
            )
        )
    elif several:
        missing("several processes without the flat 44 ms", f"< {FLAT_DELAY_MS:g} ms")
    return checks


# Plot --------------------------------------------------------------------------------------------


def groups(results: HttpPathResults) -> list[tuple[str, int, bool]]:
    """(server, workers, redis) in the order the tables show them."""
    seen: dict[tuple[str, int, bool], None] = {}
    order = [results.production, *[name for name in SERVERS if name != results.production]]
    for server in order:
        for workers in (1, 2):
            for redis in (False, True):
                if any(
                    (r.server, r.workers, r.redis) == (server, workers, redis) for r in results.runs
                ):
                    seen[(server, workers, redis)] = None
    return list(seen)


def group_label(server: str, workers: int, redis: bool) -> str:
    return f"{server}\n{workers}w{' +Redis' if redis else ''}"


def plot(results: HttpPathResults, path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.8), gridspec_kw={"width_ratios": [3, 2]})
    keys = groups(results)
    width = 0.8 / len(TARGETS)
    for index, target in enumerate(TARGETS):
        xs, heights = [], []
        for position, (server, workers, redis) in enumerate(keys):
            run = results.find(server, workers, target, redis)
            if run is not None:
                xs.append(position + (index - (len(TARGETS) - 1) / 2) * width)
                heights.append(max(run.requests_per_s, 0.1))
        if xs:
            left.bar(xs, heights, width, label=TARGET_LABELS[target], color=COLOURS[target])
    left.set_yscale("log")
    left.set_xticks(range(len(keys)), [group_label(*key) for key in keys], fontsize=7)
    left.set_ylabel("requests/s (log)")
    left.set_title(f"wrk, {CONNECTIONS} connections: each server beside its bare-ASGI limit")
    left.axhline(
        RESOLVE_2_WORKERS,
        color="tab:green",
        linestyle=":",
        linewidth=1,
        label=f"target: resolve {RESOLVE_2_WORKERS:g}/s (2 workers)",
    )
    left.axhline(
        HEALTHZ_PER_WORKER,
        color="tab:blue",
        linestyle=":",
        linewidth=1,
        label=f"target: /healthz {HEALTHZ_PER_WORKER:,.0f}/s per worker",
    )
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=7)
    left.grid(alpha=0.3, axis="y")
    quantiles = np.asarray(PERCENTILES, dtype=float) / 100
    for target in TARGETS:
        run = results.find(results.production, 2, target)
        if run is not None:
            latencies = [run.percentile(q) for q in PERCENTILES]
            right.step(
                latencies,
                quantiles,
                where="post",
                color=COLOURS[target],
                label=f"{results.production} 2w, {target}",
            )
    flat = results.find(UVICORN_H11.name, 2, BARE)
    if flat is not None:
        right.step(
            [flat.percentile(q) for q in PERCENTILES],
            quantiles,
            where="post",
            color="tab:red",
            linestyle="--",
            label=f"{UVICORN_H11.name} 2w, bare",
        )
    right.set_xscale("log")
    report.label_axes(
        right, "latency (ms, log)", "fraction of requests", "latency, 2 workers", fontsize=7
    )
    report.save_figure(fig, path)


# Markdown ----------------------------------------------------------------------------------------


def target_rows(results: HttpPathResults, target: str) -> list[list[str]]:
    rows = []
    for server, workers, redis in groups(results):
        run = results.find(server, workers, target, redis)
        if run is None:
            continue
        bare = bare_of(results, run)
        share = share_of_bare(results, run)
        rows.append(
            [
                ("**" + server + "**") if server == results.production else server,
                str(workers),
                "yes" if redis else "no",
                rate(run.requests_per_s),
                "limit"
                if target == BARE
                else (
                    f"{rate(bare.requests_per_s)} ({share:.3f} x)"
                    if bare is not None and share is not None
                    else "n/a"
                ),
                ms(run.p50),
                ms(run.percentile(90)),
                ms(run.p99),
                errors_text(run),
                f"{run.server_cpu_s / run.seconds:.2f}" if run.seconds else "n/a",
                cpu_split(run),
                " / ".join(str(n) for n in run.connections) or "-",
                f"{run.load_average[0]:.2f}",
            ]
        )
    return rows


ROW_HEADER = [
    "server",
    "workers",
    "Redis",
    "requests/s",
    "bare app, same server (ratio)",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "errors",
    "server cores",
    "CPU per worker",
    "connections per worker",
    "load avg (1 min)",
]


def server_rows(results: HttpPathResults) -> list[list[str]]:
    return [
        [
            ("**" + name + "**") if name == results.production else name,
            info["label"],
            f"`{info['command']}`",
            info["versions"],
        ]
        for name, info in results.servers.items()
    ]


def flat_delay_text(results: HttpPathResults) -> str:
    one = results.find(UVICORN_H11.name, 1, BARE)
    two = results.find(UVICORN_H11.name, 2, BARE)
    measured = ""
    if one is not None and two is not None:
        measured = (
            f" In this run: uvicorn on h11/asyncio served the bare app at {rate(one.requests_per_s)}"
            f"/s (p50 {ms(one.p50)} ms) with one process and {rate(two.requests_per_s)}/s "
            f"(p50 {ms(two.p50)} ms, p99 {ms(two.p99)} ms) with `--workers 2`."
        )
    return (
        "**The flat 44 ms of `uvicorn --workers N`.**"
        + measured
        + " With several workers uvicorn binds the listening socket itself (`Config.bind_socket`:"
        " `socket.socket(family=AF_INET)`, protocol number 0) and hands it to the spawned workers;"
        " asyncio sets `TCP_NODELAY` on an accepted socket only when its `proto` is"
        " `IPPROTO_TCP` (`asyncio.base_events._set_nodelay`), and an accepted socket inherits"
        " the listener's 0, so none is set (strace of a worker: no `setsockopt(TCP_NODELAY)`"
        " after `accept4`, where the one-process server, whose socket asyncio made from"
        " `getaddrinfo`, sets it on every connection). Each response goes out in two writes"
        " (the head, then the body, as Django's ASGI handler and the bare app send two"
        " messages): Nagle's algorithm holds the small body until the head is acknowledged, and"
        " the client delays that ACK (Linux's delayed-ACK minimum, 40 ms): one request per"
        " connection every ~44 ms, whatever the app (32 connections: ~720/s). uvloop sets"
        " `TCP_NODELAY` on every TCP transport itself and gunicorn on its listening socket"
        " (which accepted sockets inherit on Linux), so neither pays it; h11/asyncio under"
        " uvicorn's multi-process supervisor does."
    )


def choice_text(results: HttpPathResults) -> str:
    prod = results.production
    parts = []
    for name in SERVERS:
        cells = []
        for workers in (1, 2):
            for target in (BARE, HEALTHZ, RESOLVE):
                run = results.find(name, workers, target)
                if run is not None:
                    cells.append(f"{target} {workers}w {rate(run.requests_per_s)}/s")
        if cells:
            parts.append(f"{name}: " + ", ".join(cells))
    listing = "; ".join(parts)
    return (
        f"**The server `make run` starts: {prod}** ({SERVERS[prod].label}; `WEB_CONCURRENCY`"
        " workers, default 1). Side by side in this run: "
        + listing
        + ". gunicorn's workers run uvicorn's own protocol code (httptools, uvloop), so each"
        " does what uvicorn does, within the machine's noise on every target; its listening"
        " socket carries `TCP_NODELAY`, which accepted sockets inherit, so several workers never"
        " pay the flat 44 ms below, whatever loop and parser a worker uses (gunicorn with"
        " `uvicorn_worker.UvicornH11Worker`, h11 on asyncio, 2 workers: 0.46 ms p50 on one"
        " connection, by hand), and its arbiter restarts a worker that dies and drains the"
        " others on SIGTERM. granian serves the bare app and /healthz faster (its HTTP is"
        " Rust's, leaving the interpreter more of the CPU), not the resolve, the figure the"
        " targets turn on; and a granian worker with resolves in flight ignored SIGTERM for over"
        " 30 s (twice, by hand: its loop stops while a request's thread still waits on it; the"
        " bench kills it after 20 s), so a deploy would hang on it or lose the replay records"
        " its writer still held."
    )


def section(results: HttpPathResults, commit: str) -> str:
    checks = http_path_checks(results)
    intro = (
        f"Measured {results.date} on `{commit}` in {results.runtime_s:.0f} s: "
        f"{results.load_tool}, after {results.warmup_s:g} s of the same load per target "
        f"(discarded); {results.machine}. Load average (1 / 5 / 15 min) "
        f"{results.load_average_start} before the section, {results.load_average_end} after it "
        "(each run's 1-minute value is in its row): the machine is shared, so compare figures "
        "within this run. Every figure stands beside the bare ASGI app (`scripts/bare_asgi.py`) "
        "served by the same server with the same flags and workers. Several workers run with an "
        "emptied `PROMETHEUS_MULTIPROC_DIR` (as `make run`); Redis runs: "
        f"`REDIS_URL={results.redis or 'n/a'}` (the cache, the channel layer and the rate-limit "
        "counters in Redis). `GET /healthz` is answered in front of Django "
        "(`contextplatform.asgi.Liveness`); the stack in front of the views, which the probe "
        "measured before, has its own row in the request path profile section."
        + report.quick_note(results.quick)
    )
    parts = [
        START,
        "## HTTP path under wrk: servers, /healthz, resolve, gateway",
        "`scripts/bench_wrk.py`, `BENCH_ONLY=http_path make bench`.",
        intro,
        report.table(
            ["check (production server)", "target", "measured", "result"], report.check_rows(checks)
        ),
    ]
    if results.problems:
        parts.append("Left out of this run: " + "; ".join(f"{p}" for p in results.problems) + ".")
    for target in TARGETS:
        rows = target_rows(results, target)
        if rows:
            parts += [f"### {TARGET_LABELS[target]}", report.table(ROW_HEADER, rows)]
    if results.paired:
        parts += [
            "### resolve without and with REDIS_URL, alternating rounds",
            "Both production servers (2 workers each) up side by side, loaded in turn, the first "
            "of each round alternating, so that the machine's drift falls on both alike; the "
            "checks above compare the medians, and the resolve's own targets take the median of "
            "every embedded run of it (the table above and these rounds).",
            report.table(
                [
                    "round",
                    "Redis",
                    "requests/s",
                    "p50 ms",
                    "p99 ms",
                    "errors",
                    "server cores",
                    "server CPU ms / request",
                    "load avg (1 min)",
                ],
                paired_rows(results),
            ),
        ]
    parts += [
        "### The servers",
        report.table(["server", "", "command", "versions"], server_rows(results)),
        choice_text(results),
        flat_delay_text(results),
    ]
    return report.with_figure(
        parts, "requests/s per server and target; latency at 2 workers", PLOT, END
    )


write_http_path = report.plotted_writer(plot, section, PLOT, START, END)


def print_http_path(results: HttpPathResults) -> None:
    print()
    print("HTTP path (wrk) summary")
    for problem in results.problems:
        print(f"  left out: {problem}")
    for run in results.runs:
        share = share_of_bare(results, run)
        print(
            f"  {run.server:<12} {run.workers}w {'redis' if run.redis else '     '} "
            f"{run.target:<8} {rate(run.requests_per_s):>7}/s  p50 {ms(run.p50):>7}  "
            f"p99 {ms(run.p99):>7} ms  errors {run.failed:<4} "
            f"{'' if share is None or run.target == BARE else f'{share:.3f} x bare'}"
        )
    report.print_checks(http_path_checks(results))
    print(f"  load average {results.load_average_start} → {results.load_average_end}")
