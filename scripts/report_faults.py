"""Section "faults" of docs/benchmarks.md (the replay spool's cost in resolves/s and the records a
killed worker loses, before it and now) and its plot, between two HTML comments so that
``BENCH_ONLY=faults`` can replace it in the page of an earlier run."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from scripts import report
from scripts.bench_faults import CODES, KILL_CLIENTS, SPEED_TARGET, WORKERS, FaultsResults
from scripts.bench_wrk import CONNECTIONS, WRK_THREADS
from scripts.report_wrk import ms, rate

START = "<!-- faults:start -->"
END = "<!-- faults:end -->"
PLOT = "faults.png"
COLOURS = {"before": "tab:grey", "now": "tab:green"}


def faults_checks(results: FaultsResults) -> list[report.Check]:
    checks = []
    ratios = results.ratios()
    if ratios:
        ratio = float(np.median(ratios))
        errors = sum(paired.run.failed for paired in results.paired)
        checks.append(
            report.Check(
                f"resolve (demo route), {WORKERS} workers: now beside before",
                f"≥ {SPEED_TARGET:.2f} x before (median of {len(ratios)} rounds' ratios)",
                f"{ratio:.2f} x ({' / '.join(f'{r:.2f}' for r in ratios)}), errors {errors}",
                ratio >= SPEED_TARGET and errors == 0,
            )
        )
    for code in CODES:
        kills = [kill for kill in results.kills if kill.code == code]
        if not kills:
            continue
        lost = sum(kill.lost for kill in kills)
        answered = sum(kill.answered for kill in kills)
        checks.append(
            report.Check(
                f"replay records lost, a worker SIGKILLed under load ({code})",
                "0" if code == "now" else "reported (no target)",
                f"{lost} of {answered:,} answered ({len(kills)} kills)",
                lost == 0 if code == "now" else True,
            )
        )
    return checks


def speed_rows(results: FaultsResults) -> list[list[str]]:
    return [
        [
            str(paired.round + 1),
            paired.code,
            rate(paired.run.requests_per_s),
            ms(paired.run.p50),
            ms(paired.run.p99),
            str(paired.run.failed),
            f"{paired.run.server_cpu_ms_per_request:.2f}",
        ]
        for paired in results.paired
    ]


def kill_rows(results: FaultsResults) -> list[list[str]]:
    return [
        [
            str(kill.round + 1),
            kill.code,
            f"{kill.answered:,}",
            str(kill.lost),
            str(kill.lost_after_stop),
            str(kill.failed),
        ]
        for kill in results.kills
    ]


def plot(results: FaultsResults, path: Path) -> None:
    fig, (speed, lost) = plt.subplots(1, 2, figsize=(11, 4))
    rounds = sorted({paired.round for paired in results.paired})
    for offset, code in enumerate(CODES):
        rates = {p.round: p.run.requests_per_s for p in results.paired if p.code == code}
        speed.bar(
            [r + 1 + (offset - 0.5) * 0.38 for r in rounds],
            [rates.get(r, 0.0) for r in rounds],
            width=0.38,
            color=COLOURS[code],
            label=code,
        )
    speed.set_xticks([r + 1 for r in rounds])
    speed.set_xlabel("round")
    speed.set_ylabel("resolves/s")
    speed.set_title(f"POST /api/v1/resolve, gunicorn {WORKERS} workers")
    speed.legend(loc="lower right")
    labels = [f"{kill.code}\nkill {kill.round + 1}" for kill in results.kills]
    shares = [kill.lost / kill.answered * 1000 if kill.answered else 0.0 for kill in results.kills]
    bars = lost.bar(labels, shares, color=[COLOURS[kill.code] for kill in results.kills])
    for bar, kill in zip(bars, results.kills, strict=True):
        lost.annotate(
            f"{kill.lost} of {kill.answered:,}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    lost.set_ylabel("records lost per 1,000 answered")
    lost.set_title("A worker SIGKILLed under load")
    report.save_figure(fig, path)


def section(results: FaultsResults, commit: str) -> str:
    plan = results.plan
    parts = [
        START,
        "## Faults: the replay spool's cost, and what a killed worker loses",
        f"Run {results.date} on {commit}, before = commit `{results.before}` (the code before "
        "the replay write-ahead spool, extracted with `git archive`: same virtualenv, same "
        "PostgreSQL server). Each code runs on a database of its own, migrated and given the "
        "demo (`bootstrap_demo`) by that code, since later migrations changed tables the older "
        "code reads. Both served as `make run` serves them, with uvicorn's own worker class "
        f"(gunicorn + `uvicorn_worker.UvicornWorker`, {WORKERS} workers: the older code has not "
        "the project's, so only the spool differs), the replay writer in "
        "its default background mode, each server with a `REPLAY_SPOOL_DIR` of its own. Load "
        f"average at start {results.load_average_start}, at end {results.load_average_end}; "
        f"{results.runtime_s:.0f} s (`scripts/bench_faults.py`, `BENCH_ONLY=faults`)."
        + report.quick_note(results.quick),
        report.table(
            ["check", "target", "measured", "result"], report.check_rows(faults_checks(results))
        ),
        f"**Resolves/s** (demo route, `wrk -t{WRK_THREADS} -c{CONNECTIONS} -d{plan.seconds:g}s` "
        f"after {plan.warmup_s:g} s of warm-up): both servers up at once, {plan.rounds} rounds, "
        "each loading one then the other, the first of a round alternating; the ratio of each "
        "round takes the machine's drift out.",
        report.table(
            ["round", "code", "requests/s", "p50 ms", "p99 ms", "errors", "server CPU ms/request"],
            speed_rows(results),
        ),
        f"**A worker SIGKILLed under load**: a fresh server of each code, {KILL_CLIENTS} "
        "kept-alive clients resolving, one worker SIGKILLed once the server has answered "
        f"{plan.kill_after_answers} resolves, the load going on for {plan.after_kill_s:g} s "
        "while gunicorn's arbiter starts another; every id answered 200 is "
        "then looked up among the replay records (once the replacement serves, and again after "
        "the server's clean stop). Failed calls are those the killed worker held: never "
        "answered, so nothing was acknowledged.",
        report.table(
            ["kill", "code", "answered 200", "lost", "lost after stop", "failed calls"],
            kill_rows(results),
        ),
    ]
    parts += [f"- {problem}" for problem in results.problems]
    return report.with_figure(parts, "faults: resolves/s and lost replay records", PLOT, END)


write_faults = report.plotted_writer(plot, section, PLOT, START, END)


def print_faults(results: FaultsResults) -> None:
    print()
    print("Faults (before / now)")
    for paired in results.paired:
        print(f"  round {paired.round + 1} {paired.code:<6} {paired.run.requests_per_s:8.0f} req/s")
    for kill in results.kills:
        print(f"  kill {kill.round + 1} {kill.code:<6} lost {kill.lost} of {kill.answered}")
    report.print_checks(faults_checks(results))
    for problem in results.problems:
        print(f"  problem: {problem}")
