"""The ``match`` block: recall, then a relevance judge, then keep. Shared by RAG and memory sources."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from contextplatform.core import metrics
from contextplatform.core.llm import LLMError, LLMUsage, metered
from contextplatform.deployments import llm as named
from contextplatform.deployments.pricing import Price, usage_cost
from sources.base import ContextRequest
from sources.embedding import FALLBACK_RAG_MIN_SIMILARITY, Embedder
from sources.judge import (
    LOCAL,
    JudgeCandidate,
    JudgeError,
    LLMJudge,
    LocalFeatures,
    LocalJudge,
    asked_label,
    judge_for_async,
    may_not_judge_message,
    unknown_deployment_message,
)
from sources.judge_calibration import PRIOR, JudgeCalibration
from sources.judge_feedback import DEPTH as FEEDBACK_DEPTH
from sources.recall import RecallHit


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


RecallMethod = Literal["embedding", "bm25", "hybrid"]
HybridMode = Literal["weighted", "rrf"]


class RecallConfig(Strict):
    # Unwritten, the backend's default (``rag_recall``): hybrid by reciprocal rank fusion where
    # the backend ranks both ways (the platform's own collections), embedding elsewhere.
    method: RecallMethod = "embedding"
    # Unwritten, the reader's default at fetch time (``rag_recall``, ``memory_recall``): thresholds
    # are specific to the embedding model, so a route that writes none follows its embedder.
    top_k: int | None = Field(default=None, ge=1, le=500)
    min_similarity: float | None = Field(default=None, ge=-1.0, le=1.0)
    hybrid_mode: HybridMode = "weighted"


class JudgeConfig(Strict):
    preset: Literal["relevance"] = "relevance"
    top_k: int = Field(default=6, ge=1, le=200)
    min_score: float = Field(default=0.5, ge=0.0, le=1.0)
    max_candidates: int = Field(default=64, ge=1, le=256)
    # "local": the local judge; a name: that deployment (the tenant's, else the platform's);
    # none: the route's upstream deployment when it may judge, else the local judge.
    deployment: str | None = Field(default=None, max_length=100)
    on_error: Literal["skip", "block"] = "skip"
    # "fused" (default): reciprocal rank fusion of the judge's rank and the recall's, so a judge
    # that ranks worse than the recall on a collection cannot reorder the recall's best out of the
    # keep alone; the recall's first ``hold_recall`` candidates that pass their cut keep their
    # places ahead of it. "judge": the judge's order and min_score alone decide.
    order: Literal["fused", "judge"] = "fused"
    hold_recall: int = Field(default=0, ge=0, le=200)
    # The cut the held candidates face; unwritten, min_score. Lower (e.g. 0.2) keeps the recall's
    # first candidates unless the judge is confident they do not answer.
    hold_min_score: float | None = Field(default=None, ge=0.0, le=1.0)
    # The local judge's order reads each candidate against the query moved toward its first
    # ``feedback`` candidates (relevance feedback, ``sources/judge_feedback.py``) when the recall
    # gave every candidate its vector; 0: against the query alone. Scores and cuts are unchanged.
    feedback: int = Field(default=FEEDBACK_DEPTH, ge=0, le=20)

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


def default_match() -> MatchConfig:
    """A rag source's default: recall (20, at the embedder's ``rag_min_similarity``), then judge."""
    return MatchConfig(recall=RecallConfig(), judge=JudgeConfig())


# --- the recall's unwritten values ---------------------------------------------------------------

RAG_TOP_K = 20  # the seed's: a rag source recalls up to 20 documents
# Where an applied value came from: the match block ("route", whichever layer wrote it), the memory
# store's default_* ("store"), the embedder's defaults ("embedder"), or the platform's generic
# value for a backend whose scores are not the platform embedder's ("platform").
RecallOrigin = Literal["route", "store", "embedder", "platform"]


@dataclass(frozen=True)
class AppliedRecall:
    """The recall a fetch runs: each value with where it came from (the source's notes, so the
    replay record and the preview, say it)."""

    top_k: int
    top_k_from: RecallOrigin
    min_similarity: float
    min_similarity_from: RecallOrigin
    embedder: Embedder | None = None  # the embedder whose cosines the threshold is on
    # The EmbedderDefaults fields (min_similarity's, top_k's) an "embedder" value is read from.
    defaults_fields: tuple[str, str | None] = ("rag_min_similarity", None)
    # The recall method and, for hybrid, its fusion: written, or the backend's default.
    method: RecallMethod = "embedding"
    hybrid_mode: HybridMode = "weighted"
    # None: a recall whose method is not the backend's choice (a memory source's says its own).
    method_from: RecallOrigin | None = None

    def on(self, recall: RecallConfig) -> RecallConfig:
        """``recall`` with the applied values written in (what the backends read)."""
        update: dict[str, Any] = {"top_k": self.top_k, "min_similarity": self.min_similarity}
        if self.method_from is not None:
            update |= {"method": self.method, "hybrid_mode": self.hybrid_mode}
        return recall.model_copy(update=update)

    def notes(self) -> dict[str, Any]:
        notes: dict[str, Any] = (
            {}
            if self.method_from is None
            else {
                "method": self.method if self.method != "hybrid" else f"hybrid {self.hybrid_mode}",
                "method_from": self.method_from,
            }
        )
        notes |= {
            "min_similarity": self.min_similarity,
            "min_similarity_from": self.min_similarity_from,
            "top_k": self.top_k,
            "top_k_from": self.top_k_from,
        }
        if self.embedder is None:
            return notes
        notes["embedder"] = self.embedder.identity
        used = [
            name
            for name, origin in zip(
                self.defaults_fields, (self.min_similarity_from, self.top_k_from), strict=True
            )
            if name is not None and origin == "embedder"
        ]
        if used:  # e.g. "embedder local:all-MiniLM-L6-v2:int8 (measured: ...)"
            origins = dict.fromkeys(self.embedder.defaults.origin_of(name) for name in used)
            notes["embedder_defaults"] = "; ".join(origins)
        return notes


def rag_recall(
    recall: RecallConfig, embedder: Embedder | None, *, ranks_both_ways: bool = False
) -> AppliedRecall:
    """A rag recall's values: written ones win; else ``top_k`` 20 and the embedder's
    ``rag_min_similarity``. ``embedder`` is the one whose vectors the backend's scores are cosines
    of; None for a backend that scores with its own service's model (external_api, mcp, openai),
    which gets the platform's generic threshold. An unwritten method is hybrid by reciprocal rank
    fusion on a backend that ``ranks_both_ways`` (dense and BM25 over the same chunks): fused, the
    two rankings beat either alone (the retrieval bench measures each); else embedding."""
    threshold_from: RecallOrigin
    if recall.min_similarity is not None:
        threshold, threshold_from = recall.min_similarity, "route"
    elif embedder is not None:
        threshold, threshold_from = embedder.defaults.rag_min_similarity, "embedder"
    else:
        threshold, threshold_from = FALLBACK_RAG_MIN_SIMILARITY, "platform"
    method, hybrid_mode = recall.method, recall.hybrid_mode
    method_from: RecallOrigin = "route"
    if "method" not in recall.model_fields_set and ranks_both_ways:
        method, method_from = "hybrid", "platform"
        if "hybrid_mode" not in recall.model_fields_set:
            hybrid_mode = "rrf"
    return AppliedRecall(
        top_k=recall.top_k if recall.top_k is not None else RAG_TOP_K,
        top_k_from="route" if recall.top_k is not None else "platform",
        min_similarity=threshold,
        min_similarity_from=threshold_from,
        embedder=embedder,
        method=method,
        hybrid_mode=hybrid_mode,
        method_from=method_from,
    )


def memory_recall(
    recall: RecallConfig,
    embedder: Embedder,
    *,
    store_threshold: float | None = None,
    store_limit: int | None = None,
) -> AppliedRecall:
    """A memory recall's values: the match block's, else the store's ``default_similarity_threshold``
    / ``default_retrieval_limit``, else the embedder's."""
    threshold_from: RecallOrigin
    limit_from: RecallOrigin
    if recall.min_similarity is not None:
        threshold, threshold_from = recall.min_similarity, "route"
    elif store_threshold is not None:
        threshold, threshold_from = store_threshold, "store"
    else:
        threshold, threshold_from = embedder.defaults.memory_similarity_threshold, "embedder"
    if recall.top_k is not None:
        limit, limit_from = recall.top_k, "route"
    elif store_limit is not None:
        limit, limit_from = store_limit, "store"
    else:
        limit, limit_from = embedder.defaults.memory_retrieval_limit, "embedder"
    return AppliedRecall(
        top_k=limit,
        top_k_from=limit_from,
        min_similarity=threshold,
        min_similarity_from=threshold_from,
        embedder=embedder,
        defaults_fields=("memory_similarity_threshold", "memory_retrieval_limit"),
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
    features: LocalFeatures | None = None  # what the local judge saw and made of it

    def judge_trace(self) -> dict[str, Any]:
        """The local judge's features for the replay record's trace and the preview."""
        if self.features is None:
            return {}
        return {
            "bm25_normalised": round(self.features.bm25_normalised, 6),
            "judge_signal": None
            if self.features.signal is None
            else round(self.features.signal, 6),
            "judge_order_signal": None
            if self.features.order_signal is None
            else round(self.features.order_signal, 6),
        }


def judge_usage_note(usage: LLMUsage, price: Price | None = None) -> dict[str, Any]:
    """The judge's calls as the replay record and the preview show them: the tokens the answers
    reported, their cost at the judge deployment's ``price`` (null when it has none)."""
    return {
        "calls": usage.calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        # Cached input at its own rate, as a call through the gateway is priced.
        "cost_usd": usage_cost(price, usage.provider_usage()),
    }


@dataclass
class MatchResult:
    decisions: list[Decision] = field(default_factory=list)
    judged: bool = False
    judge_error: str | None = None
    # Which judge was asked (``local``, ``deployment:<name>``); None without a judge block.
    judge: str | None = None
    # The local judge's calibrations used (one per collection, or the prior), as summaries.
    calibration: list[dict[str, Any]] | None = None
    # A deployment judge's calls and the tokens they reported (None for the local judge).
    judge_usage: LLMUsage | None = None
    judge_price: Price | None = None  # the deployment judge's price

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
        if self.calibration is not None:
            notes["judge_calibration"] = self.calibration
        if self.judge_usage is not None:
            notes["judge_usage"] = judge_usage_note(self.judge_usage, self.judge_price)
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
    calibrations: Mapping[str, JudgeCalibration] | None = None,
    *,
    ranked_recall: bool = True,
) -> MatchResult:
    """Judge the recalled ``hits`` and keep the best. ``request`` gives the default judge (the
    route's upstream deployment) and the tenant's outbound allow-list; without it a block with no
    deployment is judged locally. ``calibrations`` (collection name → calibration) tell the local
    judge what its scores mean for each hit's collection; a hit of another is judged on the
    prior. ``ranked_recall`` says the hits come best first (a recall); False for candidates in
    another order (the newest chunks of a judge-only block), where the judge's order alone
    decides."""
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
    deployment = judge.deployment
    if request is not None and not request.judge_calls:
        deployment, default = LOCAL, None  # no model call: the local judge scores
    label = asked_label(deployment, default)  # what a failure names if none is found
    usage: LLMUsage | None = None
    price: Price | None = None
    try:
        chosen = await judge_for_async(deployment, allowlist=allowlist, default=default)
        label = chosen.label
        price = chosen.price if isinstance(chosen, LLMJudge) else None
        judged = [
            JudgeCandidate(
                text=d.hit.text,
                title=d.hit.title,
                cosine=d.hit.cosine,
                bm25=d.hit.bm25,
                calibration=(calibrations or {}).get(d.hit.collection),
                vector=d.hit.vector,
            )
            for d in candidates
        ]
        if isinstance(chosen, LocalJudge):
            explained = chosen.explain(query, judged, feedback=judge.feedback)
            for decision, features in zip(candidates, explained, strict=True):
                decision.features = features
            scores = [features.score for features in explained]
        else:
            with metered() as usage:
                scores = await chosen.score(query, judged)
    except JudgeError as error:
        metrics.count_judge(metrics.judge_feature(), ok=False)
        if judge.on_error == "block":
            raise JudgeBlocked(f"relevance judge failed ({label}): {error}") from error
        for decision in candidates:
            within = decision.recall_rank <= judge.top_k
            decision.kept = within
            decision.reason = "judge_failed_recall_order" if within else "beyond_top_k"
        return MatchResult(
            decisions=decisions,
            judged=False,
            judge_error=str(error),
            judge=label,
            judge_usage=usage,
            judge_price=price,
        )
    metrics.count_judge(metrics.judge_feature(), ok=True)
    for decision, score in zip(candidates, scores, strict=True):
        decision.judge_score = score
    fused = judge.order == "fused" and ranked_recall
    ranked = held_first(fused_order(candidates), judge) if fused else judge_order(candidates)
    # ``top_k`` counts documents: a further chunk of a document already kept is kept with it
    # (more of the same answer) without taking the place of another document.
    documents: set[tuple[str, str]] = set()
    for decision in ranked:
        score = decision.judge_score or 0.0
        held = fused and recall_holds(decision.recall_rank, score, judge)
        document = (decision.hit.collection, decision.hit.document_id)
        if score < judge.min_score and not held:
            decision.reason = "below_min_score"
        elif document not in documents and len(documents) >= judge.top_k:
            decision.reason = "beyond_top_k"
        else:
            decision.kept = True
            decision.reason = "kept" if score >= judge.min_score else "kept_recall_rank"
            documents.add(document)
    order = {id(d): i for i, d in enumerate(ranked)}
    decisions.sort(key=lambda d: (not d.kept, order.get(id(d), len(order) + d.recall_rank)))
    calibration = None
    if isinstance(chosen, LocalJudge):
        # one summary per calibration: a hit judged on the prior because its collection has none
        # and one whose backend named no calibration (None) share the prior's
        used = {id(c.calibration or PRIOR): c.calibration or PRIOR for c in judged}
        calibration = [found.summary() for found in used.values()]
    return MatchResult(
        decisions=decisions,
        judged=True,
        judge=label,
        calibration=calibration,
        judge_usage=usage,
        judge_price=price,
    )


# --- the keep order -------------------------------------------------------------------------------

# Reciprocal rank fusion's constant (Cormack et al.): with k = 60 neither list's first place
# outweighs the other's, and agreement of both ranks wins over either alone.
FUSION_K = 60


def judge_order(candidates: list[Decision]) -> list[Decision]:
    """The judge's order: best score first (the local judge's feedback signal where it has one),
    the recall order among equal ones."""
    return sorted(candidates, key=lambda d: (-order_value(d), d.recall_rank))


def order_value(decision: Decision) -> float:
    features = decision.features
    if features is not None and features.order_signal is not None:
        return features.order_signal
    return decision.judge_score or 0.0


def fused_order(candidates: list[Decision]) -> list[Decision]:
    """Reciprocal rank fusion of the judge's rank and the recall's (ties: the judge's order)."""
    by_judge = judge_order(candidates)
    judge_rank = {id(d): rank for rank, d in enumerate(by_judge, start=1)}

    def fused(decision: Decision) -> float:
        return 1.0 / (FUSION_K + judge_rank[id(decision)]) + 1.0 / (FUSION_K + decision.recall_rank)

    return sorted(by_judge, key=lambda d: (-fused(d), judge_rank[id(d)]))


def held_first(ranked: list[Decision], judge: JudgeConfig) -> list[Decision]:
    """The keep's order: the held candidates (the recall's first ``hold_recall`` that pass their
    cut) first, in the recall's order, then the rest in ``ranked``'s order."""
    held = sorted(
        (d for d in ranked if recall_holds(d.recall_rank, d.judge_score or 0.0, judge)),
        key=lambda d: d.recall_rank,
    )
    return held + [
        d for d in ranked if not recall_holds(d.recall_rank, d.judge_score or 0.0, judge)
    ]


def recall_holds(recall_rank: int, score: float, judge: JudgeConfig) -> bool:
    """Whether a candidate is held: among the recall's first ``hold_recall`` (and ``top_k``) and
    scoring at least ``hold_min_score`` (unwritten: ``min_score``)."""
    cut = judge.min_score if judge.hold_min_score is None else judge.hold_min_score
    return recall_rank <= min(judge.hold_recall, judge.top_k) and score >= cut


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
