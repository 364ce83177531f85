"""Relevance judges: the calibrated local judge, the LLM judge against a real loopback server
that plays the model, and the choice of a judge from settings."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import override_settings

from contextplatform.core.llm import LLMDeployment
from sources.judge import (
    JudgeCandidate,
    JudgeError,
    LLMJudge,
    LocalJudge,
    judge_for,
    known_deployments,
)
from sources.judge_calibration import PRIOR
from sources.judge_lexical import Bm25, min_max
from tests.fake_models import ModelReply, PlayedModel, chat_reply, played_model

QUERY = "how do I get a refund for a damaged order"


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def local_scores(candidates: list[JudgeCandidate], query: str = QUERY) -> list[float]:
    return run(LocalJudge().score(query, candidates))


def featured(cosines: list[float], bm25s: list[float]) -> list[JudgeCandidate]:
    return [
        JudgeCandidate(text=f"document {i}", cosine=c, bm25=b)
        for i, (c, b) in enumerate(zip(cosines, bm25s, strict=True))
    ]


# --------------------------------------------------------------------------------------------
# LocalJudge


def test_local_scores_are_probabilities_in_order() -> None:
    candidates = featured([0.9, 0.1, 0.5, -0.3], [12.0, 0.0, 3.0, 1.0])
    scores = local_scores(candidates)
    assert len(scores) == 4
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores[0] == max(scores) and scores[3] == min(scores)
    assert local_scores([]) == []


@pytest.mark.parametrize("position", [0, 1, 2])
def test_local_is_monotonic_in_cosine(position: int) -> None:
    previous = -1.0
    for cosine in [-0.2, 0.0, 0.2, 0.4, 0.6, 0.8, 1.0]:
        cosines = [0.5, 0.5, 0.5]
        cosines[position] = cosine
        score = local_scores(featured(cosines, [4.0, 2.0, 1.0]))[position]
        assert score > previous
        previous = score


@pytest.mark.parametrize("position", [0, 1, 2])
def test_local_is_monotonic_in_bm25(position: int) -> None:
    scores = []
    for bm25 in [0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 20.0]:
        bm25s = [1.5, 2.5, 4.0]
        bm25s[position] = bm25
        scores.append(local_scores(featured([0.6, 0.6, 0.6], bm25s))[position])
    assert scores == sorted(scores)
    assert scores[-1] > scores[0]


def test_calibration_separates_clear_cases() -> None:
    scores = local_scores(featured([0.85, 0.45, 0.15], [14.0, 5.0, 0.0]))
    assert scores[0] > 0.5  # a near-duplicate of the query, best lexical match
    assert scores[2] < 0.5  # unrelated, no lexical match
    # monotonic by construction: a match sits above the background
    assert PRIOR.combined.match_mean > PRIOR.combined.background_mean
    assert PRIOR.lexical.match_mean > PRIOR.lexical.background_mean
    assert PRIOR.combined.probability(0.8 * 0.9 + 0.2 * 1.0) > 0.5
    assert PRIOR.combined.probability(0.8 * 0.1 + 0.2 * 0.0) < 0.5


def test_missing_bm25_is_computed_from_the_texts() -> None:
    candidates = [
        JudgeCandidate(text="Weather report for the weekend.", cosine=0.5),
        JudgeCandidate(text="Refund policy: a damaged order gets a refund.", cosine=0.5),
        JudgeCandidate(text="Shipping times", title="Order refund", cosine=0.5, bm25=9.0),
    ]
    scores = local_scores(candidates)
    assert scores[1] > scores[0]  # a caller's partial BM25 is replaced by one computed for all
    assert scores[2] > scores[0]  # the title counts


def test_missing_cosine_uses_the_lexical_calibration() -> None:
    candidates = [
        JudgeCandidate(text="refund for a damaged order", bm25=7.0),
        JudgeCandidate(text="weather", bm25=0.0),
        JudgeCandidate(text="refund", bm25=7.0, cosine=0.9),
    ]
    scores = local_scores(candidates)
    assert scores[0] == pytest.approx(PRIOR.lexical.probability(1.0))
    assert scores[1] == pytest.approx(PRIOR.lexical.probability(0.0))
    assert scores[2] == pytest.approx(PRIOR.combined.probability(0.8 * 0.9 + 0.2 * 1.0))
    nothing = local_scores([JudgeCandidate(text="a"), JudgeCandidate(text="b")])
    assert all(0.0 <= s <= 1.0 for s in nothing)


def test_non_finite_features_count_as_missing() -> None:
    scores = local_scores(featured([float("nan"), 0.5], [float("inf"), 1.0]))
    assert all(0.0 <= s <= 1.0 for s in scores)


def test_bm25_and_min_max() -> None:
    index = Bm25(["the cat sat", "the dog", "cat cat cat", ""])
    scores = index.scores("cat")
    assert scores[1] == scores[3] == 0.0
    assert scores[2] > scores[0] > 0.0
    assert index.scores("unknown words") == [0.0] * 4
    assert min_max([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]
    assert min_max([3.0]) == [1.0] and min_max([0.0, 0.0]) == [0.0, 0.0] and min_max([]) == []


# --------------------------------------------------------------------------------------------
# A loopback server that plays the model.


def scores_reply(scores: list[Any]) -> Callable[[dict[str, Any]], ModelReply]:
    return lambda body: chat_reply(json.dumps({"scores": scores}))


@pytest.fixture
def model() -> Iterator[PlayedModel]:
    with played_model() as played:
        yield played


def llm(model: PlayedModel, **fields: Any) -> LLMJudge:
    config: dict[str, Any] = {"name": "judge-llm", "url": model.url, "model": "judge-1"}
    config.update(api_key="sk-test", timeout_ms=2000)
    config.update(fields)
    return LLMJudge(LLMDeployment(**config))


DOCUMENTS = [
    JudgeCandidate(text="Refunds for damaged orders are issued within 5 days.", title="Refunds"),
    JudgeCandidate(text="Our office is closed on public holidays."),
    JudgeCandidate(text="Report damage with a photo of the parcel.", title="Damage"),
]


# --------------------------------------------------------------------------------------------
# LLMJudge


def test_llm_scores_parsed_in_order_from_one_batched_request(model: PlayedModel) -> None:
    model.reply = scores_reply([0.9, 0.05, 0.6])
    assert run(llm(model).score(QUERY, DOCUMENTS)) == [0.9, 0.05, 0.6]

    assert len(model.seen) == 1
    request = model.seen[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body["model"] == "judge-1"
    assert request.body["response_format"] == {"type": "json_object"}
    prompt = "\n".join(message["content"] for message in request.body["messages"])
    assert QUERY in prompt
    for index, document in enumerate(DOCUMENTS):
        assert f'<document index="{index}"' in prompt
        assert document.text in prompt
    assert '<document index="3"' not in prompt
    assert 'title="Refunds"' in prompt


def test_llm_truncates_documents_and_omits_optional_fields(model: PlayedModel) -> None:
    model.reply = scores_reply([1, 0])
    long = JudgeCandidate(text="a" * 50 + "TAIL-MARKER")
    judge = llm(model, api_key=None, json_mode=False, max_document_chars=50)
    assert run(judge.score(QUERY, [long, DOCUMENTS[1]])) == [1.0, 0.0]
    request = model.seen[0]
    prompt = request.body["messages"][1]["content"]
    assert "a" * 50 in prompt and "TAIL-MARKER" not in prompt
    assert "Authorization" not in request.headers
    assert "response_format" not in request.body


def test_llm_accepts_one_code_fence(model: PlayedModel) -> None:
    model.reply = lambda body: chat_reply('```json\n{"scores": [0.2, 0.4, 0.8]}\n```')
    assert run(llm(model).score(QUERY, DOCUMENTS)) == [0.2, 0.4, 0.8]


def test_llm_with_no_candidates_makes_no_call(model: PlayedModel) -> None:
    assert run(llm(model).score(QUERY, [])) == []
    assert model.seen == []


MALFORMED: dict[str, Callable[[dict[str, Any]], ModelReply]] = {
    "too few scores": scores_reply([0.9, 0.1]),
    "too many scores": scores_reply([0.9, 0.1, 0.3, 0.4]),
    "out of range": scores_reply([0.9, 1.7, 0.3]),
    "negative": scores_reply([0.9, -0.1, 0.3]),
    "string number": scores_reply([0.9, "0.5", 0.3]),
    "boolean": scores_reply([0.9, True, 0.3]),
    "null score": scores_reply([0.9, None, 0.3]),
    "text instead of JSON": lambda body: chat_reply("Document 0 is relevant, the others are not."),
    "list instead of object": lambda body: chat_reply("[0.9, 0.1, 0.3]"),
    "no scores key": lambda body: chat_reply('{"relevance": [0.9, 0.1, 0.3]}'),
    "scores not a list": lambda body: chat_reply('{"scores": 0.9}'),
    "missing choices": lambda body: (200, b'{"id": "x", "object": "chat.completion"}'),
    "empty choices": lambda body: (200, b'{"choices": []}'),
    "null content": lambda body: chat_reply(None),
    "body not JSON": lambda body: (200, b"<html>gateway</html>"),
    "HTTP 500": lambda body: (500, b'{"error": {"message": "overloaded"}}'),
    "HTTP 401": lambda body: (401, b'{"error": {"message": "bad key"}}'),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_llm_malformed_answers_raise(model: PlayedModel, case: str) -> None:
    model.reply = MALFORMED[case]
    with pytest.raises(JudgeError):
        run(llm(model).score(QUERY, DOCUMENTS))
    assert len(model.seen) == 1


def test_llm_error_messages_say_what_went_wrong(model: PlayedModel) -> None:
    model.reply = scores_reply([0.9, 0.1])
    with pytest.raises(JudgeError, match="2 scores for 3 documents"):
        run(llm(model).score(QUERY, DOCUMENTS))
    model.reply = MALFORMED["HTTP 500"]
    with pytest.raises(JudgeError, match="HTTP 500"):
        run(llm(model).score(QUERY, DOCUMENTS))
    model.reply = MALFORMED["out of range"]
    with pytest.raises(JudgeError, match=r"score 1 is outside \[0, 1\]: 1.7"):
        run(llm(model).score(QUERY, DOCUMENTS))


def test_llm_hang_beyond_timeout_raises(model: PlayedModel) -> None:
    model.hang = True
    started = time.perf_counter()
    with pytest.raises(JudgeError, match="timed out after 300 ms"):
        run(llm(model, timeout_ms=300).score(QUERY, DOCUMENTS))
    assert time.perf_counter() - started < 3.0
    assert len(model.seen) == 1


def test_llm_unreachable_raises() -> None:
    judge = LLMJudge(
        LLMDeployment(name="gone", url="http://127.0.0.1:9", model="m", timeout_ms=1000)
    )
    with pytest.raises(JudgeError, match="gone"):
        run(judge.score(QUERY, DOCUMENTS))


# --------------------------------------------------------------------------------------------
# judge_for


def test_judge_for_local() -> None:
    assert isinstance(judge_for(None), LocalJudge)
    assert judge_for("local").name == "local"


def test_judge_for_unknown_deployment() -> None:
    with override_settings(LLM_DEPLOYMENTS={"small": {"url": "http://127.0.0.1:1", "model": "m"}}):
        with pytest.raises(JudgeError, match="unknown judge deployment 'big'"):
            judge_for("big")
        assert known_deployments() == ["local", "small"]
    with override_settings(LLM_DEPLOYMENTS={}):
        assert known_deployments() == ["local"]


def test_judge_for_routes_to_a_configured_deployment(
    model: PlayedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-from-env")
    model.reply = scores_reply([0.3, 0.2, 0.1])
    deployments = {
        "fast": {
            "url": model.url + "/",
            "model": "small-judge",
            "api_key_env": "JUDGE_TEST_KEY",
            "timeout_ms": 1500,
            "max_document_chars": 500,
        }
    }
    with override_settings(LLM_DEPLOYMENTS=deployments):
        judge = judge_for("fast")
    assert isinstance(judge, LLMJudge) and judge.name == "fast"
    assert judge.deployment.timeout_ms == 1500 and judge.deployment.max_document_chars == 500
    assert run(judge.score(QUERY, DOCUMENTS)) == [0.3, 0.2, 0.1]
    assert model.seen[0].path == "/v1/chat/completions"
    assert model.seen[0].headers["authorization"] == "Bearer sk-from-env"
    assert model.seen[0].body["model"] == "small-judge"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"url": "http://127.0.0.1:1", "model": "m", "api_key_env": "JUDGE_NO_SUCH_VAR"},
            "not set",
        ),
        ({"url": "ftp://host", "model": "m"}, "http"),
        ({"url": "http://127.0.0.1:1"}, "model"),
        ({"url": "http://127.0.0.1:1", "model": "m", "timeout_ms": 0}, "timeout_ms"),
        ("not an object", "object"),
    ],
)
def test_judge_for_refuses_a_broken_deployment(config: Any, message: str) -> None:
    with (
        override_settings(LLM_DEPLOYMENTS={"bad": config}),
        pytest.raises(JudgeError, match=message),
    ):
        judge_for("bad")
