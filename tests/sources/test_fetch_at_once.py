"""Fetching from the request's thread: sources with their result at hand answer there, the others
are fetched together on the event loop, and each report reads as a fetch on the loop would."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, ClassVar, Literal

import pytest

from sources.base import ContextRequest, ContextSource, SourceResult, SourceSettings
from sources.fetch import fetch_all_from_thread
from tests.sources.test_fetch import REQUEST, FakeSettings, FakeSource, fake
from tests.thread_trips import count_calls_to_the_loop


class AtOnceSettings(SourceSettings):
    type: Literal["at_once"] = "at_once"
    texts: list[str] = []
    at_hand: bool = True
    takes: float = 0.0  # on the thread, whether at hand or not
    loop_takes: float = 0.0
    error: str | None = None


class AtOnceSource(ContextSource):
    """Answers on the caller's thread when ``at_hand``; on the loop (as ``loop: …``) otherwise."""

    type = "at_once"
    Settings: ClassVar[type[SourceSettings]] = AtOnceSettings

    def __init__(self, settings: AtOnceSettings) -> None:
        super().__init__(settings)
        self.at_once = settings
        self.fetched_on_loop = False

    def fetch_at_once(self, request: ContextRequest) -> SourceResult | None:
        time.sleep(self.at_once.takes)
        if not self.at_once.at_hand:
            return None
        if self.at_once.error is not None:
            raise RuntimeError(self.at_once.error)
        return SourceResult([self.item(text) for text in self.at_once.texts], notes={"at": "once"})

    async def fetch(self, request: ContextRequest) -> SourceResult:
        self.fetched_on_loop = True
        await asyncio.sleep(self.at_once.loop_takes)
        return SourceResult([self.item(f"loop: {text}") for text in self.at_once.texts])


def at_once(name: str, **fields: Any) -> AtOnceSource:
    return AtOnceSource(AtOnceSettings(name=name, **fields))


@pytest.fixture
def loop_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return count_calls_to_the_loop(monkeypatch)


def test_sources_with_their_result_at_hand_never_go_to_the_event_loop(
    loop_calls: list[str],
) -> None:
    sources = [at_once("rules", texts=["be kind"]), at_once("profile", texts=["gold"])]
    outcomes = fetch_all_from_thread(list(sources), REQUEST)
    assert [(o.name, o.status, [i.content for i in o.items]) for o in outcomes] == [
        ("rules", "ok", ["be kind"]),
        ("profile", "ok", ["gold"]),
    ]
    assert outcomes[0].notes == {"at": "once"}
    assert all(o.items[0].tokens > 0 and o.items[0].estimator for o in outcomes)
    assert loop_calls == []
    assert not any(s.fetched_on_loop for s in sources)


def test_the_others_are_fetched_together_in_one_trip_and_the_order_is_kept(
    loop_calls: list[str],
) -> None:
    sources: list[ContextSource] = [
        fake("slow", texts=["from the loop"], delay=0.01),
        at_once("rules", texts=["be kind"]),
        at_once("docs", texts=["a passage"], at_hand=False),
        FakeSource(FakeSettings(name="off", enabled=False, texts=["never"])),
    ]
    outcomes = fetch_all_from_thread(sources, REQUEST)
    assert [(o.name, o.status, [i.content for i in o.items]) for o in outcomes] == [
        ("slow", "ok", ["from the loop"]),
        ("rules", "ok", ["be kind"]),
        ("docs", "ok", ["loop: a passage"]),
        ("off", "skipped", []),
    ]
    assert loop_calls == ["fetch_all"]


def test_a_failure_at_once_fails_its_source_only() -> None:
    outcomes = fetch_all_from_thread(
        [at_once("broken", error="table unreadable"), at_once("fine", texts=["x"])], REQUEST
    )
    assert [(o.name, o.status, o.error) for o in outcomes] == [
        ("broken", "failed", "RuntimeError: table unreadable"),
        ("fine", "ok", None),
    ]


def test_an_answer_past_the_deadline_is_a_timeout_with_its_time() -> None:
    late = AtOnceSource(AtOnceSettings(name="late", texts=["x"], takes=0.06, timeout_ms=20))
    (outcome,) = fetch_all_from_thread([late], REQUEST)
    assert outcome.status == "timeout"
    assert outcome.error == "timed out after 20 ms"
    assert outcome.items == []
    assert outcome.ms >= 60


def test_a_disabled_source_is_skipped_without_being_asked() -> None:
    source = AtOnceSource(AtOnceSettings(name="off", enabled=False, error="asked"))
    (outcome,) = fetch_all_from_thread([source], REQUEST)
    assert (outcome.status, outcome.error) == ("skipped", None)


def test_each_answer_at_once_is_logged_as_a_fetch(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="contextplatform.sources"):
        fetch_all_from_thread([at_once("rules", texts=["x"]), at_once("bad", error="no")], REQUEST)
    lines = [(r.getMessage(), getattr(r, "source", None)) for r in caplog.records]
    assert lines == [("context_source_ok", "rules"), ("context_source_failed", "bad")]


def test_the_time_spent_asking_on_the_thread_counts_against_the_deadline_on_the_loop() -> None:
    """A source not at hand goes on to the loop with what is left of its deadline."""
    late = at_once("late", texts=["x"], at_hand=False, takes=0.04, loop_takes=0.04, timeout_ms=60)
    in_time = at_once("in-time", texts=["x"], at_hand=False, takes=0.01, timeout_ms=200)
    late_outcome, in_time_outcome = fetch_all_from_thread([late, in_time], REQUEST)
    assert late.fetched_on_loop
    assert (late_outcome.status, late_outcome.error) == ("timeout", "timed out after 60 ms")
    assert 60 <= late_outcome.ms < 95  # cut 60 ms from the ask, not 60 ms after the loop began
    assert in_time_outcome.status == "ok"
    assert in_time_outcome.ms >= 10  # its time starts at the ask on the thread


def test_a_source_whose_deadline_passed_on_the_thread_is_not_fetched_on_the_loop() -> None:
    spent = at_once("spent", texts=["x"], at_hand=False, takes=0.03, timeout_ms=20)
    (outcome,) = fetch_all_from_thread([spent], REQUEST)
    assert not spent.fetched_on_loop
    assert (outcome.status, outcome.error) == ("timeout", "timed out after 20 ms")
    assert outcome.ms >= 30
