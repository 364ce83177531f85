"""The metrics of an evaluation run, computed by hand on small cases."""

from __future__ import annotations

import math

import pytest

from contextplatform.evals.scoring import Expected, Kept, metrics, ndcg, regression, score


def test_a_case_hits_only_when_everything_it_expects_was_kept() -> None:
    kept = Kept(
        documents=["refund", "shipping"],
        memory_texts=["(2026-03-14) User lives in Lisbon"],
        texts=["Refunds within 30 days", "(2026-03-14) User lives in Lisbon"],
    )
    assert score(Expected(documents=["refund"], memories_containing=["lisbon"]), kept).hit
    missed = score(Expected(documents=["refund", "warranty"], text_containing=["60 days"]), kept)
    assert not missed.hit
    assert missed.missing == {"documents": ["warranty"], "text_containing": ["60 days"]}
    # Memory text counts only from memories, not from any kept text.
    only_text = Kept(texts=["User lives in Lisbon"])
    assert not score(Expected(memories_containing=["Lisbon"]), only_text).hit


def test_precision_and_ndcg_over_the_kept_order() -> None:
    first = score(Expected(documents=["a"]), Kept(documents=["a", "b"]))
    assert first.precision == 0.5 and first.ndcg == 1.0
    second = score(Expected(documents=["a"]), Kept(documents=["b", "a"]))
    assert second.precision == 0.5
    assert second.ndcg == pytest.approx(1 / math.log2(3))
    nothing = score(Expected(documents=["a"]), Kept())
    assert nothing.precision == 0.0 and nothing.ndcg == 0.0
    # Chunks of one document count once, where the document was first kept.
    assert score(Expected(documents=["a"]), Kept(documents=["a", "a", "b"])).precision == 0.5
    # The cutoff is the kept count, at most 10.
    assert ndcg([0] * 10 + [1], 1) == 0.0


def test_metrics_average_over_the_cases_that_name_documents() -> None:
    scores = [
        score(Expected(documents=["a"]), Kept(documents=["a"])),
        score(Expected(documents=["a"]), Kept(documents=["b"])),
        score(Expected(text_containing=["x"]), Kept(texts=["x"])),
    ]
    got = metrics(scores, [100, 200, 300], [5.0, 1.0, 3.0])
    assert got == {
        "cases": 3,
        "hit_rate": pytest.approx(2 / 3, abs=1e-4),
        "kept_precision": 0.5,
        "ndcg": 0.5,
        "tokens_mean": 200.0,
        "latency_p50_ms": 3.0,
    }


def test_a_regression_is_a_lower_hit_rate_or_ten_percent_more_tokens() -> None:
    before = {"hit_rate": 1.0, "tokens_mean": 400.0}
    assert regression({"hit_rate": 1.0, "tokens_mean": 440.0}, before) is None
    assert "hit rate fell from 100% to 50%" in str(
        regression({"hit_rate": 0.5, "tokens_mean": 400.0}, before)
    )
    assert "mean tokens rose 25%" in str(
        regression({"hit_rate": 1.0, "tokens_mean": 500.0}, before)
    )
    assert regression({"hit_rate": 1.0, "tokens_mean": 300.0}, before) is None
