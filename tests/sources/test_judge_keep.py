"""What a judge block keeps against what its recall ranked: with ``order: fused`` (the default) the
keep goes in reciprocal rank fusion of both ranks, and the recall's first ``hold_recall``
candidates that pass their cut keep their places, so a judge that prefers the wrong documents
cannot make the keep worse than the recall's own first ``top_k``; ``order: judge`` keeps the
judge's order alone."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import pytest

from sources import matching
from sources.judge import Judge, JudgeCandidate
from sources.matching import JudgeConfig, MatchConfig, judge_and_keep
from sources.recall import RecallHit

# Recall order: three answers first, then five documents that do not answer; the judge scores the
# answers just below the cut and prefers every non-answer.
RELEVANT = {"a1": 3.0, "a2": 2.0, "a3": 1.0}
RECALLED = ["a1", "a2", "a3", "n1", "n2", "n3", "n4", "n5"]
SCORES = {"a1": 0.45, "a2": 0.4, "a3": 0.3, "n1": 0.95, "n2": 0.9, "n3": 0.85, "n4": 0.8}
SCORES["n5"] = 0.75


class FixedJudge(Judge):
    """A judge answering fixed scores by document text."""

    name = "fixed"

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores

    async def score(self, query: str, candidates: list[JudgeCandidate]) -> list[float]:
        return [self.scores[candidate.text] for candidate in candidates]


@pytest.fixture
def fixed_judge(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    scores = dict(SCORES)

    async def chosen(*args: Any, **kwargs: Any) -> Judge:
        return FixedJudge(scores)

    monkeypatch.setattr(matching, "judge_for_async", chosen)
    return scores


def hits(order: Sequence[str]) -> list[RecallHit]:
    return [
        RecallHit(None, name, "", name, collection="kb", cosine=0.5 - i / 100, bm25=1.0)
        for i, name in enumerate(order)
    ]


def ndcg(ranked: Sequence[str], cutoff: int = 10) -> float:
    dcg = sum(RELEVANT.get(doc, 0.0) / math.log2(i + 2) for i, doc in enumerate(ranked[:cutoff]))
    ideal = sorted(RELEVANT.values(), reverse=True)[:cutoff]
    return dcg / sum(gain / math.log2(i + 2) for i, gain in enumerate(ideal))


def kept(judge: JudgeConfig, order: Sequence[str] = RECALLED) -> list[str]:
    result = asyncio.run(judge_and_keep("q", hits(order), judge))
    return [decision.hit.text for decision in result.kept]


def test_the_old_order_drops_the_recalls_answers(fixed_judge: dict[str, float]) -> None:
    # both ways the judge alone subtracts: its cut, and its order within top_k
    assert kept(JudgeConfig(order="judge", top_k=3)) == ["n1", "n2", "n3"]
    fixed_judge.update({"a1": 0.6, "a2": 0.55, "a3": 0.52})
    assert kept(JudgeConfig(order="judge", top_k=3)) == ["n1", "n2", "n3"]


def test_the_fused_keep_is_never_worse_than_the_recalls_first_top_k(
    fixed_judge: dict[str, float],
) -> None:
    recall_first = ndcg(RECALLED[:3])
    # answers above the cut but ranked last by the judge: held by their recall ranks
    fixed_judge.update({"a1": 0.6, "a2": 0.55, "a3": 0.52})
    held = kept(JudgeConfig(top_k=3, hold_recall=3))
    assert sorted(held) == ["a1", "a2", "a3"]
    assert ndcg(held) >= recall_first
    # the fused order alone already keeps an answer the judge alone drops
    assert "a1" in kept(JudgeConfig(top_k=3))
    # answers below the cut: held with a lower cut for them (the judge is not confident)
    fixed_judge.update({"a1": 0.45, "a2": 0.4, "a3": 0.3})
    lenient = kept(JudgeConfig(top_k=3, hold_recall=3, hold_min_score=0.2))
    assert sorted(lenient) == ["a1", "a2", "a3"] and ndcg(lenient) >= recall_first
    # with top_k above hold_recall the other places go to the fused order
    wider = kept(JudgeConfig(top_k=6, hold_recall=3, hold_min_score=0.2))
    assert set(wider[:6]) >= {"a1", "a2", "a3"} and ndcg(wider) >= ndcg(RECALLED[:6])


def test_a_held_candidate_the_judge_is_confident_about_is_dropped(
    fixed_judge: dict[str, float],
) -> None:
    fixed_judge.update({"a1": 0.6, "a2": 0.1, "a3": 0.52})
    result = asyncio.run(judge_and_keep("q", hits(RECALLED), JudgeConfig(top_k=3, hold_recall=3)))
    reasons = {d.hit.text: d.reason for d in result.decisions}
    assert reasons["a2"] == "below_min_score"
    assert {d.hit.text for d in result.kept} == {"a1", "a3", "n1"}


def test_held_below_the_cut_says_so(fixed_judge: dict[str, float]) -> None:
    result = asyncio.run(
        judge_and_keep("q", hits(RECALLED), JudgeConfig(top_k=3, hold_recall=3, hold_min_score=0.2))
    )
    reasons = {d.hit.text: d.reason for d in result.decisions}
    assert reasons["a1"] == reasons["a2"] == reasons["a3"] == "kept_recall_rank"
    assert reasons["n1"] == "beyond_top_k"


def test_fusion_lets_the_judge_promote_what_both_rank_well(fixed_judge: dict[str, float]) -> None:
    # nothing held (hold_recall 0, the default): a candidate both rank second beats one only the judge ranks
    # first and the recall last
    fixed_judge.clear()
    fixed_judge.update({"x": 0.9, "y": 0.8, "z": 0.7, "w": 0.6})
    assert kept(JudgeConfig(top_k=2), ["y", "z", "w", "x"])[0] == "y"
    assert kept(JudgeConfig(top_k=2, order="judge"), ["y", "z", "w", "x"]) == ["x", "y"]


def test_a_judge_only_block_keeps_the_judges_order(fixed_judge: dict[str, float]) -> None:
    # candidates that are not a recall (the newest chunks) have no rank to fuse
    result = asyncio.run(
        judge_and_keep("q", hits(RECALLED), JudgeConfig(top_k=3), ranked_recall=False)
    )
    assert [d.hit.text for d in result.kept] == ["n1", "n2", "n3"]


def test_existing_blocks_still_validate() -> None:
    block = {"judge": {"preset": "relevance", "top_k": 6, "min_score": 0.5, "max_candidates": 64}}
    judge = MatchConfig.model_validate(block).judge
    assert judge is not None and judge.order == "fused" and judge.hold_recall == 0
    assert judge.hold_min_score is None
