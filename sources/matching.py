"""The ``match`` block: recall, then a relevance judge, then keep. Shared by RAG and memory sources."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from contextplatform.core import metrics
from contextplatform.core.llm import LLMError
from contextplatform.deployments import llm as named
from sources.base import ContextRequest
from sources.judge import (
    LOCAL,
    JudgeCandidate,
    JudgeError,
    asked_label,
    judge_for_async,
    may_not_judge_message,
    unknown_deployment_message,
)
from sources.recall import RecallHit


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RecallConfig(Strict):
    method: Literal["embedding", "bm25", "hybrid"] = "embedding"
    top_k: int = Field(default=20, ge=1, le=500)
    min_similarity: float = Field(default=0.3, ge=-1.0, le=1.0)
    hybrid_mode: Literal["weighted", "rrf"] = "weighted"


class JudgeConfig(Strict):
    preset: Literal["relevance"] = "relevance"
    top_k: int = Field(default=6, ge=1, le=200)
    min_score: float = Field(default=0.5, ge=0.0, le=1.0)
    max_candidates: int = Field(default=64, ge=1, le=256)
    # "local": the local judge; a name: that deployment (the tenant's, else the platform's);
    # none: the route's upstream deployment when it may judge, else the local judge.
    deployment: str | None = Field(default=None, max_length=100)
    on_error: Literal["skip", "block"] = "skip"

    @field_validator("deployment")
    @classmethod
    def known_deployment(cls, deployment: str | None, info: ValidationInfo) -> str | None:
        if (info.context or {}).get("stored"):
            return deployment  # checked when the route was saved; at run time on_error decides
        if deployment is None or deployment == LOCAL:
            return deployment
        # Routes are written in the tenant's schema, so the tenant's deployments are read here.
        try:
            found = named.named_deployment(deployment, allowlist=())
        except LLMError as error:
            raise ValueError(f"deployment {deployment!r}: {error}") from None
        if found is None:
            raise ValueError(unknown_deployment_message(deployment, "deployment"))
        if not found.may_judge:
            raise ValueError(may_not_judge_message(deployment))
        return deployment


class MatchConfig(Strict):
    """A written block replaces the default whole: only ``recall`` keeps the recalled documents in
    the backend's order; only ``judge`` judges the newest chunks (at most ``max_candidates``)."""

    recall: RecallConfig | None = None
    judge: JudgeConfig | None = None

    @model_validator(mode="after")
    def not_empty(self) -> MatchConfig:
        if self.recall is None and self.judge is None:
            raise ValueError("match needs a recall block, a judge block, or both")
        return self


def default_match(top_k: int = 20, min_similarity: float = 0.3) -> MatchConfig:
    return MatchConfig(
        recall=RecallConfig(top_k=top_k, min_similarity=min_similarity), judge=JudgeConfig()
    )


class JudgeBlocked(Exception):
    """The judge failed and the block says ``on_error: block``."""


@dataclass
class Decision:
    hit: RecallHit
    recall_rank: int
    judge_score: float | None = None
    kept: bool = False
    reason: str = ""


@dataclass
class MatchResult:
    decisions: list[Decision] = field(default_factory=list)
    judged: bool = False
    judge_error: str | None = None
    # Which judge was asked (``local``, ``deployment:<name>``); None without a judge block.
    judge: str | None = None

    @property
    def kept(self) -> list[Decision]:
        return [d for d in self.decisions if d.kept]

    def judge_notes(self) -> dict[str, Any]:
        """What the source's notes (the replay record, the preview) say of the judge: which one
        ran, whether it fell back to the recall order (no usable answer, ``on_error: skip``),
        and why."""
        if self.judge is None:
            return {}
        notes: dict[str, Any] = {
            "judge": self.judge,
            "judge_fallback": self.judge_error is not None,
        }
        if self.judge_error:
            notes["judge_error"] = self.judge_error
        return notes

    @property
    def cacheable(self) -> bool:
        """Unjudged documents kept after a judge failure serve this request only."""
        return self.judge_error is None


async def judge_and_keep(
    query: str,
    hits: list[RecallHit],
    judge: JudgeConfig | None,
    request: ContextRequest | None = None,
) -> MatchResult:
    """Judge the recalled ``hits`` and keep the best. ``request`` gives the default judge (the
    route's upstream deployment) and the tenant's outbound allow-list; without it a block with no
    deployment is judged locally."""
    decisions = [Decision(hit=hit, recall_rank=rank) for rank, hit in enumerate(hits, start=1)]
    if judge is None:
        for decision in decisions:
            decision.kept, decision.reason = True, "recalled"
        return MatchResult(decisions=decisions)
    candidates = decisions[: judge.max_candidates]
    for decision in decisions[judge.max_candidates :]:
        decision.reason = "not_judged"
    default = request.judge_deployment if request is not None else None
    allowlist = request.allowlist if request is not None else None
    label = asked_label(judge.deployment, default)  # what a failure names if none is found
    try:
        chosen = await judge_for_async(judge.deployment, allowlist=allowlist, default=default)
        label = chosen.label
        scores = await chosen.score(
            query,
            [
                JudgeCandidate(
                    text=d.hit.text, title=d.hit.title, cosine=d.hit.cosine, bm25=d.hit.bm25
                )
                for d in candidates
            ],
        )
    except JudgeError as error:
        metrics.count_judge(metrics.judge_feature(), ok=False)
        if judge.on_error == "block":
            raise JudgeBlocked(f"relevance judge failed ({label}): {error}") from error
        for decision in candidates:
            within = decision.recall_rank <= judge.top_k
            decision.kept = within
            decision.reason = "judge_failed_recall_order" if within else "beyond_top_k"
        return MatchResult(decisions=decisions, judged=False, judge_error=str(error), judge=label)
    metrics.count_judge(metrics.judge_feature(), ok=True)
    for decision, score in zip(candidates, scores, strict=True):
        decision.judge_score = score
    ranked = sorted(candidates, key=lambda d: -(d.judge_score or 0.0))
    kept = 0
    for decision in ranked:
        if (decision.judge_score or 0.0) < judge.min_score:
            decision.reason = "below_min_score"
        elif kept >= judge.top_k:
            decision.reason = "beyond_top_k"
        else:
            decision.kept, decision.reason = True, "kept"
            kept += 1
    order = {id(d): i for i, d in enumerate(ranked)}
    decisions.sort(key=lambda d: (not d.kept, order.get(id(d), len(order) + d.recall_rank)))
    return MatchResult(decisions=decisions, judged=True, judge=label)


def cap_characters(result: MatchResult, max_characters: int) -> None:
    """Keep documents in order while their text fits ``max_context_length`` characters."""
    used = 0
    for decision in result.decisions:
        if not decision.kept:
            continue
        size = len(decision.hit.text) + len(decision.hit.title or "")
        if used + size > max_characters:
            decision.kept, decision.reason = False, "max_context_length"
            continue
        used += size
