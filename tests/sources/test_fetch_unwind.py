"""A fetch cut at its deadline unwinds in the background: the fetch's outcome does not wait for it,
the cut fetch is referenced until it ends, and what it raises meanwhile is logged, never raised.

Told apart by order of events, not by time: a source whose clean-up waits for a gate the test
opens only after the fetch has answered can only be seen answering if nothing waited for it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Iterator
from typing import Any, ClassVar, Literal, TypeVar

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from sources import fetch
from sources.base import ContextRequest, ContextSource, SourceResult, SourceSettings
from sources.fetch import SourceOutcome, fetch_all

REQUEST = ContextRequest(
    request_id="rsv_unwind", tenant="acme", route="support", user="u_1", session=None, query="q"
)
T = TypeVar("T")
# Loop turns given to a fetch that no longer waits for anything: far more than it needs to answer
# once nothing holds it, while a fetch waiting on the gate never answers in any number of them.
TURNS = 200


class SlowUnwindSettings(SourceSettings):
    type: Literal["slow_unwind"] = "slow_unwind"
    fails_on_unwind: bool = False
    answers_on_unwind: bool = False


class SlowUnwindSource(ContextSource):
    """Never answers; cancelled, it takes its time to clean up: until ``gate`` opens (``None``: a
    few loop turns), then it re-raises the cancellation, raises, or answers."""

    type = "slow_unwind"
    Settings: ClassVar[type[SourceSettings]] = SlowUnwindSettings

    def __init__(self, settings: SlowUnwindSettings, gate: asyncio.Event | None = None) -> None:
        super().__init__(settings)
        self.unwind_settings = settings
        self.gate = gate
        self.unwinding = False
        self.unwound = False

    async def fetch(self, request: ContextRequest) -> SourceResult:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.unwinding = True
            if self.gate is not None:
                await self.gate.wait()
            else:
                for _ in range(5):
                    await asyncio.sleep(0)
            self.unwound = True
            if self.unwind_settings.fails_on_unwind:
                raise RuntimeError("closing the connection failed") from None
            if not self.unwind_settings.answers_on_unwind:
                raise
        return SourceResult([self.item("too late")])


class FastSource(ContextSource):
    type = "fast"
    Settings: ClassVar[type[SourceSettings]] = SourceSettings

    async def fetch(self, request: ContextRequest) -> SourceResult:
        return SourceResult([self.item(f"from {self.name}")])


def stuck(gate: asyncio.Event | None = None, **fields: Any) -> SlowUnwindSource:
    return SlowUnwindSource(SlowUnwindSettings(name="stuck", timeout_ms=20, **fields), gate)


def fast() -> FastSource:
    return FastSource(SourceSettings(type="fast", name="fast"))


async def turns(count: int = TURNS) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def answered_with_the_gate_shut(
    answering: Awaitable[T], source: SlowUnwindSource, gate: asyncio.Event
) -> tuple[T, bool]:
    """What ``answering`` answers, and whether it had answered while ``source`` was cancelled and
    still waiting for ``gate``, which is opened afterwards either way (so a fetch that waits for
    its sources fails the test instead of hanging it). The guard's second only bounds that wait;
    an answer that does not wait for the source comes within loop turns and a thread's hop."""
    task = asyncio.ensure_future(answering)
    while not source.unwinding:
        await asyncio.sleep(0.005)
    await turns()
    for _ in range(200):
        if task.done():
            break
        await asyncio.sleep(0.005)
    answered = task.done() and not source.unwound
    gate.set()
    return await task, answered


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logs() -> Iterator[list[logging.LogRecord]]:
    """What the sources' logger and asyncio's say ("Task was destroyed but it is pending")."""
    handler = Collect()
    loggers = [logging.getLogger("contextplatform.sources"), logging.getLogger("asyncio")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


def loop_errors(loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    """What the loop's exception handler is told (a task's exception never retrieved)."""
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    return seen


def assert_timed_out(outcome: SourceOutcome) -> None:
    assert (outcome.name, outcome.status, outcome.error) == (
        "stuck",
        "timeout",
        "timed out after 20 ms",
    )
    assert outcome.items == []


def test_the_fetch_answers_while_a_cut_source_is_still_unwinding(
    logs: list[logging.LogRecord],
) -> None:
    async def scenario() -> None:
        errors = loop_errors(asyncio.get_running_loop())
        gate = asyncio.Event()
        source = stuck(gate)
        outcomes, answered = await answered_with_the_gate_shut(
            fetch_all([fast(), source, fast()], REQUEST), source, gate
        )
        assert answered, "the fetch waited for the cut source to unwind"
        assert [o.status for o in outcomes] == ["ok", "timeout", "ok"]
        assert_timed_out(outcomes[1])
        await fetch.settle_unwinding()
        assert source.unwound
        assert fetch.unwinding() == 0
        assert errors == []

    asyncio.run(scenario())
    assert not [r for r in logs if "destroyed" in r.getMessage()]


def test_the_outcome_is_the_deadline_s_even_if_the_source_answers_while_unwinding() -> None:
    async def scenario() -> list[SourceOutcome]:
        outcomes = await fetch_all([stuck(answers_on_unwind=True)], REQUEST)
        await fetch.settle_unwinding()
        return outcomes

    [outcome] = asyncio.run(scenario())
    assert_timed_out(outcome)


def test_a_cut_fetch_is_kept_until_it_ends(logs: list[logging.LogRecord]) -> None:
    """Nothing else refers to the cut fetch once the fetch answered: the loop holds its tasks
    only weakly, so without a reference of its own it could be collected half-way."""

    async def scenario() -> None:
        gate = asyncio.Event()
        source = stuck(gate)
        kept: list[int] = []

        async def answer_then_collect() -> None:
            await fetch_all([source], REQUEST)
            kept.append(fetch.unwinding())
            gc.collect()
            await turns(5)

        _, answered = await answered_with_the_gate_shut(answer_then_collect(), source, gate)
        assert answered
        assert kept == [1]
        await fetch.settle_unwinding()
        assert source.unwound
        assert fetch.unwinding() == 0

    asyncio.run(scenario())
    assert not [r for r in logs if "destroyed" in r.getMessage()]


def test_an_error_while_unwinding_is_logged_not_raised(logs: list[logging.LogRecord]) -> None:
    async def scenario() -> list[dict[str, Any]]:
        errors = loop_errors(asyncio.get_running_loop())
        [outcome] = await fetch_all([stuck(fails_on_unwind=True)], REQUEST)
        assert_timed_out(outcome)
        await fetch.settle_unwinding()
        gc.collect()
        await turns(5)
        return errors

    assert asyncio.run(scenario()) == []
    [failed] = [r for r in logs if r.getMessage() == "context_source_unwind_failed"]
    assert failed.levelno == logging.WARNING
    assert (failed.__dict__["source"], failed.__dict__["request_id"]) == ("stuck", "rsv_unwind")
    assert failed.__dict__["err"] == "RuntimeError: closing the connection failed"


def test_a_cancelled_resolve_cancels_its_fetches_without_waiting_for_them() -> None:
    async def scenario() -> None:
        gate = asyncio.Event()
        source = SlowUnwindSource(SlowUnwindSettings(name="stuck", timeout_ms=60_000), gate)
        fetching = asyncio.ensure_future(fetch_all([source], REQUEST))
        await turns(5)
        fetching.cancel()
        await turns()
        cancelled = fetching.done() and fetching.cancelled()
        gate.set()
        await asyncio.gather(fetching, return_exceptions=True)
        assert cancelled, "the cancelled fetch waited for its source to unwind"
        assert source.unwinding
        await fetch.settle_unwinding()
        assert source.unwound

    asyncio.run(scenario())


def test_under_a_server_s_loop_the_sync_caller_gets_the_outcomes_before_the_unwinding_ends() -> (
    None
):
    """As under uvicorn: the resolve's thread runs ``async_to_sync(fetch_all)`` on the server's
    loop (asgiref finds it from the ``sync_to_async`` thread) and is answered at once."""

    async def scenario() -> None:
        gate = asyncio.Event()
        source = stuck(gate)

        def resolve() -> tuple[list[SourceOutcome], bool]:
            outcomes = async_to_sync(fetch_all)([fast(), source], REQUEST)
            return outcomes, source.unwound

        (outcomes, unwound_by_then), answered = await answered_with_the_gate_shut(
            sync_to_async(resolve)(), source, gate
        )
        assert answered and not unwound_by_then
        assert_timed_out(outcomes[1])
        await fetch.settle_unwinding()
        assert source.unwound

    asyncio.run(scenario())


def test_on_asgiref_s_own_loop_the_cut_fetch_ends_before_the_loop_does(
    logs: list[logging.LogRecord],
) -> None:
    """A sync caller outside a server (tests, commands): the loop made for the call cancels every
    task left at its end, so the cut fetch is let finish its clean-up first, nothing left over."""
    source = stuck()  # unwinds over a few loop turns
    outcomes = async_to_sync(fetch_all)([fast(), source, fast()], REQUEST)
    assert [o.status for o in outcomes] == ["ok", "timeout", "ok"]
    assert_timed_out(outcomes[1])
    assert source.unwound
    assert fetch.unwinding() == 0
    assert not [r for r in logs if r.name == "asyncio" and r.levelno >= logging.WARNING]
