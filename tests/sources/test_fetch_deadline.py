"""The running source's deadline (``sources.fetch_deadline``): set by the fetch, seen by what the
source starts, shortening its own bounds (database statements included); a fetch cut by a bound of
its own reports ``timeout``."""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar, Literal

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connection

from contextplatform.core.estimation import HeuristicEstimator
from sources import fetch_deadline
from sources.base import ContextRequest, ContextSource, SourceFailed, SourceResult, SourceSettings
from sources.deadline import statement_deadline
from sources.fetch import SourceOutcome, fetch_source

REQUEST = ContextRequest(
    request_id="rsv_test", tenant="acme", route="r", user="u_1", session=None, query="q"
)


async def remaining_in_a_task() -> float | None:
    return fetch_deadline.remaining()


class ProbeSettings(SourceSettings):
    type: Literal["probe"] = "probe"
    behaviour: str = "remaining"


class ProbeSource(ContextSource):
    """Reports what it sees of its deadline, or is cut by a shorter bound of its own."""

    type = "probe"
    Settings: ClassVar[type[SourceSettings]] = ProbeSettings

    async def fetch(self, request: ContextRequest) -> SourceResult:
        behaviour = self.settings.behaviour  # type: ignore[attr-defined]
        if behaviour == "remaining":
            in_task = await asyncio.ensure_future(remaining_in_a_task())
            in_thread = await asyncio.to_thread(fetch_deadline.remaining)
            return SourceResult([self.item(f"{in_task} {in_thread}")])
        if behaviour == "own_timeout":
            async with asyncio.timeout(fetch_deadline.shortened(0.02)):
                await asyncio.Event().wait()
        if behaviour == "wrapped_timeout":
            try:
                async with asyncio.timeout(0.02):
                    await asyncio.Event().wait()
            except TimeoutError as error:
                raise SourceFailed(TimeoutError("backend gave up"), {"tried": 1}) from error
        raise RuntimeError("broken")


def run(behaviour: str, timeout_ms: int = 2000) -> SourceOutcome:
    source = ProbeSource(ProbeSettings(name="probe", behaviour=behaviour, timeout_ms=timeout_ms))
    return asyncio.run(fetch_source(source, REQUEST, HeuristicEstimator()))


def test_outside_a_fetch_there_is_no_deadline() -> None:
    assert fetch_deadline.remaining() is None
    assert fetch_deadline.shortened(5.0) == 5.0
    assert not fetch_deadline.binds(5.0)


def test_a_fetch_and_what_it_starts_see_what_is_left_of_its_deadline() -> None:
    outcome = run("remaining", timeout_ms=2000)
    in_task, in_thread = (float(value) for value in outcome.items[0].content.split())
    assert 0 < in_thread <= in_task <= 2.0
    assert fetch_deadline.remaining() is None  # reset once the fetch is over


def test_inside_a_deadline_a_longer_bound_is_shortened() -> None:
    with fetch_deadline.running(0.5):
        assert fetch_deadline.shortened(0.1) == 0.1
        assert fetch_deadline.shortened(60.0) <= 0.5
        assert fetch_deadline.binds(60.0) and not fetch_deadline.binds(0.1)


def test_a_fetch_cut_by_its_own_shorter_bound_reports_timeout() -> None:
    outcome = run("own_timeout")
    assert outcome.status == "timeout"
    assert outcome.error == "timed out"


def test_a_failure_wrapping_a_timeout_reports_timeout_and_keeps_its_notes() -> None:
    outcome = run("wrapped_timeout")
    assert outcome.status == "timeout"
    assert outcome.error == "TimeoutError: backend gave up"
    assert outcome.notes == {"tried": 1}


def test_any_other_failure_before_the_deadline_is_failed() -> None:
    outcome = run("broken")
    assert (outcome.status, outcome.error) == ("failed", "RuntimeError: broken")


def statement_timeout_ms() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        shown = cursor.fetchone()[0]
    if shown.endswith("ms"):
        return int(shown[:-2])
    assert shown.endswith("s"), shown
    return int(shown[:-1]) * 1000


@pytest.mark.django_db
def test_a_statement_gets_what_is_left_of_the_source_deadline() -> None:
    with statement_deadline(30):
        assert statement_timeout_ms() == 30_000  # no fetch: the timeout asked for
    with fetch_deadline.running(0.5):
        time.sleep(0.2)  # the fetch has used part of its deadline
        with statement_deadline(30):
            assert statement_timeout_ms() <= 300


@pytest.mark.django_db
def test_a_statement_run_through_sync_to_async_is_bounded_by_the_deadline() -> None:
    """As a source's database work runs: on the request's own thread (``async_to_sync`` here),
    from the fetch's task."""

    async def fetch() -> Any:
        def work() -> int:
            with statement_deadline(30):
                return statement_timeout_ms()

        with fetch_deadline.running(0.4):
            return await sync_to_async(work)()

    assert async_to_sync(fetch)() <= 400
