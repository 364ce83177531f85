"""The local judge's relevance feedback: its order reads each candidate against the query moved
toward the candidates its signal ranks first (Rocchio, computed from the candidates' cosines and
stored vectors alone); its scores, and so every cut, stay the calibrated signal's."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from sources.judge import JudgeCandidate, LocalJudge
from sources.judge_feedback import feedback_cosines
from sources.matching import JudgeConfig, judge_and_keep
from sources.recall import RecallHit


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


def test_feedback_cosines_are_the_cosines_to_the_moved_query() -> None:
    rng = np.random.default_rng(7)
    query = unit(rng.normal(size=16))
    vectors = np.array([unit(rng.normal(size=16)) for _ in range(8)])
    cosines = vectors @ query
    order = [int(i) for i in np.argsort(-cosines)]
    moved_query = unit(query + vectors[order[:3]].mean(axis=0))
    found = feedback_cosines(cosines.tolist(), list(vectors), order, 3)
    assert found == pytest.approx((vectors @ moved_query).tolist(), abs=1e-9)
    one = unit(query + vectors[order[0]])
    assert feedback_cosines(cosines.tolist(), list(vectors), order, 1) == pytest.approx(
        (vectors @ one).tolist(), abs=1e-9
    )


def test_no_feedback_without_depth_candidates_or_one_shape() -> None:
    assert feedback_cosines([0.5], [[1.0, 0.0]], [0], 0) is None
    assert feedback_cosines([], [], [], 3) is None
    assert feedback_cosines([0.5, 0.4], [[1.0, 0.0], [1.0]], [0, 1], 3) is None
    assert feedback_cosines([0.5, 0.4], [[1.0, 0.0], [float("nan"), 0.0]], [0, 1], 3) is None


# Three candidates in a plane: "best" answers, "near" sits a little further from the query but
# beside "best" (more of the same subject), "off" is as close to the query as "near" was on its
# own but points elsewhere.
QUERY = unit(np.array([1.0, 0.0, 0.0]))
VECTORS = {
    "best": unit(np.array([0.9, 0.4, 0.0])),
    "off": unit(np.array([0.8, -0.6, 0.0])),
    "near": unit(np.array([0.78, 0.55, 0.3])),
}


def candidates(with_vectors: bool) -> list[JudgeCandidate]:
    return [
        JudgeCandidate(
            text=name,
            cosine=float(VECTORS[name] @ QUERY),
            bm25=1.0,
            vector=VECTORS[name].tolist() if with_vectors else None,
        )
        for name in VECTORS
    ]


def test_the_order_reads_the_feedback_and_the_scores_do_not() -> None:
    judge = LocalJudge()
    plain = judge.explain("q", candidates(False))
    moved = judge.explain("q", candidates(True), feedback=1)
    assert [f.order_signal for f in plain] == [None, None, None]
    assert [f.score for f in moved] == [f.score for f in plain]  # the cut is the calibrated one
    signal = {name: f.signal for name, f in zip(VECTORS, plain, strict=True)}
    order = {name: f.order_signal for name, f in zip(VECTORS, moved, strict=True)}
    assert signal["off"] > signal["near"]  # against the query alone
    assert order["near"] > order["off"]  # against the query moved toward "best"
    assert judge.explain("q", candidates(True), feedback=0)[0].order_signal is None
    # one candidate without its vector: no feedback for any
    mixed = candidates(True)
    mixed[2] = JudgeCandidate(text="near", cosine=mixed[2].cosine, bm25=1.0)
    assert all(f.order_signal is None for f in judge.explain("q", mixed))


def kept(judge: JudgeConfig, with_vectors: bool) -> list[str]:
    recalled = [
        RecallHit(
            None,
            name,
            "",
            name,
            collection="kb",
            cosine=float(VECTORS[name] @ QUERY),
            bm25=1.0,
            vector=VECTORS[name] if with_vectors else None,
        )
        for name in VECTORS
    ]
    result = asyncio.run(judge_and_keep("q", recalled, judge))
    return [decision.hit.document_id for decision in result.decisions]


def test_the_keep_follows_the_feedback_order() -> None:
    by_judge = JudgeConfig(order="judge", min_score=0.0, feedback=1)
    assert kept(by_judge, with_vectors=False) == ["best", "off", "near"]
    assert kept(by_judge, with_vectors=True) == ["best", "near", "off"]
    assert kept(by_judge.model_copy(update={"feedback": 0}), with_vectors=True) == [
        "best",
        "off",
        "near",
    ]


def test_feedback_is_validated() -> None:
    assert JudgeConfig().feedback == 3
    with pytest.raises(ValueError):
        JudgeConfig(feedback=-1)
    with pytest.raises(ValueError):
        JudgeConfig(feedback=21)
