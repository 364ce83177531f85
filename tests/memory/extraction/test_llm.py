"""The LLM extractor (``memory/extraction/llm.py``) against a real loopback server that plays an
OpenAI-compatible model."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import override_settings

from contextplatform.core.llm import LLMDeployment
from memory.extraction.llm import LLMExtractor
from memory.extraction.types import (
    ExistingMemory,
    ExtractionError,
    MemoryDecision,
)
from tests.fake_models import ModelReply, PlayedModel, chat_reply, played_model
from tests.loopback import Seen

# --------------------------------------------------------------------------------------------
# A loopback server that plays the model.


@pytest.fixture
def model() -> Iterator[PlayedModel]:
    with played_model() as played:
        yield played


def decisions_reply(decisions: Any) -> Callable[[dict[str, Any]], ModelReply]:
    return lambda body: chat_reply(json.dumps({"decisions": decisions}))


def extractor(model: PlayedModel, **fields: Any) -> LLMExtractor:
    config: dict[str, Any] = {"name": "extractor-llm", "url": model.url, "model": "mem-1"}
    config.update(api_key="sk-test", timeout_ms=2000)
    config.update(fields)
    return LLMExtractor(LLMDeployment(**config))


EXISTING = [
    ExistingMemory(7, "User lives in Paris", [1.0, 0.0]),
    ExistingMemory(9, "User has a cat named Tom", [0.0, 1.0]),
]
USER = "I moved to Lyon last month, and sadly Tom died. Also I love jazz."
ASSISTANT = "I'm sorry to hear about Tom. Lyon has a great jazz scene!"


def prompt_of(seen: Seen) -> str:
    return "\n".join(message["content"] for message in seen.body["messages"])


# --------------------------------------------------------------------------------------------
# LLMExtractor


def test_llm_good_answer_is_parsed_from_one_request_per_turn(model: PlayedModel) -> None:
    model.reply = decisions_reply(
        [
            {"action": "update", "content": "User lives in Lyon", "kind": "fact", "id": 7},
            {"action": "delete", "id": "9"},  # a quoted id still names memory 9
            {"action": "add", "content": "User loves jazz", "kind": "preference", "id": None},
            {"action": "add", "content": "User moved to Lyon last month", "kind": "event"},
        ]
    )
    decisions = extractor(model).decide(USER, ASSISTANT, EXISTING)
    assert decisions == [
        MemoryDecision("update", "User lives in Lyon", "fact", 7),
        MemoryDecision("delete", "", None, 9),
        MemoryDecision("add", "User loves jazz", "preference"),
        MemoryDecision("add", "User moved to Lyon last month", "event"),
    ]

    assert len(model.seen) == 1
    request = model.seen[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body["model"] == "mem-1"
    assert request.body["temperature"] == 0
    assert request.body["response_format"] == {"type": "json_object"}
    data = json.loads(request.body["messages"][1]["content"].split("\n", 1)[1])
    assert data["existing_memories"] == [
        {"id": 7, "content": "User lives in Paris"},
        {"id": 9, "content": "User has a cat named Tom"},
    ]
    assert data["turn"] == {"user": USER, "assistant": ASSISTANT}
    assert "embedding" not in prompt_of(request)
    assert '"decisions"' in request.body["messages"][0]["content"]


def test_llm_tolerates_a_code_fence_extra_keys_and_no_decisions(model: PlayedModel) -> None:
    content = '```json\n{"decisions": [{"action": "add", "content": "User is vegan", "kind": "fact", "reason": "stated"}]}\n```'
    model.reply = lambda body: chat_reply(content)
    assert extractor(model).decide("I'm vegan.", "", []) == [
        MemoryDecision("add", "User is vegan", "fact")
    ]
    model.reply = decisions_reply([])
    assert extractor(model).decide("Thanks!", "You're welcome.", EXISTING) == []
    assert len(model.seen) == 2


def test_llm_is_told_the_day_the_turn_was_said(model: PlayedModel) -> None:
    model.reply = decisions_reply([])
    said = datetime(2025, 3, 14, 23, 30, tzinfo=UTC)
    extractor(model).decide(USER, ASSISTANT, EXISTING, observed_at=said)
    request = model.seen[0]
    data = json.loads(request.body["messages"][1]["content"].split("\n", 1)[1])
    assert data["turn"] == {"user": USER, "assistant": ASSISTANT, "date": "2025-03-14"}
    assert "the turn has a date" in request.body["messages"][0]["content"]


def test_llm_identical_adds_collapse_and_update_may_keep_the_kind(model: PlayedModel) -> None:
    model.reply = decisions_reply(
        [
            {"action": "add", "content": "User loves jazz", "kind": "preference"},
            {"action": "add", "content": "user loves jazz.", "kind": "preference"},
            {"action": "update", "content": "User lives in Lyon", "id": 7},
        ]
    )
    assert extractor(model).decide(USER, "", EXISTING) == [
        MemoryDecision("add", "User loves jazz", "preference"),
        MemoryDecision("update", "User lives in Lyon", None, 7),
    ]


def test_llm_without_api_key_or_json_mode(model: PlayedModel) -> None:
    model.reply = decisions_reply([])
    extractor(model, api_key=None, json_mode=False, max_tokens=300).decide(USER)
    request = model.seen[0]
    assert "Authorization" not in request.headers
    assert "response_format" not in request.body
    assert request.body["max_tokens"] == 300


def test_llm_empty_turn_makes_no_call(model: PlayedModel) -> None:
    assert extractor(model).decide("  ", ASSISTANT, EXISTING) == []
    assert model.seen == []


def test_llm_only_shown_memories_can_be_targeted(model: PlayedModel) -> None:
    many = [ExistingMemory(i, f"memory {i}") for i in range(60)]
    model.reply = decisions_reply([{"action": "delete", "id": 55}])
    with pytest.raises(ExtractionError, match="not among the existing memories"):
        extractor(model).decide(USER, "", many)
    data = json.loads(model.seen[0].body["messages"][1]["content"].split("\n", 1)[1])
    assert len(data["existing_memories"]) == 50


MALFORMED: dict[str, Callable[[dict[str, Any]], ModelReply]] = {
    "body not JSON": lambda body: (200, b"<html>gateway</html>"),
    "missing choices": lambda body: (200, b'{"id": "x"}'),
    "null content": lambda body: chat_reply(None),
    "content not JSON": lambda body: chat_reply("I will add that the user loves jazz."),
    "answer is a list": lambda body: chat_reply('[{"action": "add"}]'),
    "no decisions key": lambda body: chat_reply('{"memories": []}'),
    "decisions not a list": lambda body: chat_reply('{"decisions": {"action": "add"}}'),
    "decision not an object": decisions_reply(["add User loves jazz"]),
    "unknown action": decisions_reply([{"action": "upsert", "content": "x", "kind": "fact"}]),
    "missing action": decisions_reply([{"content": "x", "kind": "fact"}]),
    "update of an unknown id": decisions_reply(
        [{"action": "update", "content": "x", "kind": "fact", "id": 8}]
    ),
    "delete of an unknown id": decisions_reply([{"action": "delete", "id": "12"}]),
    "delete without id": decisions_reply([{"action": "delete"}]),
    "boolean id": decisions_reply([{"action": "delete", "id": True}]),
    "float id": decisions_reply([{"action": "delete", "id": 7.0}]),
    "add without content": decisions_reply([{"action": "add", "kind": "fact"}]),
    "update with empty content": decisions_reply(
        [{"action": "update", "content": "  ", "kind": "fact", "id": 7}]
    ),
    "content not a string": decisions_reply([{"action": "add", "content": 42, "kind": "fact"}]),
    "unknown kind": decisions_reply([{"action": "add", "content": "x", "kind": "opinion"}]),
    "add without kind": decisions_reply([{"action": "add", "content": "x"}]),
    "add with an id": decisions_reply([{"action": "add", "content": "x", "kind": "fact", "id": 7}]),
    "one memory targeted twice": decisions_reply(
        [
            {"action": "update", "content": "x", "kind": "fact", "id": 7},
            {"action": "delete", "id": 7},
        ]
    ),
    "too many decisions": decisions_reply(
        [{"action": "add", "content": f"m{i}", "kind": "fact"} for i in range(51)]
    ),
    "content too long": decisions_reply([{"action": "add", "content": "x" * 1001, "kind": "fact"}]),
    "HTTP 500": lambda body: (500, b'{"error": {"message": "overloaded"}}'),
    "HTTP 401": lambda body: (401, b'{"error": {"message": "bad key"}}'),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_llm_malformed_answers_raise(model: PlayedModel, case: str) -> None:
    model.reply = MALFORMED[case]
    with pytest.raises(ExtractionError):
        extractor(model).decide(USER, ASSISTANT, EXISTING)
    assert len(model.seen) == 1


def test_llm_error_messages_say_what_went_wrong(model: PlayedModel) -> None:
    cases = {
        "unknown action": "decision 0: unknown action 'upsert'",
        "update of an unknown id": "update of id 8, which is not among the existing memories",
        "add without content": "decision 0: add without content",
        "one memory targeted twice": "memory 7 is the target of two decisions",
        "HTTP 500": "answered HTTP 500",
        "content not JSON": "answer is not JSON",
    }
    for case, message in cases.items():
        model.reply = MALFORMED[case]
        with pytest.raises(ExtractionError, match=message):
            extractor(model).decide(USER, ASSISTANT, EXISTING)


def test_llm_hang_beyond_the_timeout_raises(model: PlayedModel) -> None:
    model.hang = True
    started = time.perf_counter()
    with pytest.raises(ExtractionError, match="timed out after 300 ms"):
        extractor(model, timeout_ms=300).decide(USER, ASSISTANT, EXISTING)
    assert time.perf_counter() - started < 3.0
    assert len(model.seen) == 1


def test_llm_unreachable_raises() -> None:
    gone = LLMExtractor(LLMDeployment(name="gone", url="http://127.0.0.1:9", model="m"))
    with pytest.raises(ExtractionError, match="'gone' unreachable"):
        gone.decide(USER)


def test_llm_deployment_from_settings(model: PlayedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXTRACTOR_TEST_KEY", "sk-from-env")
    model.reply = decisions_reply(
        [{"action": "add", "content": "User loves jazz", "kind": "preference"}]
    )
    deployments = {
        "memory-small": {
            "url": model.url + "/",
            "model": "small-extractor",
            "api_key_env": "EXTRACTOR_TEST_KEY",
            "timeout_ms": 1500,
        }
    }
    with override_settings(LLM_DEPLOYMENTS=deployments):
        configured = LLMExtractor("memory-small")
    assert configured.name == "memory-small" and configured.deployment.timeout_ms == 1500
    assert configured.decide("I love jazz.") == [
        MemoryDecision("add", "User loves jazz", "preference")
    ]
    assert model.seen[0].path == "/v1/chat/completions"
    assert model.seen[0].headers["authorization"] == "Bearer sk-from-env"
    assert model.seen[0].body["model"] == "small-extractor"


def test_llm_unknown_or_broken_deployment() -> None:
    with (
        override_settings(LLM_DEPLOYMENTS={"small": {"url": "http://127.0.0.1:1", "model": "m"}}),
        pytest.raises(
            ExtractionError, match=r"unknown extractor deployment 'big' \(known: small\)"
        ),
    ):
        LLMExtractor("big")
    with (
        override_settings(LLM_DEPLOYMENTS={"bad": {"url": "ftp://host", "model": "m"}}),
        pytest.raises(ExtractionError, match="http"),
    ):
        LLMExtractor("bad")
