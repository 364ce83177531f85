"""Memory extraction: the deterministic local extractor on example turns, the write plan
(update instead of add for near-duplicates), and the LLM extractor against a real loopback
server that plays an OpenAI-compatible model."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import override_settings

from memory.extraction import (
    ExistingMemory,
    ExtractedMemory,
    ExtractionError,
    LLMExtractor,
    MemoryDecision,
    conjugate,
    extract_local,
    plan_writes,
)
from sources.judge import LLMDeployment
from tests.loopback import ModelReply, PlayedModel, Seen, chat_reply, played_model

# --------------------------------------------------------------------------------------------
# The local extractor: what it extracts.

POSITIVE: list[tuple[str, list[tuple[str, str]]]] = [
    # facts
    ("My name is Ada.", [("User's name is Ada", "fact")]),
    ("my name's bob", [("User's name is bob", "fact")]),
    ("Call me Ada.", [("User wants to be called Ada", "fact")]),
    ("I'm a nurse.", [("User is a nurse", "fact")]),
    ("I am an early riser", [("User is an early riser", "fact")]),
    ("I\u2019m a teacher", [("User is a teacher", "fact")]),  # typographic apostrophe
    ("I'm Ada.", [("User is Ada", "fact")]),
    ("I'm allergic to peanuts.", [("User is allergic to peanuts", "fact")]),
    (
        "I'm 34 years old and I'm vegetarian.",
        [("User is 34 years old", "fact"), ("User is vegetarian", "fact")],
    ),
    ("I live in Berlin.", [("User lives in Berlin", "fact")]),
    ("I work at Siemens.", [("User works at Siemens", "fact")]),
    ("I work as a data engineer.", [("User works as a data engineer", "fact")]),
    ("I grew up in Ohio.", [("User grew up in Ohio", "fact")]),
    ("I have two cats and a dog.", [("User has two cats and a dog", "fact")]),
    ("I've got a peanut allergy.", [("User has got a peanut allergy", "fact")]),
    ("My phone is a Pixel 8.", [("User's phone is a Pixel 8", "fact")]),
    ("My dog's name is Rex.", [("User's dog's name is Rex", "fact")]),
    ("Remember that I'm allergic to shellfish.", [("User is allergic to shellfish", "fact")]),
    ("Please remember that I take my pills at 8am.", [("User takes their pills at 8am", "fact")]),
    ("Remember that my wife is vegetarian.", [("User's wife is vegetarian", "fact")]),
    (
        "Please remember that the garage code is 4512.",
        [("User asked to remember that the garage code is 4512", "fact")],
    ),
    (
        "Don't forget that my anniversary is on June 5th.",
        [("User's anniversary is on June 5th", "fact")],
    ),
    # preferences
    ("I prefer window seats.", [("User prefers window seats", "preference")]),
    ("I like my coffee black.", [("User likes their coffee black", "preference")]),
    ("I really love sushi!", [("User really loves sushi", "preference")]),
    ("I enjoy hiking on weekends.", [("User enjoys hiking on weekends", "preference")]),
    ("I hate cilantro.", [("User hates cilantro", "preference")]),
    ("I dislike long meetings.", [("User dislikes long meetings", "preference")]),
    ("I don't like spicy food.", [("User doesn't like spicy food", "preference")]),
    ("I do not like spicy food.", [("User does not like spicy food", "preference")]),
    ("I can't stand loud music.", [("User can't stand loud music", "preference")]),
    ("I never eat pork.", [("User never eats pork", "preference")]),
    ("I'd rather fly in the morning.", [("User would rather fly in the morning", "preference")]),
    ("I'm a big fan of Radiohead.", [("User is a big fan of Radiohead", "preference")]),
    ("My favorite color is green.", [("User's favorite color is green", "preference")]),
    ("I like it when answers are short.", [("User likes it when answers are short", "preference")]),
    (
        "I prefer restaurants where I can sit outside.",
        [("User prefers restaurants where they can sit outside", "preference")],
    ),
    # events
    ("I bought a bike yesterday.", [("User bought a bike yesterday", "event")]),
    ("I moved to Lyon in May 2024.", [("User moved to Lyon in May 2024", "event")]),
    ("I visited Kyoto last week.", [("User visited Kyoto last week", "event")]),
    ("I started a new job on Monday.", [("User started a new job on Monday", "event")]),
    ("I booked a table for Friday at 7pm.", [("User booked a table for Friday at 7pm", "event")]),
    ("I ordered a new laptop 3 days ago.", [("User ordered a new laptop 3 days ago", "event")]),
    ("I'm going to Tokyo on Monday.", [("User is going to Tokyo on Monday", "event")]),
    ("I'll be in Paris next week.", [("User will be in Paris next week", "event")]),
    ("My flight is at 9am on Friday.", [("User's flight is at 9am on Friday", "event")]),
    (
        "I have a dentist appointment on Friday.",
        [("User has a dentist appointment on Friday", "event")],
    ),
    (
        "I visited the World War I museum last week.",
        [("User visited the World War I museum last week", "event")],
    ),
    # several in one turn, with fillers and conjunctions
    (
        "Hi! My name is Ada and I live in Berlin. I love jazz but I hate techno.",
        [
            ("User's name is Ada", "fact"),
            ("User lives in Berlin", "fact"),
            ("User loves jazz", "preference"),
            ("User hates techno", "preference"),
        ],
    ),
    (
        "Oh, by the way, I'm a software engineer, I work at Google; I bought a house last month.",
        [
            ("User is a software engineer", "fact"),
            ("User works at Google", "fact"),
            ("User bought a house last month", "event"),
        ],
    ),
    (
        "i live in new york\ni'm a chef",
        [("User lives in new york", "fact"), ("User is a chef", "fact")],
    ),
    (
        "I moved to Berlin last year because I got a job there.",
        [("User moved to Berlin last year", "event")],
    ),
]


@pytest.mark.parametrize(("text", "expected"), POSITIVE, ids=[text for text, _ in POSITIVE])
def test_local_extracts_what_the_user_said_about_themselves(
    text: str, expected: list[tuple[str, str]]
) -> None:
    assert [(m.content, m.kind) for m in extract_local(text)] == expected


NEGATIVE: list[str] = [
    # questions
    "Do I have to pay for shipping?",
    "Am I a good fit for this role?",
    "What is my name?",
    "I love jazz, what about you?",
    "what do I like",
    # hypotheticals, wishes, plans, guesses
    "If I were rich I would buy a boat.",
    "Suppose I live in Paris.",
    "Imagine I'm a doctor.",
    "I wish I lived in Spain.",
    "Maybe I'll move to Spain next year.",
    "I might visit Rome next month.",
    "I would love to visit Japan.",
    "I'm planning to visit Rome next month.",
    "I think I like jazz.",
    "I'm not sure I like this.",
    # about other people, or someone else's words
    "My wife is a doctor.",
    "My brother's name is Tom.",
    "He likes jazz.",
    "My sister likes jazz.",
    "My mom says I'm a genius.",
    'She said "I love pizza".',
    "We moved to Paris last year.",
    "my boss is annoying",
    # not a statement about the user
    "I love it.",
    "I like your answer.",
    "I love you",
    "I have a question about my order.",
    "I have to leave.",
    "I have been to Japan.",
    "I'm a bit confused.",
    "I'm tired.",
    "I'm Fine.",
    "I'd like a refund.",
    "I want to book a flight.",
    "I need help with my code.",
    "My question is how to sort a list.",
    "my code is broken",
    "Call me tomorrow.",
    "I bought a bike.",  # an event needs its time
    "I'm going to try that.",
    "I got it yesterday.",
    "I'm having trouble with my laptop today.",
    "Remember to buy milk.",
    "Keep in mind that the list is sorted.",
    "Tell me what I like.",
    "The weather is nice today.",
    "我喜欢喝茶",  # English only
    "",
    "   \n  ",
]


@pytest.mark.parametrize("text", NEGATIVE)
def test_local_extracts_nothing_from(text: str) -> None:
    assert extract_local(text) == []


def test_local_never_reads_the_assistant() -> None:
    user = "I live in Lyon."
    assistant = "I'm a doctor. My name is HAL. I love jazz. I bought a boat yesterday."
    assert extract_local(user, assistant) == extract_local(user)
    assert extract_local("", assistant) == []


def test_local_is_deterministic_and_dedupes_within_a_turn() -> None:
    text = "I like tea. I like tea! i LIKE tea. I live in Lyon and I like tea."
    first = extract_local(text)
    assert first == [
        ExtractedMemory("User likes tea", "preference"),
        ExtractedMemory("User lives in Lyon", "fact"),
    ]
    assert all(extract_local(text) == first for _ in range(5))
    long_turn = " ".join(text for text, _ in POSITIVE)
    assert extract_local(long_turn) == extract_local(long_turn)


def test_local_skips_overlong_clauses() -> None:
    assert extract_local("I like " + "very " * 80 + "long things.") == []


def test_conjugation() -> None:
    assert [conjugate(v) for v in ["prefer", "enjoy", "study", "watch", "go", "have", "do"]] == [
        "prefers",
        "enjoys",
        "studies",
        "watches",
        "goes",
        "has",
        "does",
    ]
    assert [conjugate(v) for v in ["can't", "bought", "moved", "don't"]] == [
        "can't",
        "bought",
        "moved",
        "doesn't",
    ]


# --------------------------------------------------------------------------------------------
# plan_writes


TEA = ExtractedMemory("User likes green tea", "preference")
LYON = ExtractedMemory("User lives in Lyon", "fact")


def test_plan_adds_new_memories() -> None:
    existing = [ExistingMemory(1, "User's name is Ada", [0.0, 1.0])]
    decisions = plan_writes([TEA, LYON], existing, [[1.0, 0.0], [0.6, 0.8]], 0.9)
    assert decisions == [
        MemoryDecision("add", "User likes green tea", "preference"),
        MemoryDecision("add", "User lives in Lyon", "fact"),
    ]


def test_plan_updates_a_near_duplicate_instead_of_adding() -> None:
    existing = [
        ExistingMemory(7, "User's name is Ada", [0.0, 1.0]),
        ExistingMemory(8, "User likes tea, green", [0.96, 0.28]),
    ]
    decisions = plan_writes([TEA], existing, [[1.0, 0.0]], 0.9)
    assert decisions == [MemoryDecision("update", "User likes green tea", "preference", 8)]


def test_plan_takes_the_most_similar_existing_memory_each_once() -> None:
    existing = [
        ExistingMemory(1, "close", [0.95, 0.312]),
        ExistingMemory(2, "closest", [0.99, 0.141]),
    ]
    first = ExtractedMemory("User likes green tea a lot", "preference")
    second = ExtractedMemory("User enjoys green tea", "preference")
    # the new ones are not near-duplicates of each other (cosine 0.80); each is of both existing
    # (first: 0.95 and 0.99; second: 0.95 and 0.88)
    decisions = plan_writes([first, second], existing, [[1.0, 0.0], [0.8, 0.6]], 0.85)
    assert [(d.action, d.target_id) for d in decisions] == [("update", 2), ("update", 1)]
    decisions = plan_writes([first, second], existing[:1], [[1.0, 0.0], [0.8, 0.6]], 0.85)
    assert [(d.action, d.target_id) for d in decisions] == [("update", 1), ("add", None)]


def test_plan_collapses_duplicates_within_the_batch_newest_wording_wins() -> None:
    newer = ExtractedMemory("User really likes green tea", "preference")
    decisions = plan_writes([TEA, LYON, newer], [], [[1.0, 0.0], [0.0, 1.0], [0.99, 0.141]], 0.9)
    assert decisions == [
        MemoryDecision("add", "User really likes green tea", "preference"),
        MemoryDecision("add", "User lives in Lyon", "fact"),
    ]


def test_plan_falls_back_to_text_without_vectors() -> None:
    existing = [ExistingMemory(3, "user likes green tea.", None), ExistingMemory(4, "x", [1.0])]
    decisions = plan_writes([TEA, TEA, LYON], existing, [None, None, None], 0.9)
    assert decisions == [
        MemoryDecision("update", "User likes green tea", "preference", 3),
        MemoryDecision("add", "User lives in Lyon", "fact"),
    ]


def test_plan_checks_its_inputs() -> None:
    with pytest.raises(ValueError, match="1 vectors for 2"):
        plan_writes([TEA, LYON], [], [[1.0]], 0.9)
    with pytest.raises(ValueError, match="threshold"):
        plan_writes([TEA], [], [[1.0]], 0.0)
    assert plan_writes([], [ExistingMemory(1, "x", [1.0])], [], 0.9) == []


def test_extract_then_plan_updates_a_restated_preference() -> None:
    """The local path end to end, with stand-in vectors: a bag of words hashed into 64 bins."""

    def embed(text: str) -> list[float]:
        vector = [0.0] * 64
        for word in text.lower().replace("'", " ").split():
            vector[sum(map(ord, word)) % 64] += 1.0
        return vector

    existing = [
        ExistingMemory(41, "User prefers window seats", embed("User prefers window seats")),
        ExistingMemory(42, "User lives in Lyon", embed("User lives in Lyon")),
    ]
    extracted = extract_local("Hi! I prefer window seats. I work at Airbus.")
    decisions = plan_writes(extracted, existing, [embed(m.content) for m in extracted], 0.9)
    assert decisions == [
        MemoryDecision("update", "User prefers window seats", "preference", 41),
        MemoryDecision("add", "User works at Airbus", "fact"),
    ]


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
