"""The ``match`` block: recall, then a relevance judge, then keep. Shared by RAG and memory sources."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from contextplatform.core import metrics
from sources.judge import JudgeCandidate, JudgeError, judge_for, known_deployments
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
    deployment: str | None = Field(default=None, max_length=100)
    on_error: Literal["skip", "block"] = "skip"

    @field_validator("deployment")
    @classmethod
    def known_deployment(cls, deployment: str | None, info: ValidationInfo) -> str | None:
        if (info.context or {}).get("stored"):
            return deployment  # checked when the route was saved; at run time on_error decides
        known = known_deployments()
        if deployment is not None and deployment not in known:
            raise ValueError(f"unknown deployment {deployment!r}; configured: {', '.join(known)}")
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

    @property
    def kept(self) -> list[Decision]:
        return [d for d in self.decisions if d.kept]

    @property
    def cacheable(self) -> bool:
        """Unjudged documents kept after a judge failure serve this request only."""
        return self.judge_error is None


async def judge_and_keep(
    query: str, hits: list[RecallHit], judge: JudgeConfig | None
) -> MatchResult:
    decisions = [Decision(hit=hit, recall_rank=rank) for rank, hit in enumerate(hits, start=1)]
    if judge is None:
        for decision in decisions:
            decision.kept, decision.reason = True, "recalled"
        return MatchResult(decisions=decisions)
    candidates = decisions[: judge.max_candidates]
    for decision in decisions[judge.max_candidates :]:
        decision.reason = "not_judged"
    try:
        scores = await judge_for(judge.deployment).score(
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
            raise JudgeBlocked(f"relevance judge failed: {error}") from error
        for decision in candidates:
            within = decision.recall_rank <= judge.top_k
            decision.kept = within
            decision.reason = "judge_failed_recall_order" if within else "beyond_top_k"
        return MatchResult(decisions=decisions, judged=False, judge_error=str(error))
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
    return MatchResult(decisions=decisions, judged=True)


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
