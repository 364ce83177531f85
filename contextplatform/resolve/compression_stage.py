"""The compress stage of resolve: after injection, on the whole rewritten request."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync

from compression.config import CompressConfig
from compression.controls import parse_controls
from compression.engine import (
    CompressionFailed,
    CompressionResult,
    ContextLengthExceeded,
    Provenance,
    compress_request,
    judge_deployment,
)
from compression.recovery import DatabaseRecoveryWriter
from compression.stats import record_outcome
from contextplatform.core import metrics
from contextplatform.core.errors import ApiError
from contextplatform.core.estimation import TokenEstimator
from contextplatform.core.llm import LLMUsage, metered
from contextplatform.deployments.pricing import Price
from contextplatform.resolve.budget import Budget
from contextplatform.resolve.chat import ChatFormat
from contextplatform.resolve.refusals import context_length_exceeded
from sources.judge import LOCAL, Judge, JudgeCandidate, LLMJudge, judge_for
from sources.matching import judge_usage_note

JUDGE_READS_CHARACTERS = 2000


@dataclass
class StageOutcome:
    body: dict[str, Any]
    report: dict[str, Any] = field(default_factory=dict)


@dataclass
class BlockJudge:
    """The compress stage's judge, found when the engine first ranks (most requests never do, so
    most never look a deployment up): the named one, else the route's upstream when it may
    judge, else the local judge. ``label`` says which one ran, for the report; ``usage`` the
    calls a deployment judge was sent and the tokens they reported, ``price`` its deployment's
    (what the record's cost counts, as it counts the relevance judge's)."""

    deployment: str | None
    default: str | None = None
    allowlist: Sequence[str] | None = None
    label: str | None = None
    usage: LLMUsage | None = None
    price: Price | None = None
    _judge: Judge | None = None

    def __call__(self, query: str, texts: list[str]) -> list[float]:
        if self._judge is None:
            self._judge = judge_for(self.deployment, allowlist=self.allowlist, default=self.default)
        judge = self._judge
        self.label = judge.label
        # Blocks can be huge; the judge reads their beginning, enough to tell what they are about.
        candidates = [JudgeCandidate(text=text[:JUDGE_READS_CHARACTERS]) for text in texts]
        if isinstance(judge, LLMJudge):
            self.price = judge.price
            self.usage = self.usage or LLMUsage()
        usage = LLMUsage()
        try:
            with metered() as usage:
                scores = async_to_sync(judge.score)(query, candidates)
        except Exception:
            metrics.count_judge("compress", ok=False)
            raise
        finally:
            if self.usage is not None:  # a failed call was sent too: it counts
                self.usage.add(usage)
        metrics.count_judge("compress", ok=True)
        return scores

    def noted(self, report: dict[str, Any]) -> dict[str, Any]:
        """``report`` with which judge ran and, for a deployment judge, what its calls cost (the
        ``judge_usage`` a source's notes carry for the relevance judge)."""
        if self.label is not None:
            report["judge"] = self.label
        if self.usage is not None:
            report["judge_usage"] = judge_usage_note(self.usage, self.price)
        return report


def block_judge(
    deployment: str | None,
    default: str | None = None,
    allowlist: Sequence[str] | None = None,
) -> BlockJudge:
    return BlockJudge(deployment, default, allowlist)


def result_report(result: CompressionResult, estimator: TokenEstimator) -> dict[str, Any]:
    """What the response and the replay record may show: counts and plans, never text or keys."""
    return {
        "applied": result.applied,
        "tokens_before": result.tokens_before,
        "tokens_after": result.tokens_after,
        "target_request_tokens": result.target_request_tokens,
        "skip_reason": result.skip_reason,
        "quality": result.quality,
        "trigger": result.trigger,
        "omitted_chunks": result.omitted_chunks,
        "recovery_keys": len(result.recovery_keys),
        "blocks": [
            {
                "message_index": b.message_index,
                "block_index": b.block_index,
                "kind": b.kind,
                "mode": b.mode,
                "original_tokens": b.original_tokens,
                "target_tokens": b.target_tokens,
                "final_tokens": b.final_tokens,
                "score": b.score,
                "omitted_chunks": b.omitted_chunks,
                "format": b.format,
            }
            for b in result.blocks
        ],
        "warnings": result.warnings,
        "estimator": estimator.name,
    }


def skipped(reason: str, tokens: int, estimator: TokenEstimator) -> dict[str, Any]:
    return {
        "applied": False,
        "tokens_before": tokens,
        "tokens_after": tokens,
        "skip_reason": reason,
        "quality": "not_applied",
        "estimator": estimator.name,
    }


def run_compression(
    *,
    config: CompressConfig | None,
    body: dict[str, Any],
    chat_format: ChatFormat,
    budget: Budget,
    tokens: int,
    estimator: TokenEstimator,
    injected: dict[str, str],
    request_id: str,
    route: str,
    user: str | None,
    headers: Mapping[str, str],
    stream: bool = False,
    persist: bool = True,
    numeric_budget: bool = False,
    judge_default: str | None = None,
    allowlist: Sequence[str] | None = None,
    judge_calls: bool = True,
) -> StageOutcome:
    """Raises ApiError 400 context_length_exceeded (nothing rewritten) or, under fail_closed,
    500 compression_failed; under fail_open a failed rewrite sends the request as it was."""
    max_input_tokens = budget.max_input
    if config is None or not config.compresses_request:
        if tokens > max_input_tokens:
            raise context_length_exceeded(tokens, budget)
        return StageOutcome(body, skipped("not_configured", tokens, estimator))
    controls = parse_controls(headers.get(config.request_controls.header), config.request_controls)
    if controls.bypass:
        if tokens > max_input_tokens:
            raise context_length_exceeded(tokens, budget)
        if persist:
            record(route, "bypassed", tokens, tokens)
        return StageOutcome(body, skipped("bypassed", tokens, estimator))
    effective = config
    if stream:  # never recoverable targets: nothing could serve the follow-up
        effective = config.model_copy(deep=True)
        for kind in ("tool_outputs", "history", "rag", "memory"):
            target = effective.targets.of(kind)  # type: ignore[arg-type]
            if target.mode == "recoverable":
                target.mode = "extractive"
    # The engine decides whether it ranks; the judge is looked up only then.
    # ``judge_calls`` False (a token count): the local judge, no model asked.
    judge = (
        block_judge(judge_deployment(config), judge_default, allowlist)
        if judge_calls
        else block_judge(LOCAL)
    )
    provenance = Provenance(
        rag_call_ids=frozenset(i for i, kind in injected.items() if kind == "rag"),
        memory_call_ids=frozenset(i for i, kind in injected.items() if kind == "memory"),
    )
    recovery = (
        DatabaseRecoveryWriter(
            request_id=request_id, route=route, user=user, config=config.recovery
        )
        if persist
        else InMemoryRecovery()
    )
    try:
        result = compress_request(
            body,
            chat_format,
            effective,
            max_input_tokens=max_input_tokens,
            estimator=estimator,
            provenance=provenance,
            judge=judge,
            recovery=recovery,
            recovery_scope=f"{route}\x00{user or ''}\x00{request_id}",
            request_target_tokens=controls.target_tokens,
            numeric_budget=numeric_budget,
        )
    except ContextLengthExceeded as error:
        if persist:
            record(route, "context_length_exceeded", tokens, tokens)
        raise context_length_exceeded(error.tokens, budget, after_compression=True) from error
    except CompressionFailed as error:
        if persist:
            record(route, "compression_failed", tokens, tokens)
        if config.failure_mode == "fail_closed":
            raise ApiError(
                "compression_failed",
                f"context compression failed under fail_closed: {error}",
                status=500,
            ) from error
        if tokens > max_input_tokens:
            raise context_length_exceeded(tokens, budget) from error
        report = skipped("compression_failed", tokens, estimator)
        report["error"] = str(error)
        return StageOutcome(body, judge.noted(report))
    if persist:
        status = "applied" if result.applied else result.skip_reason or "not_applied"
        record(route, status, result.tokens_before, result.tokens_after)
    return StageOutcome(result.body, judge.noted(result_report(result, estimator)))


FAILED = frozenset({"context_length_exceeded", "compression_failed"})


def record(route: str, status: str, tokens_before: int, tokens_after: int) -> None:
    """The tenant's compression counters and the route's metrics, for one request."""
    record_outcome(
        applied=status == "applied",
        failed=status in FAILED,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
    )
    metrics.observe_compression(
        route, status, tokens_before=tokens_before, tokens_after=tokens_after
    )


class InMemoryRecovery:
    """For previews: keeps nothing beyond the call."""

    def __init__(self) -> None:
        self.originals: list[tuple[str, str]] = []

    def store(self, originals: Any) -> None:
        self.originals.extend(originals)
