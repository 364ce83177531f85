"""Memories worded the way a question asks: a dated change in the user's life (a move, a new job)
is written as what is true now, with its month, so "Where do I live?" finds "I moved to Lisbon
last month"; the memory it replaces is kept as history (``superseded_at``), never recalled nor
injected, but listed, exported, and erased like any other. Real PostgreSQL, the local embedder."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone
from django_tenants.utils import schema_context

from memory.extraction.local import extract_local
from memory.models import Memory
from memory.services import delete_expired
from sources.embedding import LOCAL_MEMORY_MIN_SIMILARITY
from tests.conftest import ApiClient
from tests.memory.test_memory_dates import said_at
from tests.memory.test_memory_flow import hand_back, memory_route, resolve

SAID = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)
LATER = datetime(2025, 6, 2, 18, 5, tzinfo=UTC)

CURRENT: list[tuple[str, str]] = [
    ("I moved to Lisbon last month.", "User lives in Lisbon (moved there in February 2025)"),
    ("Oh, I moved to Lyon in May 2024.", "User lives in Lyon (moved there in May 2024)"),
    (
        "I moved to Berlin last year because I got a job there.",
        "User lives in Berlin (moved there in 2024)",
    ),
    (
        "I started as a nurse at St Mary's Hospital last week.",
        "User works as a nurse at St Mary's Hospital (new job, started there in March 2025)",
    ),
    (
        "I got a new job as a data engineer at Spotify in January.",
        "User works as a data engineer at Spotify (got the job in January 2025)",
    ),
    (
        "I joined Deloitte as an analyst in February.",
        "User works as an analyst at Deloitte (new job, joined in February 2025)",
    ),
    ("We adopted a dog two weeks ago.", "User has a dog (adopted in February 2025)"),
    ("I got married in June.", "User is married (got married in June 2024)"),
]


@pytest.mark.parametrize(("text", "expected"), CURRENT, ids=[text for text, _ in CURRENT])
def test_a_dated_change_is_written_as_what_is_true_now(text: str, expected: str) -> None:
    [memory] = extract_local(text, observed_at=SAID)
    assert (memory.content, memory.kind) == (expected, "fact")


def test_without_the_turns_date_a_dated_change_stays_as_said() -> None:
    assert [m.content for m in extract_local("I moved to Lisbon last month.")] == [
        "User moved to Lisbon last month"
    ]


@pytest.mark.parametrize("observed_at", [SAID, None])
def test_an_undated_move_is_written_as_where_the_user_lives(observed_at: datetime | None) -> None:
    """ "Where do I live?" asks in the present: a move said without its time is still where the
    user lives now (its reason and company left out), and a change that supersedes."""
    for text in (
        "I moved to Lisbon.",
        "I moved to Lisbon for work.",
        "I moved to Lisbon with my wife",
    ):
        [memory] = extract_local(text, observed_at=observed_at)
        assert memory.content == "User lives in Lisbon (moved there)", text
        assert (memory.topic, memory.change) == ("home", True)
    # no place named: nothing a later move could be told from, so kept as said
    [flat] = extract_local("I moved to a new flat.", observed_at=observed_at)
    assert flat.content == "User moved to a new flat" and not flat.change
    # a plan is not a change that happened, nor is a shift a home, a school a job, a club an employer
    for text in (
        "I'm moving to Lisbon next month.",
        "I moved to the night shift last month.",
        "I started at university last month.",
        "I joined Twitter last year.",
    ):
        assert extract_local(text, observed_at=SAID) == extract_local(text), text


def say(api: ApiClient, schema: str, text: str, moment: datetime) -> None:
    """One turn of user u1, said at ``moment``, written to memory by the local extractor."""
    turn = resolve(api, text).json()
    said_at(schema, turn["id"], moment)
    assert hand_back(api, turn["id"]).json()["memory_write"] == "queued"


def search(api: ApiClient, query: str, **extra: Any) -> list[dict[str, Any]]:
    found = api.post("/api/v1/users/u1/memories/search", {"query": query, **extra})
    assert found.status_code == 200, found.content
    data: list[dict[str, Any]] = found.json()["data"]
    return data


@pytest.fixture
def writing_route(acme_api: ApiClient) -> None:
    # The route leaves recall to the embedder's defaults (min_similarity 0.2, top 5).
    created = acme_api.post("/api/v1/routes", memory_route(store={"auto": True}))
    assert created.status_code == 201, created.content


def test_where_do_i_live_recalls_a_move(
    acme_api: ApiClient, acme: Any, writing_route: None
) -> None:
    for text in ("I'm a big fan of jazz.", "I drive a Volvo.", "I'm allergic to peanuts."):
        say(acme_api, acme.schema, text, SAID)
    say(acme_api, acme.schema, "Oh, by the way, I moved to Lisbon last month.", SAID)

    top = search(acme_api, "Where do I live?")[0]
    assert top["content"] == "User lives in Lisbon (moved there in February 2025)"
    assert top["similarity"] >= LOCAL_MEMORY_MIN_SIMILARITY
    # the words the user said it in still match lexically
    assert search(acme_api, "moved", hybrid=True)[0]["content"] == top["content"]

    report = resolve(acme_api, "Where do I live?", memory={"store": False}).json()
    assert report["sources"][0]["notes"]["memory_status"] == "used"
    assert "User lives in Lisbon" in report["request"]["messages"][2]["content"]


def test_a_move_supersedes_the_old_home_which_stays_as_history(
    acme_api: ApiClient, acme: Any, writing_route: None
) -> None:
    say(acme_api, acme.schema, "I live in Porto.", SAID)
    say(acme_api, acme.schema, "I moved to Lisbon last week.", LATER)

    with schema_context(acme.schema):
        old = Memory.objects.get(user_id="u1", content="User lives in Porto")
        new = Memory.objects.get(user_id="u1", superseded_at__isnull=True)
    assert new.content == "User lives in Lisbon (moved there in May 2025)"
    assert old.superseded_at is not None and old.superseded_by == new.pk

    # never recalled: not by the search, not injected
    assert [hit["content"] for hit in search(acme_api, "Where do I live?")] == [new.content]
    assert all("Porto" not in hit["content"] for hit in search(acme_api, "Porto", hybrid=True))
    report = resolve(acme_api, "Do I live in Porto?", memory={"store": False}).json()
    assert "Porto" not in json.dumps(report["request"]["messages"][1:])

    # listed and exported, with when it was replaced and by what
    listed = {m["id"]: m for m in acme_api.get("/api/v1/users/u1/memories").json()["data"]}
    assert listed[new.pk]["superseded_at"] is None and listed[new.pk]["superseded_by"] is None
    assert datetime.fromisoformat(listed[old.pk]["superseded_at"]) == old.superseded_at
    assert listed[old.pk]["superseded_by"] == new.pk
    exported = acme_api.get("/api/v1/users/u1/memories/export")
    lines = [json.loads(line) for line in b"".join(exported.streaming_content).splitlines()]
    assert {line["id"]: line["superseded_by"] for line in lines} == {old.pk: new.pk, new.pk: None}

    # a listing posts back: the read-only fields are ignored
    posted = acme_api.post("/api/v1/users/u2/memories", listed[old.pk])
    assert posted.status_code == 201, posted.content
    assert posted.json()["superseded_at"] is None

    # erasure removes the history too
    erased = acme_api.delete("/api/v1/users/u1/memories").json()
    assert erased == {"deleted": 2}
    assert acme_api.get("/api/v1/users/u1/memories").json()["data"] == []


def test_retention_applies_to_a_superseded_memory(
    acme_api: ApiClient, acme: Any, writing_route: None
) -> None:
    say(acme_api, acme.schema, "I work at Siemens.", SAID)
    say(acme_api, acme.schema, "I started as a nurse at St Mary's last week.", LATER)
    with schema_context(acme.schema):
        old = Memory.objects.get(user_id="u1", content="User works at Siemens")
        assert old.superseded_at is not None
        Memory.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        assert delete_expired() == 1
        assert list(Memory.objects.filter(user_id="u1").values_list("content", flat=True)) == [
            "User works as a nurse at St Mary's (new job, started there in May 2025)"
        ]


def test_the_llm_extractor_names_what_an_added_memory_supersedes() -> None:
    from memory.extraction.llm import parse_decisions
    from memory.extraction.types import ExistingMemory, ExtractionError, MemoryDecision

    existing = [ExistingMemory(7, "User lives in Porto")]
    reply = json.dumps(
        {
            "decisions": [
                {
                    "action": "add",
                    "content": "User lives in Lisbon (moved there in March 2025)",
                    "kind": "fact",
                    "supersedes": 7,
                }
            ]
        }
    )
    assert parse_decisions(reply, existing) == [
        MemoryDecision(
            "add", "User lives in Lisbon (moved there in March 2025)", "fact", None, (7,)
        )
    ]
    for wrong in ({"supersedes": 8}, {"supersedes": 7, "action": "update", "id": 7}):
        decision = {"action": "add", "content": "User lives in Lisbon", "kind": "fact", **wrong}
        with pytest.raises(ExtractionError):
            parse_decisions(json.dumps({"decisions": [decision]}), existing)


def test_a_decision_that_supersedes_keeps_the_old_memory_as_history(acme: Any) -> None:
    """The LLM extractor's add with ``supersedes``, applied as the write after the response
    applies it: the named memory (the user's own only) is marked, not deleted."""
    from memory.extraction.types import MemoryDecision
    from memory.models import MemoryTurn
    from memory.selectors import live_memories
    from memory.writing import TurnOrigin, apply_decision
    from tests.memory.test_memory_isolation import FakeEmbedder, remember

    old = remember(acme.schema, "u1", "User lives in Porto")
    someone_else = remember(acme.schema, "u2", "User lives in Porto")
    with schema_context(acme.schema):
        turn = MemoryTurn.objects.create(resolve_id="r-llm", route="m", user_id="u1")
        decision = MemoryDecision(
            "add",
            "User lives in Lisbon (moved there in March 2025)",
            "fact",
            None,
            (old, someone_else),
        )
        origin = TurnOrigin(turn.user_id, turn.created_at, turn.resolve_id)
        assert apply_decision(origin, decision, FakeEmbedder())
        new = Memory.objects.get(user_id="u1", superseded_at__isnull=True)
        assert Memory.objects.get(pk=old).superseded_by == new.pk
        assert Memory.objects.get(pk=someone_else).superseded_at is None
        assert [m.pk for m in live_memories("u1")] == [new.pk]


# --- a present state said plainly ------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "old", "new", "question"),
    [
        (
            "I live in Porto.",
            "I live in Berlin now.",
            "User lives in Porto",
            "User lives in Berlin now",
            "Where do I live?",
        ),
        (
            "I'm based in Porto.",
            "I moved to Lisbon.",
            "User is based in Porto",
            "User lives in Lisbon (moved there)",
            "Where do I live?",
        ),
        (
            "I work at Siemens.",
            "I work at Acme as a nurse.",
            "User works at Siemens",
            "User works at Acme as a nurse",
            "Where do I work?",
        ),
    ],
)
def test_a_plain_statement_of_a_new_home_or_job_supersedes_the_old(
    acme_api: ApiClient,
    acme: Any,
    writing_route: None,
    before: str,
    after: str,
    old: str,
    new: str,
    question: str,
) -> None:
    say(acme_api, acme.schema, before, SAID)
    say(acme_api, acme.schema, after, LATER)
    with schema_context(acme.schema):
        replaced = Memory.objects.get(user_id="u1", content=old)
        current = Memory.objects.get(user_id="u1", content=new)
    assert replaced.superseded_by == current.pk and current.superseded_at is None
    found = [hit["content"] for hit in search(acme_api, question)]
    assert found == [new]
    assert old not in [hit["content"] for hit in search(acme_api, old, hybrid=True)]
    report = resolve(acme_api, question, memory={"store": False}).json()
    injected = json.dumps(report["request"]["messages"][1:])
    assert new in injected and old not in injected


def test_a_plain_statement_restating_the_same_home_keeps_the_dated_memory(
    acme_api: ApiClient, acme: Any, writing_route: None
) -> None:
    say(acme_api, acme.schema, "I moved to Lisbon last month.", SAID)
    say(acme_api, acme.schema, "I live in Lisbon now.", LATER)
    with schema_context(acme.schema):
        [memory] = Memory.objects.filter(user_id="u1")  # refreshed, nothing added or replaced
    assert memory.content == "User lives in Lisbon (moved there in February 2025)"
    assert memory.superseded_at is None and memory.observed_at == LATER


def test_a_statement_that_names_no_other_employer_supersedes_nothing(
    acme_api: ApiClient, acme: Any, writing_route: None
) -> None:
    say(acme_api, acme.schema, "I work at Siemens.", SAID)
    say(acme_api, acme.schema, "I work as a nurse.", LATER)  # maybe at Siemens: cannot tell
    say(acme_api, acme.schema, "I live in a small flat.", LATER)
    with schema_context(acme.schema):
        assert not Memory.objects.filter(superseded_at__isnull=False).exists()
        assert Memory.objects.filter(user_id="u1").count() == 3


# --- an update keeps the old wording as history ------------------------------------------------


def test_an_update_decision_keeps_the_old_wording_as_history(
    acme_api: ApiClient, acme: Any
) -> None:
    """The LLM extractor's (or the planner's) update: a new memory supersedes the old one, which
    stays listed and exported with what replaced it, is never recalled, and is under retention
    and erasure. Its kind, metadata and expiry carry over unless the decision names a kind."""
    from memory.extraction.types import MemoryDecision
    from memory.selectors import live_memories
    from memory.writing import TurnOrigin, apply_decision
    from tests.memory.test_memory_isolation import FakeEmbedder, axis, remember

    expires = timezone.now() + timedelta(days=30)
    old = remember(
        acme.schema,
        "u1",
        "User likes tea",
        axis(1),
        kind="preference",
        metadata={"tag": "drinks"},
        expires_at=expires,
    )
    other = remember(acme.schema, "u1", "User plays the cello", axis(2))
    embedder = FakeEmbedder({"User likes green tea, no sugar": axis(1)})
    origin = TurnOrigin("u1", LATER, "rsv_1", "rsv_1#0")
    with schema_context(acme.schema):
        update = MemoryDecision("update", "User likes green tea, no sugar", None, old)
        new = apply_decision(origin, update, embedder)
        assert isinstance(new, Memory) and new.pk != old
        assert (new.kind, new.metadata, new.expires_at) == (
            "preference",
            {"tag": "drinks"},
            expires,
        )
        assert (new.observed_at, new.source_turn) == (LATER, "rsv_1#0")
        replaced = Memory.objects.get(pk=old)
        assert (replaced.content, replaced.superseded_by) == ("User likes tea", new.pk)
        assert sorted(m.pk for m in live_memories("u1")) == sorted([new.pk, other])
        # the same words again: dated anew in place, no row of history for nothing lost
        again = apply_decision(
            TurnOrigin("u1", SAID), MemoryDecision("update", new.content, None, new.pk), embedder
        )
        assert isinstance(again, Memory) and again.pk == new.pk and again.observed_at == SAID
        # a kind given is taken; a memory already replaced is history, not revised again
        fact = apply_decision(
            origin, MemoryDecision("update", "User drinks tea", "fact", new.pk), embedder
        )
        assert isinstance(fact, Memory) and fact.kind == "fact"
        assert (
            apply_decision(origin, MemoryDecision("update", "User hates tea", None, old), embedder)
            is False
        )
        assert Memory.objects.filter(user_id="u1").count() == 4

    found = [hit["content"] for hit in search(acme_api, "tea", hybrid=True)]
    assert "User drinks tea" in found and not {"User likes tea", new.content} & set(found)
    listed = {m["id"]: m for m in acme_api.get("/api/v1/users/u1/memories").json()["data"]}
    assert listed[old]["superseded_by"] == new.pk and listed[new.pk]["superseded_by"] == fact.pk
    exported = acme_api.get("/api/v1/users/u1/memories/export")
    lines = [json.loads(line) for line in b"".join(exported.streaming_content).splitlines()]
    assert {line["content"]: line["superseded_by"] for line in lines} == {
        "User likes tea": new.pk,
        "User likes green tea, no sugar": fact.pk,
        "User drinks tea": None,
        "User plays the cello": None,
    }
    with schema_context(acme.schema):  # retention reaches the history as it reaches the rest
        Memory.objects.filter(pk=old).update(expires_at=timezone.now() - timedelta(seconds=1))
        assert delete_expired() == 1
    assert acme_api.delete("/api/v1/users/u1/memories").json() == {"deleted": 3}


def test_the_llm_extractor_keeps_what_stopped_being_true_as_history() -> None:
    """A fact no longer true is replaced (an add superseding it); a delete is for what the user
    asks to forget."""
    from memory.extraction.llm import SYSTEM_PROMPT

    assert 'no longer true, add what is true now and name the old one in "supersedes"' in (
        SYSTEM_PROMPT
    )
    assert "Delete a memory (its id) only when the user asks to forget it" in SYSTEM_PROMPT
