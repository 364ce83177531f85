"""The gate that holds a cold deployment's budgeted calls behind its first one (``ProbeGate``), on
a margin book of its own: no server, no database."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from contextplatform.gateway.margin_probes import Probe, ProbeGate
from contextplatform.gateway.reservation_margins import MarginBook, Report

KEY = ("acme", "cold-deployment")
LONG = 3600.0  # a deployment timeout no test reaches
SHORT = 0.05  # one a lost probe reaches


async def settled() -> None:
    """Let every task run until it waits on something."""
    for _ in range(5):
        await asyncio.sleep(0)


def run(test: Coroutine[Any, Any, None]) -> None:
    asyncio.run(test)


def test_a_known_deployment_never_waits() -> None:
    book = MarginBook()
    gate = ProbeGate(book)
    book.observe(KEY, Report(expected=100, reported=100))  # answered within its estimate

    async def test() -> None:
        assert await gate.admit(KEY, LONG) is None
        assert await gate.admit(KEY, LONG) is None

    run(test())


def test_the_calls_of_a_cold_deployment_wait_for_the_probes_report() -> None:
    book = MarginBook()
    gate = ProbeGate(book)

    async def test() -> None:
        probe = await gate.admit(KEY, LONG)
        assert isinstance(probe, Probe)
        waiting = [asyncio.ensure_future(gate.admit(KEY, LONG)) for _ in range(5)]
        other = await gate.admit(("acme", "another-deployment"), LONG)
        assert isinstance(other, Probe)  # each deployment has its own probe
        await settled()
        assert not any(task.done() for task in waiting)

        book.observe(KEY, Report(expected=100, reported=140))
        probe.end()
        # All of them go on together, none as a probe: the margin is known.
        assert await asyncio.gather(*waiting) == [None] * 5
        assert book.tokens(KEY) == 44
        assert await gate.admit(KEY, LONG) is None

    run(test())


def test_a_probe_that_ends_without_a_report_hands_over_to_the_next_call() -> None:
    book = MarginBook()
    gate = ProbeGate(book)

    async def test() -> None:
        first = await gate.admit(KEY, LONG)
        assert first is not None
        waiting = [asyncio.ensure_future(gate.admit(KEY, LONG)) for _ in range(3)]
        await settled()

        first.end()  # refused or failed before the provider answered
        await settled()
        done = [task for task in waiting if task.done()]
        assert len(done) == 1  # one probe at a time
        second = done[0].result()
        assert isinstance(second, Probe)
        assert not any(task.done() for task in waiting if task is not done[0])

        book.observe(KEY, None)  # it answered, without usage: known, nothing to widen
        second.end()
        rest = [task for task in waiting if task is not done[0]]
        assert await asyncio.gather(*rest) == [None, None]
        assert book.tokens(KEY) == 0

    run(test())


def test_a_lost_probe_holds_no_call_past_the_deployments_timeout() -> None:
    book = MarginBook()
    gate = ProbeGate(book)

    async def test() -> None:
        lost = await gate.admit(KEY, SHORT)
        assert lost is not None  # never ended: its call went away without a word
        admitted = await asyncio.gather(gate.admit(KEY, SHORT), gate.admit(KEY, SHORT))
        # The first to wake replaces it as the probe; the other goes ahead rather than wait
        # for the new one past its own timeout.
        assert sorted(isinstance(one, Probe) for one in admitted) == [False, True]
        assert not book.known(KEY)

    run(test())
