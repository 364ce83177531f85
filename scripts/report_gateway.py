"""Section 8 of docs/benchmarks.md (the gateway beside LiteLLM's proxy) and its plot;
``BENCH_ONLY=gateway`` replaces it alone (``report.write_section``).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from scripts import report
from scripts.bench_gateway import (
    ANSWER_PIECES,
    BARE,
    CLIENTS,
    DIRECT,
    GATEWAY,
    GATEWAY_DEMO,
    GATEWAY_FAILOVER,
    LABELS,
    LITELLM,
    LITELLM_PUBLISHED_MS,
    LITELLM_VERSION,
    SESSION_CALLS,
    STATEMENT_CALLS,
    TARGET_BARE_LATENCY,
    TARGET_BARE_RPS,
    TARGET_FAILOVER_MS,
    TARGET_LITELLM_SHARE,
    TARGET_P50_MS,
    TARGET_P99_MS,
    TARGET_TTFT_MS,
    GatewayResults,
)
from scripts.bench_gateway_upstream import PIECE_GAP_S
from scripts.bench_stats import pct

START = "<!-- gateway:start -->"
END = "<!-- gateway:end -->"
PLOT = "gateway.png"
COLOURS = {
    DIRECT: "tab:grey",
    BARE: "tab:brown",
    GATEWAY: "tab:blue",
    GATEWAY_DEMO: "tab:green",
    GATEWAY_FAILOVER: "tab:purple",
    LITELLM: "tab:red",
}
VIA = (BARE, GATEWAY, GATEWAY_DEMO, GATEWAY_FAILOVER, LITELLM)


def rate_text(rate: float) -> str:
    """Requests/s: whole numbers, one decimal below 10 (a stalled server's rate is not 0)."""
    return f"{rate:.1f}" if rate < 10 else f"{rate:.0f}"


def ms(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}"


# Checks ------------------------------------------------------------------------------------------


def _litellm_missing(results: GatewayResults) -> str:
    return f"not measured: LiteLLM left out ({results.litellm_problem})"


def gateway_checks(results: GatewayResults) -> list[report.Check]:
    added = results.added("latency_ms", GATEWAY)
    ttft = results.added("ttft_ms", GATEWAY)
    p50, p99 = pct(added, 50), pct(added, 99)
    checks = [
        report.Check(
            "gateway overhead p50, route without sources (non-streaming, minus direct)",
            f"≤ {TARGET_P50_MS:g} ms",
            f"{ms(p50)} ms",
            p50 <= TARGET_P50_MS,
        ),
        report.Check(
            "gateway overhead p99, route without sources",
            f"≤ {TARGET_P99_MS:g} ms",
            f"{ms(p99)} ms",
            p99 <= TARGET_P99_MS,
        ),
    ]
    if results.has(LITELLM):
        theirs = results.added("latency_ms", LITELLM)
        checks += [
            report.Check(
                "gateway overhead p50 ≤ LiteLLM's, same run",
                f"≤ LiteLLM's p50 {ms(pct(theirs, 50))} ms (it publishes "
                f"{LITELLM_PUBLISHED_MS:g} ms)",
                f"{ms(p50)} ms",
                p50 <= pct(theirs, 50),
            ),
            report.Check(
                "gateway overhead p99 ≤ LiteLLM's, same run",
                f"≤ LiteLLM's p99 {ms(pct(theirs, 99))} ms",
                f"{ms(p99)} ms",
                p99 <= pct(theirs, 99),
            ),
        ]
    else:
        checks.append(
            report.Check(
                "gateway overhead ≤ LiteLLM's, same run",
                "≤ LiteLLM's",
                _litellm_missing(results),
                False,
            )
        )
    checks.append(
        report.Check(
            "streaming: time to first token added p50, route without sources",
            f"≤ {TARGET_TTFT_MS:g} ms",
            f"{ms(pct(ttft, 50))} ms (p99 {ms(pct(ttft, 99))} ms)",
            pct(ttft, 50) <= TARGET_TTFT_MS,
        )
    )
    ours = results.requests_per_s(GATEWAY)
    if results.has(LITELLM):
        theirs_rps = results.requests_per_s(LITELLM)
        checks.append(
            report.Check(
                f"requests/s at {CLIENTS} clients, route without sources",
                f"≥ LiteLLM's {rate_text(theirs_rps)}/s",
                f"{rate_text(ours)}/s",
                ours >= theirs_rps,
            )
        )
    else:
        checks.append(
            report.Check(
                f"requests/s at {CLIENTS} clients, route without sources",
                "≥ LiteLLM's",
                f"{ours:.0f}/s; {_litellm_missing(results)}",
                False,
            )
        )
    checks += baseline_checks(results)
    failures = {t: sum(c.values()) for t, c in results.failures.items() if c}
    load_errors = {run.target: run.failed for run in results.load if run.failed}
    logged = sum(n for line, n in results.server_log.items() if not line.startswith("WARNING"))
    problems = [f"{t}: {n} failed calls" for t, n in failures.items()]
    problems += [f"{t}: {n} load errors" for t, n in load_errors.items()]
    if logged:
        problems.append(f"{logged} errors in the gateway's log (below)")
    checks.append(
        report.Check(
            "every call answered as expected, nothing failed in the gateway",
            "no failed call, no load error, no ERROR line in the gateway's log",
            "; ".join(problems) or "none",
            not problems,
        )
    )
    return checks


def failover_cost_ms(results: GatewayResults) -> float | None:
    """What a failover adds beyond its failed attempt: per round, the failover route's call minus
    the route without sources' (both fall back to the same upstream), median, less the failed
    attempt's own time (a refused connection, measured from the bench's client)."""
    if not (results.has(GATEWAY_FAILOVER) and results.has(GATEWAY)):
        return None
    rounds = zip(results.latency_ms[GATEWAY_FAILOVER], results.latency_ms[GATEWAY], strict=True)
    paired = [failover - plain for failover, plain in rounds if None not in (failover, plain)]
    if not paired:
        return None
    return pct(paired, 50) - (results.failed_attempt_ms or 0.0)


def baseline_checks(results: GatewayResults) -> list[report.Check]:
    """The gateway beside its two baselines: LiteLLM's proxy and a bare forwarding proxy on the
    gateway's own stack, and what a failover costs."""
    checks = []
    p50 = pct(results.added("latency_ms", GATEWAY), 50)
    if results.has(LITELLM):
        theirs = pct(results.added("latency_ms", LITELLM), 50)
        checks.append(
            report.Check(
                "gateway added latency p50 as a share of LiteLLM's (fallbacks on in both)",
                f"≤ {TARGET_LITELLM_SHARE:g} x ({ms(TARGET_LITELLM_SHARE * theirs)} ms)",
                f"{ms(p50)} ms = {p50 / theirs:.2f}x LiteLLM's {ms(theirs)} ms",
                p50 <= TARGET_LITELLM_SHARE * theirs,
            )
        )
    if results.has(BARE):
        bare = pct(results.added("latency_ms", BARE), 50)
        bare_rps = results.requests_per_s(BARE)
        ours_rps = results.requests_per_s(GATEWAY)
        checks += [
            report.Check(
                "gateway added latency p50 beside the bare proxy's (uvicorn + aiohttp)",
                f"≤ {TARGET_BARE_LATENCY:g} x ({ms(TARGET_BARE_LATENCY * bare)} ms)",
                f"{ms(p50)} ms = {p50 / bare:.1f}x the bare proxy's {ms(bare)} ms"
                if bare > 0
                else f"{ms(p50)} ms (the bare proxy's: {ms(bare)} ms)",
                p50 <= TARGET_BARE_LATENCY * bare,
            ),
            report.Check(
                f"gateway requests/s at {CLIENTS} clients beside the bare proxy's",
                f"≥ {TARGET_BARE_RPS:g} x ({rate_text(TARGET_BARE_RPS * bare_rps)}/s)",
                f"{rate_text(ours_rps)}/s = {ours_rps / bare_rps:.2f}x {rate_text(bare_rps)}/s",
                ours_rps >= TARGET_BARE_RPS * bare_rps,
            ),
        ]
    cost = failover_cost_ms(results)
    if cost is not None:
        checks.append(
            report.Check(
                "a failover to the second deployment, beyond the failed attempt (p50)",
                f"≤ {TARGET_FAILOVER_MS:g} ms",
                f"{ms(cost)} ms (failed attempt: a refused connection, "
                f"{ms(results.failed_attempt_ms)} ms)",
                cost <= TARGET_FAILOVER_MS,
            )
        )
    return checks


# Plot --------------------------------------------------------------------------------------------


def plot_ecdf(ax: plt.Axes, results: GatewayResults, measure: str, title: str) -> None:
    everything: list[float] = []
    for target in results.targets:
        samples = results.samples(measure, target)
        everything += samples
        report.ecdf(ax, samples, LABELS[target])
        ax.get_lines()[-1].set_color(COLOURS[target])
    ax.axhline(0.5, color="grey", linewidth=0.5)
    ax.axhline(0.99, color="grey", linewidth=0.5)
    if everything:
        ax.set_xlim(0, pct(everything, 99.5) * 1.05)
    report.label_axes(ax, "ms (client-side, loopback)", "fraction of requests", title, fontsize=7)


def plot_added(ax: plt.Axes, results: GatewayResults) -> None:
    """p50 and p99 of the paired differences over direct, non-streaming and TTFT."""
    via = [t for t in VIA if results.has(t)]
    rows = [("latency_ms", "non-streaming"), ("ttft_ms", "TTFT")]
    width = 0.8 / (2 * len(rows))
    x = np.arange(len(via))
    for index, (measure, name) in enumerate(rows):
        for quantile_index, q in enumerate((50, 99)):
            values = [pct(results.added(measure, t), q) for t in via]
            offset = (index * 2 + quantile_index - (2 * len(rows) - 1) / 2) * width
            bars = ax.bar(
                x + offset,
                values,
                width,
                label=f"{name} p{q}",
                color=["tab:blue", "tab:cyan", "tab:orange", "tab:olive"][
                    index * 2 + quantile_index
                ],
            )
            ax.bar_label(bars, fmt="%.1f", fontsize=6, padding=1)
    ax.axhline(
        TARGET_P50_MS, color="tab:green", linestyle="--", linewidth=1, label=f"{TARGET_P50_MS:g} ms"
    )
    ax.axhline(
        TARGET_P99_MS, color="tab:red", linestyle="--", linewidth=1, label=f"{TARGET_P99_MS:g} ms"
    )
    ax.set_xticks(x, [LABELS[t].replace(", ", ",\n") for t in via], fontsize=7)
    ax.set_ylabel("ms added over direct (same round)")
    ax.set_title("Overhead over calling the upstream directly")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3, axis="y")


def plot_rps(ax: plt.Axes, results: GatewayResults) -> None:
    shown = [t for t in results.targets if results.load_of(t)]
    if not shown:
        ax.text(0.5, 0.5, "load not measured", ha="center", va="center")
        ax.set_axis_off()
        return
    rates = [results.requests_per_s(t) for t in shown]
    bars = ax.bar(
        [LABELS[t].replace(", ", ",\n") for t in shown],
        rates,
        color=[COLOURS[t] for t in shown],
    )
    ax.bar_label(
        bars,
        labels=[rate_text(rate) if rate > 0 else "0: none finished" for rate in rates],
        fontsize=7,
    )
    ax.set_yscale("log")
    ax.tick_params(axis="x", labelsize=7)
    ax.set_ylabel("requests/s (log scale)")
    ax.set_title(f"Throughput, {CLIENTS} concurrent clients, non-streaming")
    ax.grid(alpha=0.3, axis="y", which="both")


def plot(results: GatewayResults, path: Path) -> None:
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    plot_ecdf(axes[0][0], results, "latency_ms", "Non-streaming latency")
    plot_ecdf(axes[0][1], results, "ttft_ms", "Streaming: time to first token")
    plot_added(axes[1][0], results)
    plot_rps(axes[1][1], results)
    report.save_figure(fig, path)


# Markdown ----------------------------------------------------------------------------------------


def latency_rows(results: GatewayResults) -> list[list[str]]:
    rows = []
    for target in results.targets:
        samples = results.samples("latency_ms", target)
        row = [LABELS[target], str(len(samples)), ms(pct(samples, 50)), ms(pct(samples, 90))]
        row.append(ms(pct(samples, 99)))
        if target == DIRECT:
            row += ["-", "-", "-", "-"]
        else:
            added = results.added("latency_ms", target)
            row += [
                ms(pct(added, 50)),
                ms(pct(added, 90)),
                ms(pct(added, 99)),
                ms(pct(samples, 50) - pct(results.samples("latency_ms", DIRECT), 50)),
            ]
        rows.append(row)
    return rows


LATENCY_HEADER = [
    "target",
    "n",
    "latency p50",
    "p90",
    "p99",
    "added over direct: p50",
    "p90",
    "p99",
    "p50 - direct p50",
]


def stream_rows(results: GatewayResults) -> list[list[str]]:
    rows = []
    for target in results.targets:
        ttft = results.samples("ttft_ms", target)
        whole = results.samples("stream_ms", target)
        row = [LABELS[target], str(len(ttft)), ms(pct(ttft, 50)), ms(pct(ttft, 99))]
        if target == DIRECT:
            row += ["-", "-"]
        else:
            added = results.added("ttft_ms", target)
            row += [ms(pct(added, 50)), ms(pct(added, 99))]
        row += [ms(pct(whole, 50)), ms(pct(whole, 99))]
        rows.append(row)
    return rows


STREAM_HEADER = [
    "target",
    "n",
    "TTFT p50",
    "p99",
    "TTFT added over direct: p50",
    "p99",
    "whole stream p50",
    "p99",
]


def load_rows(results: GatewayResults) -> list[list[str]]:
    rows = []
    for target in results.targets:
        runs = results.load_of(target)
        if not runs:
            continue
        errors: dict[str, int] = {}
        for run in runs:
            for kind, count in run.errors.items():
                errors[kind] = errors.get(kind, 0) + count
        database = results.cpu_ms_per_request(target, database=True)
        rows.append(
            [
                LABELS[target],
                str(sum(run.requests for run in runs)),
                f"{sum(run.seconds for run in runs):.1f}",
                rate_text(results.requests_per_s(target)),
                " / ".join(rate_text(run.ok / run.seconds) for run in runs),
                " / ".join(f"{run.p50_ms:.1f}" if run.requests else "-" for run in runs),
                " / ".join(f"{run.p99_ms:.1f}" if run.requests else "-" for run in runs),
                ", ".join(f"{k} {v}" for k, v in errors.items()) or "0",
                ms(results.cpu_ms_per_request(target)),
                "-" if database is None or target in (DIRECT, LITELLM) else ms(database),
            ]
        )
    return rows


LOAD_HEADER = [
    "target",
    "requests",
    "seconds",
    "requests/s",
    "per round",
    "latency p50 ms (per round)",
    "p99 ms",
    "errors",
    "server CPU ms / request",
    "PostgreSQL CPU ms / request",
]


def setup_text(results: GatewayResults) -> str:
    sizes = results.sizes
    return (
        "One upstream model on loopback (`scripts/bench_gateway_upstream.py`, its own process: "
        "plain asyncio, HTTP/1.1 keep-alive) answers OpenAI Chat Completions with a fixed "
        f"answer of {len(ANSWER_PIECES)} pieces and usage; with `stream: true` it sends the "
        "first piece with the role at once, the others "
        f"{PIECE_GAP_S * 1000:g} ms apart, the finish chunk, the usage chunk when "
        "`stream_options.include_usage` asks for it, then `[DONE]`. It is called six ways: "
        "**direct**; through a **bare forwarding proxy** on the gateway's own stack "
        "(`scripts/bench_bare_proxy.py`: uvicorn with httptools and uvloop, one aiohttp client "
        "session, nothing else: no key, no route, no record), the floor any Python gateway on "
        "this stack stands on; through the **gateway** (`POST /v1/chat/completions`, uvicorn with "
        "one worker as `make run` serves it, the platform's API key as `Authorization: Bearer`, "
        "scope `resolve`) on route `bench-gateway-bare` (no sources) and on "
        "`bench-gateway-demo`, a copy of the demo's `support` route (guardrails, the profile and "
        "history of user `u_123`, documents of `support-kb`; a new session "
        f"`s_bench_gateway-N` every {SESSION_CALLS} calls, so the history it reads stays the "
        f"length of a conversation, at most {2 * SESSION_CALLS} messages, the load runs "
        "included), both forwarding to `[bench-gateway-upstream, bench-gateway-fallback]` "
        "(fallbacks on: the same upstream under a second deployment name); on "
        "`bench-gateway-failover`, whose first deployment points at a port nothing listens on "
        "(the gateway runs with `GATEWAY_FALLBACK_COOLDOWN_S=0`, so every call of that route "
        "fails over instead of leaving the dead deployment out for a while); and through "
        f"**LiteLLM's proxy** {LITELLM_VERSION} (model list `bench-model` with "
        "`bench-model-fallback` as its fallback, both `openai/bench-model`, "
        "`api_base` the upstream). Every target gets the same body (the demo question, "
        "`max_tokens` 64) and every answer is checked (its text, every stream piece). "
        f"{sizes.rounds} measured rounds after {sizes.warmup} warm-up rounds, one "
        "`httpx.Client` (keep-alive) per target in the bench process: in every round each "
        "target is called once non-streaming, then once streaming, each time in a fresh random "
        "order (seeded), so drift and the machine's other load fall on all of them alike. "
        "*Added over direct* is a call's time minus the direct call's of the same round (paired), "
        "the figure checked against the targets; *TTFT* is the time from sending the request to "
        "the first content delta. Then requests/s at "
        f"{CLIENTS} concurrent clients: {results.load_tool}, {sizes.load_rounds} round(s) of "
        f"{sizes.load_seconds:g} s per target, targets in a fresh random order per round; "
        "*server CPU* is the CPU the serving process (upstream, bare proxy, uvicorn, LiteLLM) spent per "
        "answered request, PostgreSQL's counted apart. Client, servers, PostgreSQL and the "
        "upstream share the machine's 2 cores. What the bench adds to the demo tenant (the "
        "deployments, the routes, its API key, the session and the replay records) is "
        "removed afterwards." + key_limits_text(results)
    )


def key_limits_text(results: GatewayResults) -> str:
    if not results.key_limits:
        return (
            " The gateway's key has no rate limit or budget of its own in this run; LiteLLM runs "
            "with its master key (its virtual keys need its database, whose engines download at "
            "run time)."
        )
    shown = ", ".join(f"`{name}` {value}" for name, value in results.key_limits.items())
    return (
        f" The gateway's key carries limits and a budget, checked on every call: {shown} (set "
        "high enough that no call is refused: what is measured is their cost). LiteLLM runs with "
        "its master key: its virtual keys, which carry its limits and budgets, need its "
        "database, whose engines download at run time."
    )


def statements_text(results: GatewayResults) -> str:
    return (
        f"What the server's own counters (`django_db_execute_total` and "
        f"`django_db_execute_many_total` of `/metrics`) went up by over {STATEMENT_CALLS} "
        "sequential calls of each kind, divided by the calls: every statement of the call, the "
        "replay writer's insert and the turn's completion included; django-tenants' `SET "
        "search_path` before them and `BEGIN` / `COMMIT` are not counted there."
    )


def section(results: GatewayResults, commit: str) -> str:
    parts = [
        START,
        "## 8. Gateway: overhead over the upstream, beside LiteLLM's proxy",
        f"Measured {results.date} (commit {commit}) in {results.runtime_s:.0f} s by "
        "`scripts/bench_gateway.py`; `BENCH_ONLY=gateway make bench` refreshes this section "
        f"alone. Load average at the end of the run: {results.load_average} (2 cores, shared "
        f"with whatever else runs on the machine).{report.quick_note(results.quick)}",
        report.table(
            ["check", "target", "measured", "result"], report.check_rows(gateway_checks(results))
        ),
        f"**LiteLLM left out:** {results.litellm_problem}; the platform's figures are shown alone."
        if results.litellm_problem
        else "",
        setup_text(results),
        "### Non-streaming latency (ms)",
        report.table(LATENCY_HEADER, latency_rows(results)),
        "### Streaming: time to first token (ms)",
        report.table(STREAM_HEADER, stream_rows(results)),
        "### SQL statements per gateway call",
        statements_text(results),
        report.table(
            ["target", "non-streaming", "streaming"],
            [
                [
                    LABELS[t],
                    *(f"{counts.get(k, math.nan):.1f}" for k in ("non-streaming", "streaming")),
                ]
                for t, counts in results.statements.items()
            ],
        )
        if results.statements
        else "",
        f"### Requests/s at {CLIENTS} concurrent clients (non-streaming)",
        report.table(LOAD_HEADER, load_rows(results)),
        "The gateway's log lines at WARNING and above during the run (ids masked):"
        if results.server_log
        else "",
        report.table(
            ["count", "line"],
            [[str(n), line.replace("|", "\\|")] for line, n in results.server_log.items()],
        )
        if results.server_log
        else "",
        "Gateway server:",
        report.table(["", ""], [[k, v] for k, v in results.config.items()]),
    ]
    if results.litellm_settings:
        parts += [
            "LiteLLM's proxy:",
            report.table(["", ""], [[k, v] for k, v in results.litellm_settings.items()]),
        ]
    return report.with_figure(parts, "Gateway benchmark", PLOT, END)


write_gateway = report.plotted_writer(plot, section, PLOT, START, END)


def print_gateway(results: GatewayResults) -> None:
    print()
    print("Gateway benchmark summary")
    if results.litellm_problem:
        print(f"  LiteLLM left out: {results.litellm_problem}")
    for row in latency_rows(results):
        print(
            f"  non-streaming {row[0]:<34} p50 {row[2]:>7}  p99 {row[4]:>7} | added p50 "
            f"{row[5]:>6}  p99 {row[7]:>6} ms"
        )
    for row in stream_rows(results):
        print(
            f"  TTFT          {row[0]:<34} p50 {row[2]:>7}  p99 {row[3]:>7} | added p50 "
            f"{row[4]:>6}  p99 {row[5]:>6} ms"
        )
    for target, counts in results.statements.items():
        shown = ", ".join(f"{kind} {count:.1f}" for kind, count in counts.items())
        print(f"  SQL statements per call, {LABELS[target]}: {shown}")
    for row in load_rows(results):
        print(
            f"  load          {row[0]:<34} {row[3]:>6} req/s, errors {row[7]}, server CPU "
            f"{row[8]} ms/request"
        )
    report.print_checks(gateway_checks(results))
    for line, count in results.server_log.items():
        print(f"  gateway log: {count} x {line}")
    for name, path in results.profiles.items():
        print(f"  profile of the gateway ({name}): {path}")
    print(f"  gateway runtime {results.runtime_s:.0f} s, load average {results.load_average}")
