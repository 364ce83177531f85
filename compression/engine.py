"""The compression engine: segments → rank → shrink the least relevant first → rewrite.

Pure (no Django); persistence of recovery originals goes through the ``RecoveryWriter`` the caller
passes in. The input body is never modified: every pass works on a deep copy, and a request that
cannot fit raises ``ContextLengthExceeded`` with nothing rewritten.

Order of work (as vLLM Semantic Router's context compression):

1. Parse the body into blocks (``compression.segments``); candidates are the blocks whose target
   is not ``preserve`` and, in ``mode: auto``, whose size reaches the target's ``min_tokens``.
2. Rank: BM25 of each block against its query over the candidate set; with a judge (and a match
   block that is not lexical-only) one judge call scores the ``max_candidates`` best by BM25, each
   long block shown as the chunks that match its query (``judge_view``). The least relevant are
   shrunk first, then the ones the judge did not read. A tool output's query is its call and the
   latest user text (``compression.segments``).
3. Allocate the request's excess over the candidates (``allocate``), compress each to its item
   target (extractive or recoverable), add ``vsr_context_retrieve`` for the issued recovery keys, then
   truncate the latest user message (``current_user: truncate``) only as far as the budget needs.
4. Recount the whole body: no reduction reverts everything; still over ``max_input_tokens`` after
   every permitted compression (in ``auto`` mode the ``min_tokens`` gate is lifted for a second
   pass first) raises ``ContextLengthExceeded``.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from compression import text as textops
from compression.config import CompressConfig, CompressTarget
from compression.rewrite import (
    RECOVERY_PLACEHOLDER,
    RETRIEVE_TOOL_NAME,
    ToolClash,
    add_retrieve_tool,
    check_tools_accept_retrieve,
    read_at,
    recovery_trailer,
    write_at,
)
from compression.segments import Block, Path, Segments, UnsupportedShape, parse_segments
from contextplatform.core import bm25
from contextplatform.core.estimation import TokenEstimator, count_json
from contextplatform.protocols.base import ProtocolName

__all__ = [
    "RETRIEVE_TOOL_NAME",
    "BlockJudge",
    "BlockReport",
    "CompressionFailed",
    "CompressionResult",
    "ContextLengthExceeded",
    "Provenance",
    "RecoveryWriter",
    "compress_request",
    "recovery_key",
    "too_long",
]

TARGET_OF_KIND = {
    "tool_output": "tool_outputs",
    "history": "history",
    "rag": "rag",
    "memory": "memory",
    "current_user": "current_user",
}
RECOVERY_KEY_CHARS = 24
TRUNCATE_ATTEMPTS = 8
# The compress stage's judge reads the first 2,000 characters of each text it is given
# (``resolve/compression_stage.py``), about 500 tokens: a longer block is shown as its own
# extractive compression to that size, the chunks that match its query, not as its beginning.
JUDGE_VIEW_TOKENS = 500


class ContextLengthExceeded(Exception):
    """Protected content cannot fit the budget; the request must be refused with 400 and nothing
    rewritten. ``tokens`` and ``budget`` say by how much."""

    def __init__(self, message: str, *, tokens: int, budget: int):
        super().__init__(message)
        self.tokens = tokens
        self.budget = budget


class CompressionFailed(Exception):
    """A rewrite failed (recovery store refused, tool name clash, …): fail_open sends the request
    uncompressed, fail_closed refuses it."""


class RecoveryWriter(Protocol):
    def store(self, originals: Sequence[tuple[str, str]]) -> None:
        """Persist (key, original text) pairs for this request; raise CompressionFailed on limits."""


# Scores blocks for the judge stage: (query, texts) -> one score in [0, 1] per text. Raises on failure.
BlockJudge = Callable[[str, list[str]], list[float]]


@dataclass
class Provenance:
    """Tool-call ids of the exchanges the platform injected, so their results are rag/memory blocks."""

    rag_call_ids: frozenset[str] = frozenset()
    memory_call_ids: frozenset[str] = frozenset()


@dataclass
class BlockReport:
    message_index: int
    block_index: int
    kind: Literal["tool_output", "history", "rag", "memory", "current_user"]
    mode: str
    original_tokens: int
    target_tokens: int
    final_tokens: int
    score: float | None
    omitted_chunks: int
    format: str


@dataclass
class CompressionResult:
    body: dict[str, Any]  # the rewritten body (a copy), or the input when not applied
    applied: bool
    tokens_before: int
    tokens_after: int
    target_request_tokens: int
    skip_reason: str | None  # no_targets, below_trigger, budget_not_reduced, bypassed, ...
    quality: str  # budget_met | budget_partial | rejected_non_reducing | not_applied
    trigger: str | None  # always | context_window | item_threshold
    blocks: list[BlockReport] = field(default_factory=list)
    omitted_chunks: int = 0
    recovery_keys: list[str] = field(default_factory=list)  # never reported outward, only counted
    warnings: list[str] = field(default_factory=list)


# --- the request as the engine sees it --------------------------------------------------------


@dataclass
class Request:
    body: dict[str, Any]
    chat_format: str
    config: CompressConfig
    estimator: TokenEstimator
    segments: Segments
    tokens_before: int
    limit: int  # max_input_tokens: over it after everything permitted → 400
    target: int  # the request target: the limit, or a request control's smaller number
    judge: BlockJudge | None
    recovery: RecoveryWriter | None
    recovery_scope: str
    warnings: list[str] = field(default_factory=list)


@dataclass
class Candidate:
    block: Block
    policy: CompressTarget
    tokens: int
    lexical: float = 0.0
    score: float | None = None
    judged: bool = False
    allocated: int = 0
    raised: bool = False

    @property
    def item_target(self) -> int:
        return min(self.tokens, self.policy.effective_target)


@dataclass
class Change:
    """What one candidate became: ``text`` is None when it stays as it was."""

    text: str | None
    tokens: int
    omitted_chunks: int
    format: str
    key: str | None = None


@dataclass
class Pass:
    body: dict[str, Any]
    reports: list[BlockReport]
    originals: list[tuple[str, str]]
    keys: list[str]
    changed: bool
    tokens_after: int


# --- public entry ------------------------------------------------------------------------------


def compress_request(
    body: dict[str, Any],
    chat_format: ProtocolName,
    config: CompressConfig,
    *,
    max_input_tokens: int,
    estimator: TokenEstimator,
    provenance: Provenance | None = None,
    judge: BlockJudge | None = None,
    recovery: RecoveryWriter | None = None,
    recovery_scope: str = "",
    request_target_tokens: int | None = None,
    numeric_budget: bool = False,
) -> CompressionResult:
    """Fit ``body`` into ``max_input_tokens``, aiming at ``request_target_tokens`` if smaller (a
    request control). ``numeric_budget``: the route wrote ``budget.max_tokens`` as a number, so
    ``mode: auto`` skips a request that is not over it (``below_trigger``).

    Raises ContextLengthExceeded (nothing rewritten) when the request stays over
    ``max_input_tokens`` after every permitted compression, or CompressionFailed (recovery store
    missing or refusing, per-request recovery bytes, tool name clash, unsupported shape)."""
    try:
        segments = parse_segments(body, chat_format, provenance)
    except UnsupportedShape as error:
        raise CompressionFailed(str(error)) from error
    tokens_before = count_json(body, estimator)
    limit = max(1, max_input_tokens)
    request = Request(
        body=body,
        chat_format=chat_format,
        config=config,
        estimator=estimator,
        segments=segments,
        tokens_before=tokens_before,
        limit=limit,
        target=max(1, min(limit, request_target_tokens)) if request_target_tokens else limit,
        judge=judge if uses_judge(config) else None,
        recovery=recovery,
        recovery_scope=recovery_scope,
    )
    return run(request, numeric_budget=numeric_budget)


def run(request: Request, *, numeric_budget: bool) -> CompressionResult:
    always = request.config.mode == "always"
    gated = select_candidates(request, lift_min_gate=always)
    over_limit = request.tokens_before > request.limit
    if not gated and not (over_limit and not always):
        return not_applied(request, "no_targets", None)
    if gated and numeric_budget and not always and request.tokens_before <= request.target:
        return not_applied(request, "below_trigger", None)
    trigger = trigger_of(request, always)
    judged = judge_scores(request, score_lexically(gated))
    outcome = run_pass(request, gated, judged) if gated else None
    if not always and (outcome is None or outcome.tokens_after > request.limit):
        ungated = select_candidates(request, lift_min_gate=True)
        if len(ungated) > len(gated):
            request.warnings.append("min_tokens_gate_lifted")
            score_lexically(ungated)
            outcome = run_pass(request, ungated, judged)
            trigger = "context_window"
    if outcome is None:
        return not_applied(request, "no_targets", trigger)
    return finalise(request, outcome, trigger)


# --- candidates --------------------------------------------------------------------------------


def uses_judge(config: CompressConfig) -> bool:
    """``match: {recall: {method: bm25}}`` alone is lexical-only; any judge block, or no match
    block at all, lets the judge rank."""
    match = config.match
    return match is None or match.judge is not None or match.recall is None


def judge_deployment(config: CompressConfig) -> str | None:
    """The chat deployment the judge block names; None is the local judge."""
    match = config.match
    return match.judge.deployment if match is not None and match.judge is not None else None


def judge_limit(config: CompressConfig) -> int:
    match = config.match
    return match.judge.max_candidates if match is not None and match.judge is not None else 64


def policy_of(config: CompressConfig, block: Block) -> CompressTarget:
    return config.targets.of(TARGET_OF_KIND[block.kind])  # type: ignore[arg-type]


def is_candidate(request: Request, block: Block, tokens: int, lift_min_gate: bool) -> bool:
    policy = policy_of(request.config, block)
    if policy.mode == "preserve" or not block.text.strip():
        return False
    if block.kind == "current_user":
        # Budget-driven: only when the request is over its target, and then whatever its size.
        return policy.mode == "truncate" and request.tokens_before > request.target
    if policy.mode == "truncate":
        return False
    return lift_min_gate or tokens >= policy.min_tokens


def select_candidates(request: Request, *, lift_min_gate: bool) -> list[Candidate]:
    found = []
    for block in request.segments.blocks:
        tokens = request.estimator.count(block.text)
        if is_candidate(request, block, tokens, lift_min_gate):
            found.append(Candidate(block, policy_of(request.config, block), tokens))
    return found


def trigger_of(request: Request, always: bool) -> str:
    if always:
        return "always"
    return "context_window" if request.tokens_before > request.target else "item_threshold"


# --- ranking -----------------------------------------------------------------------------------


def score_lexically(candidates: list[Candidate]) -> list[Candidate]:
    """BM25 of every block against its own query, over the ranked blocks as the corpus. The
    latest user message is not ranked: it is processed last."""
    ranked = [c for c in candidates if c.block.kind != "current_user"]
    scores = block_bm25([c.block.query for c in ranked], [c.block.text for c in ranked])
    for candidate, score in zip(ranked, scores, strict=True):
        candidate.lexical = score
    return ranked


def block_bm25(queries: list[str], texts: list[str]) -> list[float]:
    """``text.bm25_scores`` with one query per text: ``scores[i]`` is
    ``bm25_scores(queries[i], texts)[i]``, each text and each distinct query tokenized once however
    many queries there are (a request holds one query per tool call)."""
    terms = {query: textops.tokenize_terms(query) for query in set(queries)}
    return bm25.own_query_scores(
        [terms[query] for query in queries],
        [textops.tokenize_terms(text) for text in texts],
        average_length_floor=textops.AVERAGE_LENGTH_FLOOR,
    )


def judge_scores(request: Request, ranked: list[Candidate]) -> dict[Path, float]:
    """One judge call over the ``max_candidates`` best blocks by BM25; {} without an answer (and
    no call for a single block: there is nothing to order)."""
    if request.judge is None or len(ranked) < 2:
        return {}
    best = sorted(ranked, key=lambda c: (-c.lexical, -c.tokens))[: judge_limit(request.config)]
    try:
        views = [judge_view(request, c) for c in best]
        scores = request.judge(request.segments.last_user_text, views)
        answered = [float(score) for score in scores]
        if len(answered) != len(best) or not all(map(math.isfinite, answered)):
            raise ValueError("the judge did not answer one finite score per block")
        return {c.block.path: score for c, score in zip(best, answered, strict=True)}
    except Exception as error:  # any judge failure: rank lexically
        request.warnings.append(f"judge_failed:{type(error).__name__}")
        return {}


def judge_view(request: Request, candidate: Candidate) -> str:
    """What the judge reads of a block: all of it when it is short, else the chunks that match
    its query (the best one, the first and the last, then by score) within ``JUDGE_VIEW_TOKENS``.
    The one line of a long tool output that answers the question is seldom in its first 2,000
    characters, and a judge that never reads it scores the block as irrelevant."""
    block = candidate.block
    if candidate.tokens <= JUDGE_VIEW_TOKENS:
        return block.text
    view = textops.compress_extractive(
        block.text, block.query, JUDGE_VIEW_TOKENS, request.estimator
    )
    return view.text


def order_candidates(ranked: list[Candidate], judged: dict[Path, float]) -> list[Candidate]:
    """Least relevant first, larger first on ties: judged blocks, then the ones it did not read."""
    for candidate in ranked:
        candidate.judged = candidate.block.path in judged
        candidate.score = judged[candidate.block.path] if candidate.judged else candidate.lexical
    return sorted(ranked, key=lambda c: (not c.judged, c.score, -c.tokens))


def allocate(candidates: list[Candidate], needed: int) -> None:
    """vLLM Semantic Router's ``allocateGlobalBudget``: every candidate goes to its item target,
    except the one whose saving first covers what is still needed, which keeps what the budget lets
    it keep."""
    for candidate in candidates:
        candidate.allocated = candidate.item_target
        candidate.raised = False
    for candidate in candidates:
        if needed <= 0:
            return
        potential = candidate.tokens - candidate.item_target
        if potential > needed:
            candidate.allocated = candidate.tokens - needed
            candidate.raised = True
            return
        needed -= potential


# --- one pass ----------------------------------------------------------------------------------


def run_pass(request: Request, candidates: list[Candidate], judged: dict[Path, float]) -> Pass:
    check_recovery_possible(request, candidates)
    work = copy.deepcopy(request.body)
    ranked = [c for c in candidates if c.block.kind != "current_user"]
    ordered = order_candidates(ranked, judged)
    allocate(ordered, request.tokens_before - request.target)
    changes = {id(c): apply_candidate(request, c, c.allocated) for c in ordered}
    write_changes(work, ordered, changes)
    if any(c.raised for c in ordered) and count_json(work, request.estimator) > request.target:
        for candidate in (c for c in ordered if c.raised):
            candidate.allocated = candidate.item_target
            changes[id(candidate)] = apply_candidate(request, candidate, candidate.allocated)
        write_changes(work, ordered, changes)
    originals, keys = issued_recovery(request, ordered, changes)
    if keys:
        add_retrieve_tool(work, request.chat_format, keys)
    reports = [report_of(c, changes[id(c)]) for c in ordered]
    users = sorted(
        (c for c in candidates if c.block.kind == "current_user"), key=lambda c: -c.tokens
    )
    reports.extend(truncate_current_user(request, work, c) for c in users)
    changed = bool(keys) or any(report.format != "unchanged" for report in reports)
    return Pass(work, reports, originals, keys, changed, count_json(work, request.estimator))


def check_recovery_possible(request: Request, candidates: list[Candidate]) -> None:
    if not any(c.policy.mode == "recoverable" for c in candidates):
        return
    if request.recovery is None:
        raise CompressionFailed("recovery store is unavailable")
    try:
        check_tools_accept_retrieve(request.body)
    except ToolClash as error:
        raise CompressionFailed(str(error)) from error


def write_changes(
    work: dict[str, Any], ordered: list[Candidate], changes: dict[int, Change]
) -> None:
    for candidate in ordered:
        change = changes[id(candidate)]
        write_at(
            work,
            candidate.block.path,
            change.text if change.text is not None else candidate.block.text,
        )


def apply_candidate(request: Request, candidate: Candidate, target: int) -> Change:
    if candidate.policy.mode == "recoverable":
        return recoverable(request, candidate, target)
    return extractive(request, candidate, target)


def unchanged(candidate: Candidate) -> Change:
    return Change(None, candidate.tokens, 0, "unchanged")


def extractive(request: Request, candidate: Candidate, target: int) -> Change:
    if target >= candidate.tokens:
        return unchanged(candidate)
    block = candidate.block
    result = textops.compress_extractive(block.text, block.query, target, request.estimator)
    return accepted(
        request, candidate, result.text, result.applied, result.omitted_chunks, result.format
    )


def accepted(
    request: Request,
    candidate: Candidate,
    text: str,
    applied: bool,
    omitted: int,
    fmt: str,
    key: str | None = None,
) -> Change:
    """A shortened text only if it is shorter and not empty."""
    if not applied or not text.strip() or text == candidate.block.text:
        return unchanged(candidate)
    tokens = request.estimator.count(text)
    if tokens >= candidate.tokens:
        return unchanged(candidate)
    return Change(text, tokens, omitted, fmt, key)


def recovery_key(scope: str, original: str) -> str:
    return hashlib.sha256(f"{scope}\x00{original}".encode()).hexdigest()[:RECOVERY_KEY_CHARS]


def recoverable(request: Request, candidate: Candidate, target: int) -> Change:
    """Extractive, and the original kept for ``vsr_context_retrieve``. JSON keeps no trailer (it
    stays valid JSON); a JSON block that could not be compressed is left as it is."""
    block = candidate.block
    if target >= candidate.tokens:
        return unchanged(candidate)
    result = textops.compress_extractive(block.text, block.query, target, request.estimator)
    is_json = result.format == "json" or block.looks_like_json
    key = recovery_key(request.recovery_scope, block.text)
    if result.applied and is_json:
        text = result.text
    elif result.applied:
        text = result.text + recovery_trailer(key)
    elif is_json:
        return unchanged(candidate)
    else:
        text = RECOVERY_PLACEHOLDER + recovery_trailer(key)
    fmt = result.format if result.applied else "placeholder"
    return accepted(request, candidate, text, True, max(1, result.omitted_chunks), fmt, key)


def issued_recovery(
    request: Request, ordered: list[Candidate], changes: dict[int, Change]
) -> tuple[list[tuple[str, str]], list[str]]:
    originals: dict[str, str] = {}
    for candidate in ordered:
        change = changes[id(candidate)]
        if change.key is not None and change.text is not None:
            originals.setdefault(change.key, candidate.block.text)
    size = sum(len(text.encode()) for text in originals.values())
    limit = request.config.recovery.max_bytes_per_request
    if size > limit:
        raise CompressionFailed(
            f"recovery originals need {size} bytes; the per-request limit is {limit}"
        )
    return list(originals.items()), list(originals)


def report_of(candidate: Candidate, change: Change) -> BlockReport:
    block = candidate.block
    return BlockReport(
        message_index=block.message_index,
        block_index=block.block_index,
        kind=block.kind,
        mode=candidate.policy.mode,
        original_tokens=candidate.tokens,
        target_tokens=candidate.allocated,
        final_tokens=change.tokens,
        score=candidate.score,
        omitted_chunks=change.omitted_chunks if change.text is not None else 0,
        format=change.format,
    )


# --- the latest user message -------------------------------------------------------------------


def truncate_current_user(
    request: Request, work: dict[str, Any], candidate: Candidate
) -> BlockReport:
    """Keep the beginning and the end of the latest user text, just short enough for the request
    to meet its target; nothing when it already does or when no cut fits."""
    block = candidate.block
    candidate.allocated = candidate.tokens  # not ranked (score None) nor allocated: kept whole
    report = report_of(candidate, unchanged(candidate))
    target = candidate.tokens
    for _ in range(TRUNCATE_ATTEMPTS):
        excess = count_json(work, request.estimator) - request.target
        if excess <= 0:
            break
        current = request.estimator.count(read_at(work, block.path))
        target = min(target - 1, current - excess)
        if target < 1:
            break
        result = textops.truncate_middle(block.text, target, request.estimator)
        if not result.applied or not result.text.strip():
            break
        write_at(work, block.path, result.text)
        report.target_tokens = target
        report.final_tokens = request.estimator.count(result.text)
        report.omitted_chunks = result.omitted_chunks
        report.format = "truncate"
    return report


# --- the end -----------------------------------------------------------------------------------


def too_long(tokens: int, budget: int) -> ContextLengthExceeded:
    return ContextLengthExceeded(
        f"request exceeds the model input budget after configured compression ({tokens} > "
        f"{budget} conservative tokens); protected instructions, tool structure, schemas or "
        "preserved content cannot be shortened",
        tokens=tokens,
        budget=budget,
    )


def not_applied(
    request: Request,
    reason: str,
    trigger: str | None,
    quality: str = "not_applied",
    reports: list[BlockReport] | None = None,
) -> CompressionResult:
    if request.tokens_before > request.limit:
        raise too_long(request.tokens_before, request.limit)
    return CompressionResult(
        body=request.body,
        applied=False,
        tokens_before=request.tokens_before,
        tokens_after=request.tokens_before,
        target_request_tokens=request.target,
        skip_reason=reason,
        quality=quality,
        trigger=trigger,
        blocks=reports or [],
        warnings=request.warnings,
    )


def reverted(reports: list[BlockReport]) -> list[BlockReport]:
    for report in reports:
        report.final_tokens = report.original_tokens
        report.omitted_chunks = 0
        report.format = "reverted" if report.format != "unchanged" else report.format
    return reports


def finalise(request: Request, outcome: Pass, trigger: str | None) -> CompressionResult:
    if not outcome.changed:
        return not_applied(request, "budget_not_reduced", trigger, reports=outcome.reports)
    if outcome.tokens_after >= request.tokens_before:
        reports = reverted(outcome.reports)
        return not_applied(request, "budget_not_reduced", trigger, "rejected_non_reducing", reports)
    if outcome.tokens_after > request.limit:
        raise too_long(outcome.tokens_after, request.limit)
    store_originals(request, outcome.originals)
    return CompressionResult(
        body=outcome.body,
        applied=True,
        tokens_before=request.tokens_before,
        tokens_after=outcome.tokens_after,
        target_request_tokens=request.target,
        skip_reason=None,
        quality="budget_met" if outcome.tokens_after <= request.target else "budget_partial",
        trigger=trigger,
        blocks=outcome.reports,
        omitted_chunks=sum(report.omitted_chunks for report in outcome.reports),
        recovery_keys=outcome.keys,
        warnings=request.warnings,
    )


def store_originals(request: Request, originals: list[tuple[str, str]]) -> None:
    if not originals:
        return
    if request.recovery is None:
        raise CompressionFailed("recovery store is unavailable")
    try:
        request.recovery.store(originals)
    except CompressionFailed:
        raise
    except Exception as error:
        raise CompressionFailed(f"recovery store failed: {type(error).__name__}") from error
