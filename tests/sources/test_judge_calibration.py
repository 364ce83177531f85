"""The local judge's collection calibration: the pure model, then a collection measured on its own
chunks at ingestion and used by a rag source's judge (real PostgreSQL, the local embedder)."""

from __future__ import annotations

import asyncio
import random

import pytest

from sources.judge import JudgeCandidate, LocalJudge
from sources.judge_calibration import (
    PRIOR,
    Candidate,
    Discriminant,
    JudgeCalibration,
    PseudoQuery,
    calibrate,
    candidate_set,
    pseudo_queries,
    sentences,
)
from sources.matching import JudgeConfig, judge_and_keep
from sources.recall import RecallHit


def test_discriminant_is_half_at_the_midpoint_and_monotonic() -> None:
    model = Discriminant(match_mean=0.7, background_mean=0.1, spread=0.1)
    assert model.midpoint == pytest.approx(0.4)
    assert model.probability(0.4) == pytest.approx(0.5)
    values = [model.probability(x / 10) for x in range(-5, 11)]
    assert values == sorted(values) and 0.0 <= values[0] < values[-1] <= 1.0
    assert model.probability(0.7) > 0.99 and model.probability(0.1) < 0.01


def test_fitted_pools_the_spread_and_floors_it() -> None:
    fitted = Discriminant.fitted([0.6, 0.8], [0.1, 0.3])
    assert fitted.match_mean == pytest.approx(0.7)
    assert fitted.background_mean == pytest.approx(0.2)
    assert fitted.spread == pytest.approx(((4 * 0.01) / 2) ** 0.5)
    assert Discriminant.fitted([0.5, 0.5], [0.2, 0.2]).spread == 0.03  # no spread: the floor


def test_sentences_and_pseudo_queries_spread_over_documents() -> None:
    text = "Short. This sentence has enough words to count.\nAnother line with five words. " * 2
    assert (
        sentences(text)
        == [
            "This sentence has enough words to count.",
            "Another line with five words.",
        ]
        * 2
    )
    # a one-line document matches itself trivially: it cannot stand for a question about it
    assert sentences("The refund window is thirty days from delivery.") == []
    documents = [
        "First document opens here today. Its middle sentence says something. It ends on this line.",
        "Second document opens like this. It carries a second sentence. And a third one here.",
        "tiny",
    ]
    chosen = pseudo_queries(documents, limit=4, seed=1)
    assert len(chosen) == 4
    assert {query.owner for query in chosen[:2]} == {0, 1}  # one per document before any second
    assert all(query.owner != 2 for query in chosen)
    middle = next(query for query in chosen if query.owner == 0)
    assert middle.text == "Its middle sentence says something."
    assert len(pseudo_queries(documents, limit=100)) == 6  # every usable sentence, then stop


def test_calibrate_learns_this_collections_levels() -> None:
    query = PseudoQuery("refund within thirty days of delivery", 0)
    found = [
        Candidate("refund within thirty days of delivery for any product", 0.62, "own"),
        Candidate("shipping to norway takes three days", 0.12, "background"),
        Candidate("account security and passwords", 0.05, "background"),
        Candidate("exchange within thirty days", 0.40, "recalled"),
    ]
    calibration = calibrate([query, query], [found, found], documents=4, origin="collection kb v1")
    assert calibration is not None
    assert calibration.origin == "collection kb v1" and calibration.pseudo_queries == 2
    combined = calibration.combined
    assert combined.match_mean > 0.6 and combined.background_mean < 0.15
    assert calibration.probability(0.6, 1.0) > 0.5 > calibration.probability(0.1, 0.0)
    assert JudgeCalibration.from_dict(calibration.as_dict()) == calibration
    assert calibrate([query], [[found[0]]], documents=1, origin="x") is None  # no background


def test_candidate_set_is_recall_own_chunk_and_backgrounds_of_other_documents() -> None:
    # chunks 10 and 11 belong to document "a" (the sentence's), 12-14 to others
    pool = [(10, "own"), (11, "same document"), (12, "b"), (13, "c"), (14, "d")]
    documents = ["a", "a", "b", "c", "d"]
    cosines = [0.6, 0.5, 0.3, 0.2, 0.1]
    recalled = [(10, "own", 0.6), (11, "same document", 0.5), (99, "outside the sample", 0.4)]
    found = candidate_set(0, pool, documents, cosines, recalled, random.Random(0))
    roles = {candidate.text: candidate.role for candidate in found}
    # its own chunk once, as "own" though the recall found it; a background never shares its
    # document; the recall may reach past the sample
    assert roles["own"] == "own" and [c.role for c in found].count("own") == 1
    assert roles["same document"] == "recalled" and roles["outside the sample"] == "recalled"
    backgrounds = {c.text for c in found if c.role == "background"}
    assert backgrounds == {"b", "c", "d"}  # fewer others than BACKGROUNDS_PER_QUERY: all of them
    assert {c.text: c.cosine for c in found}["c"] == 0.2
    # a recalled chunk drawn as a background is counted once, as a background
    again = candidate_set(0, pool, documents, cosines, [(12, "b", 0.3)], random.Random(0))
    assert [c.role for c in again if c.text == "b"] == ["background"]


def test_the_judge_reads_each_candidates_calibration() -> None:
    strict = JudgeCalibration(
        Discriminant(0.9, 0.6, 0.05), Discriminant(1.0, 0.5, 0.1), 10, 10, "collection narrow v1"
    )
    lenient = JudgeCalibration(
        Discriminant(0.4, 0.0, 0.05), Discriminant(1.0, 0.0, 0.1), 10, 10, "collection broad v1"
    )
    candidates = [
        JudgeCandidate(text="same words", cosine=0.35, bm25=1.0, calibration=strict),
        JudgeCandidate(text="same words", cosine=0.35, bm25=1.0, calibration=lenient),
        JudgeCandidate(text="same words", cosine=0.35, bm25=1.0),
    ]
    explained = LocalJudge().explain("same words", candidates)
    assert explained[0].score < 0.5 < explained[1].score  # one cosine, two collections
    assert explained[2].score == pytest.approx(PRIOR.probability(0.35, 1.0))
    assert explained[0].signal == pytest.approx(0.8 * 0.35 + 0.2 * 1.0)
    assert asyncio.run(LocalJudge().score("same words", candidates)) == [f.score for f in explained]


def test_the_match_notes_name_each_calibration_used_once() -> None:
    narrow = JudgeCalibration(
        Discriminant(0.9, 0.6, 0.05), Discriminant(1.0, 0.5, 0.1), 10, 10, "collection narrow v1"
    )
    hits = [
        RecallHit(None, "a", "", "refund policy", collection="narrow", cosine=0.8, bm25=1.0),
        RecallHit(None, "b", "", "refund window", collection="narrow", cosine=0.7, bm25=0.5),
        # calibrated "uncalibrated" names the prior itself; "external" is named by no backend
        RecallHit(None, "c", "", "shipping", collection="uncalibrated", cosine=0.3, bm25=0.1),
        RecallHit(None, "d", "", "passwords", collection="external", cosine=0.2, bm25=0.0),
    ]
    result = asyncio.run(
        judge_and_keep(
            "refund",
            hits,
            JudgeConfig(deployment="local"),
            calibrations={"narrow": narrow, "uncalibrated": PRIOR},
        )
    )
    assert [used["from"] for used in result.judge_notes()["judge_calibration"]] == [
        "collection narrow v1",
        PRIOR.origin,
    ]
