"""Section "request_profile" of docs/benchmarks.md: where a request's time goes, before and now."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from scripts import report
from scripts.bench_profile import (
    COMPONENTS,
    LOAD_S,
    OTHER,
    RATE,
    SAMPLE_S,
    TARGETS,
    ProfileResults,
)

START = "<!-- request_profile:start -->"
END = "<!-- request_profile:end -->"
PLOT = "request_profile.png"
NAMES = [name for name, _ in COMPONENTS] + [OTHER]
LABELS = {
    "healthz": "GET /healthz",
    "stack": "GET /api/v1/no-such-endpoint with a key (middleware, key, Django's 404)",
    "resolve": "POST /api/v1/resolve (demo route)",
    "gateway": "POST /v1/chat/completions (route without sources)",
}


def label(target: str) -> str:
    return LABELS.get(target, target)


def rows(results: ProfileResults, target: str) -> list[list[str]]:
    before, now = results.run("before", target), results.run("now", target)
    if before is None or now is None:
        return []
    out = [
        ["requests/s", f"{before.requests_per_s:,.0f}", f"{now.requests_per_s:,.0f}"],
        ["p99", f"{before.p99_ms:,.0f} ms", f"{now.p99_ms:,.0f} ms"],
        ["errors", str(before.errors), str(now.errors)],
        ["active samples", f"{before.samples:,}", f"{now.samples:,}"],
    ]
    for name in NAMES:
        if before.components.get(name) or now.components.get(name):
            out.append([name, f"{before.share(name):.0%}", f"{now.share(name):.0%}"])
    return out


def plot(results: ProfileResults, path: Path) -> None:
    bars = [
        (f"{label(t).split(' (')[0]}\n{code}", run)
        for t in TARGETS
        for code in ("before", "now")
        if (run := results.run(code, t)) is not None
    ]
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(bars) + 2))
    colors = plt.get_cmap("tab20").colors
    for index, name in enumerate(NAMES):
        lefts = [sum(run.share(n) for n in NAMES[:index]) for _, run in bars]
        ax.barh(
            [b for b, _ in bars],
            [run.share(name) for _, run in bars],
            left=lefts,
            color=colors[index % len(colors)],
            label=name,
        )
    for position, (_, run) in enumerate(bars):
        ax.text(1.01, position, f"{run.requests_per_s:,.0f}/s", va="center", fontsize=8)
    ax.set_xlim(0, 1.12)
    ax.invert_yaxis()
    ax.set_xlabel("share of the server's active samples (py-spy)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3)
    ax.set_title("Where a request's time goes: before issue 15 and now (requests/s at right)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def section(results: ProfileResults, commit: str) -> str:
    parts = [
        START,
        "## Request path profile: where a request's time goes, before and now",
        f"Run {results.date} on {commit}, before = commit `{results.before}` (the code before "
        "issue 15, extracted with `git archive`, same virtualenv and database). One uvicorn "
        f"process (httptools + uvloop), `wrk -t2 -c32 -d{LOAD_S:g}s`, py-spy sampling every "
        f"thread of the server at {RATE} Hz for {SAMPLE_S:g} s after the first seconds; each "
        "sample is charged to the component of its innermost frame, and threads waiting for "
        "work are left out. Load average at start "
        f"{results.load_average_start}, at end {results.load_average_end} "
        f"(`scripts/bench_profile.py`, `BENCH_ONLY=request_profile`).",
    ]
    for target in TARGETS:
        found = rows(results, target)
        if found:
            parts += [f"**{label(target)}**", report.table(["", "before", "now"], found)]
    parts += [f"- {problem}" for problem in results.problems]
    return report.with_figure(parts, "request path profile", PLOT, END)


write_profile = report.plotted_writer(plot, section, PLOT, START, END)


def print_profile(results: ProfileResults) -> None:
    print()
    print("Request path profile (before / now, requests/s)")
    for target in TARGETS:
        before, now = results.run("before", target), results.run("now", target)
        if before and now:
            print(f"  {target:<8} {before.requests_per_s:8.0f} {now.requests_per_s:8.0f}")
