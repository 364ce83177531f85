"""Fetching a route's sources: concurrent, each under its own timeout, failures recorded."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Literal

import pytest

from contextplatform.core.estimation import HeuristicEstimator, TokenEstimator
from sources.base import ContextRequest, ContextSource, SourceFailed, SourceResult, SourceSettings
from sources.fetch import SourceOutcome, fetch_all, fetch_source

REQUEST = ContextRequest(
    request_id="rsv_test", tenant="acme", route="support", user="u_1", session=None, query="refund?"
)


class FakeSettings(SourceSettings):
    type: Literal["fake"] = "fake"
    texts: list[str] = []
    delay: float = 0.0
    hang: bool = False
    error: str | None = None


class FakeSource(ContextSource):
    """Sleeps ``delay`` seconds, then returns its texts, raises, or never returns."""

    type = "fake"
    Settings: ClassVar[type[SourceSettings]] = FakeSettings

    def __init__(self, settings: FakeSettings, *, default_timeout_ms: int = 1500) -> None:
        super().__init__(settings, default_timeout_ms=default_timeout_ms)
        self.fake_settings = settings
        self.called = False
        self.cancelled = False

    async def fetch(self, request: ContextRequest) -> SourceResult:
        self.called = True
        settings = self.fake_settings
        try:
            if settings.hang:
                await asyncio.Event().wait()
            await asyncio.sleep(settings.delay)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if settings.error is not None:
            raise RuntimeError(settings.error)
        return SourceResult([self.item(text) for text in settings.texts])


class GatedSource(ContextSource):
    """Waits for ``gate`` and sets ``opens`` once started: only completes if run concurrently
    with the source that opens its gate."""

    type = "gated"
    Settings: ClassVar[type[SourceSettings]] = FakeSettings

    def __init__(
        self, settings: SourceSettings, gate: asyncio.Event | None, opens: asyncio.Event | None
    ) -> None:
        super().__init__(settings)
        self.gate = gate
        self.opens = opens

    async def fetch(self, request: ContextRequest) -> SourceResult:
        if self.opens is not None:
            self.opens.set()
        if self.gate is not None:
            await self.gate.wait()
        return SourceResult([self.item(f"from {self.name}")])


def fake(name: str, **fields: Any) -> FakeSource:
    return FakeSource(FakeSettings(name=name, **fields))


def run(
    sources: Sequence[ContextSource], estimator: TokenEstimator | None = None
) -> list[SourceOutcome]:
    return asyncio.run(fetch_all(list(sources), REQUEST, estimator))


def intervals_overlap(outcomes: list[SourceOutcome]) -> bool:
    """True when one instant lies inside every [started_at, ended_at] interval."""
    return max(o.started_at for o in outcomes) < min(o.ended_at for o in outcomes)


# --- concurrency ------------------------------------------------------------------------------


def test_sources_are_fetched_concurrently() -> None:
    sources = [fake(f"s{n}", texts=[f"text {n}"], delay=0.02) for n in range(6)]
    outcomes = run(sources)
    assert [o.status for o in outcomes] == ["ok"] * 6
    assert all(0 < o.started_at < o.ended_at for o in outcomes)
    assert intervals_overlap(outcomes)


def test_sequential_fetches_would_not_overlap() -> None:
    """The overlap measure can tell: the same sources awaited one by one do not overlap."""

    async def sequential(sources: list[FakeSource]) -> list[SourceOutcome]:
        return [await fetch_source(s, REQUEST, HeuristicEstimator()) for s in sources]

    outcomes = asyncio.run(sequential([fake(f"s{n}", texts=["x"], delay=0.005) for n in range(3)]))
    assert not intervals_overlap(outcomes)
    for earlier, later in itertools.pairwise(outcomes):
        assert earlier.ended_at <= later.started_at


def test_a_source_can_wait_on_a_later_one() -> None:
    """The first source only finishes once the last has started: impossible one at a time."""

    async def scenario() -> list[SourceOutcome]:
        opened = asyncio.Event()
        sources: list[ContextSource] = [
            GatedSource(FakeSettings(name="waits", timeout_ms=5000), gate=opened, opens=None),
            GatedSource(FakeSettings(name="middle"), gate=None, opens=None),
            GatedSource(FakeSettings(name="opens"), gate=None, opens=opened),
        ]
        return await fetch_all(sources, REQUEST)

    outcomes = asyncio.run(scenario())
    assert [(o.name, o.status) for o in outcomes] == [
        ("waits", "ok"),
        ("middle", "ok"),
        ("opens", "ok"),
    ]
    assert outcomes[0].ended_at > outcomes[2].started_at


# --- statuses ---------------------------------------------------------------------------------


def test_a_hanging_source_times_out_while_the_others_succeed() -> None:
    hanging = fake("hangs", hang=True, timeout_ms=30, texts=["never"])
    sources = [fake("first", texts=["a"]), hanging, fake("last", texts=["b", "c"], delay=0.001)]
    outcomes = run(sources)
    assert [(o.name, o.status) for o in outcomes] == [
        ("first", "ok"),
        ("hangs", "timeout"),
        ("last", "ok"),
    ]
    timed_out = outcomes[1]
    assert timed_out.items == []
    assert timed_out.error == "timed out after 30 ms"
    assert timed_out.failed
    assert hanging.cancelled  # the hung fetch is cancelled, not left running
    assert [i.content for i in outcomes[2].items] == ["b", "c"]
    assert not outcomes[0].failed and not outcomes[2].failed


def test_source_timeout_falls_back_to_the_default() -> None:
    source = FakeSource(FakeSettings(name="slow", hang=True), default_timeout_ms=20)
    assert source.timeout_seconds == 0.02
    [outcome] = run([source])
    assert outcome.status == "timeout"
    assert outcome.error == "timed out after 20 ms"


def test_a_raising_source_fails_with_its_error_text() -> None:
    outcomes = run([fake("broken", error="backend down"), fake("fine", texts=["ok"])])
    broken, fine = outcomes
    assert broken.status == "failed"
    assert broken.error == "RuntimeError: backend down"
    assert broken.items == []
    assert broken.failed
    assert fine.status == "ok"


def test_a_long_error_is_truncated() -> None:
    [outcome] = run([fake("broken", error="x" * 2000)])
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.startswith("RuntimeError: xxx")
    assert len(outcome.error) == 500


def test_a_disabled_source_is_skipped_and_never_called() -> None:
    disabled = fake("off", enabled=False, texts=["secret"])
    outcomes = run([disabled, fake("on", texts=["x"])])
    assert [(o.name, o.status) for o in outcomes] == [("off", "skipped"), ("on", "ok")]
    assert not disabled.called
    assert outcomes[0].items == []
    assert outcomes[0].error is None
    assert not outcomes[0].failed


def test_a_source_returning_nothing_is_empty() -> None:
    [outcome] = run([fake("nothing", texts=[])])
    assert outcome.status == "empty"
    assert outcome.items == []
    assert outcome.error is None
    assert not outcome.failed


def test_no_sources() -> None:
    assert run([]) == []


def test_outcome_carries_the_sources_settings() -> None:
    source = fake("docs", texts=["x"], priority=42, on_failure="warn")
    [outcome] = run([source])
    assert (outcome.name, outcome.type, outcome.priority, outcome.on_failure) == (
        "docs",
        "fake",
        42,
        "warn",
    )
    assert outcome.items[0].source == "docs"
    assert outcome.items[0].priority == 42
    assert outcome.ms >= 0


def test_an_unnamed_source_is_named_after_its_type() -> None:
    [outcome] = run([FakeSource(FakeSettings(texts=["x"]))])
    assert outcome.name == "fake"


# --- tokens and order -------------------------------------------------------------------------


def test_tokens_are_estimated_with_the_estimator_name() -> None:
    texts = ["Refunds are issued within 30 days of purchase.", "日本語のテキスト", "x" * 400]
    [outcome] = run([fake("docs", texts=texts)])
    estimator = HeuristicEstimator()
    assert [item.tokens for item in outcome.items] == [estimator.count(t) for t in texts]
    assert {item.estimator for item in outcome.items} == {"heuristic"}
    assert outcome.items[2].tokens == 100


def test_a_custom_estimator_is_used_and_named() -> None:
    class CharCounter:
        name = "chars"

        def count(self, text: str) -> int:
            return len(text)

    [outcome] = run([fake("docs", texts=["abc", "hello"])], estimator=CharCounter())
    assert [(i.tokens, i.estimator) for i in outcome.items] == [(3, "chars"), (5, "chars")]


def test_tokens_a_source_counted_itself_are_kept() -> None:
    class Precounted(FakeSource):
        async def fetch(self, request: ContextRequest) -> SourceResult:
            return SourceResult([self.item("some text", tokens=7, estimator="exact")])

    [outcome] = run([Precounted(FakeSettings(name="pre"))])
    assert (outcome.items[0].tokens, outcome.items[0].estimator) == (7, "exact")


def test_outcomes_keep_the_order_of_the_sources() -> None:
    # The first source is the slowest and the last the fastest.
    delays = [0.03, 0.0, 0.02, 0.01, 0.0]
    sources = [fake(f"s{n}", texts=[f"t{n}"], delay=delay) for n, delay in enumerate(delays)]
    outcomes = run(sources)
    assert [o.name for o in outcomes] == ["s0", "s1", "s2", "s3", "s4"]
    assert [o.items[0].content for o in outcomes] == ["t0", "t1", "t2", "t3", "t4"]


def test_mixed_statuses_keep_the_order_of_the_sources() -> None:
    sources = [
        fake("timeout", hang=True, timeout_ms=10),
        fake("failed", error="nope"),
        fake("skipped", enabled=False),
        fake("empty"),
        fake("ok", texts=["x"]),
    ]
    outcomes = run(sources)
    assert [o.status for o in outcomes] == ["timeout", "failed", "skipped", "empty", "ok"]
    assert [o.name for o in outcomes] == [o.status for o in outcomes]


# --- logs -------------------------------------------------------------------------------------


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def source_logs() -> Iterator[list[logging.LogRecord]]:
    logger = logging.getLogger("contextplatform.sources")
    handler = Collect()
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def test_one_log_line_per_fetched_source(source_logs: list[logging.LogRecord]) -> None:
    run(
        [
            fake("good", texts=["x"]),
            fake("quiet", error="boom"),
            fake("loud", error="boom", on_failure="warn"),
            fake("off", enabled=False),
        ]
    )
    by_source: dict[str, Any] = {record.__dict__["source"]: record for record in source_logs}
    assert set(by_source) == {"good", "quiet", "loud"}
    good, quiet, loud = by_source["good"], by_source["quiet"], by_source["loud"]
    assert good.getMessage() == "context_source_ok"
    assert (good.request_id, good.tenant, good.route, good.items) == (
        "rsv_test",
        "acme",
        "support",
        1,
    )
    assert good.levelno == logging.DEBUG
    assert quiet.getMessage() == "context_source_failed"
    assert quiet.levelno == logging.INFO
    assert loud.levelno == logging.WARNING
    assert loud.err == "RuntimeError: boom"


# --- what a fetch hands back --------------------------------------------------------------------


class ReportingSource(FakeSource):
    """Returns a trace and notes with its items, or fails after learning something."""

    async def fetch(self, request: ContextRequest) -> SourceResult:
        if self.fake_settings.error is not None:
            cause = LookupError(self.fake_settings.error)
            raise SourceFailed(cause, {"served_by": "fallback", "primary_error": "HTTP 500"})
        if self.fake_settings.hang:
            await asyncio.Event().wait()
        return SourceResult(
            [self.item("kept")],
            trace=[{"id": 1, "kept": True}, {"id": 2, "kept": False, "reason": "below"}],
            notes={"cache": "miss"},
        )

    def notes_on_timeout(self) -> dict[str, Any]:
        return {"status": "the store did not answer"}


def test_a_result_s_trace_and_notes_reach_the_outcome_and_leave_the_source_as_it_was() -> None:
    source = ReportingSource(FakeSettings(name="docs"))
    [outcome] = run([source])
    assert outcome.status == "ok"
    assert outcome.candidates == [
        {"id": 1, "kept": True},
        {"id": 2, "kept": False, "reason": "below"},
    ]
    assert outcome.notes == {"cache": "miss"}
    assert not hasattr(source, "trace") and not hasattr(source, "notes")


def test_a_failed_fetch_keeps_its_notes_and_names_the_error_it_wraps() -> None:
    [outcome] = run([ReportingSource(FakeSettings(name="docs", error="unknown collection"))])
    assert outcome.status == "failed"
    assert outcome.error == "LookupError: unknown collection"
    assert outcome.notes == {"served_by": "fallback", "primary_error": "HTTP 500"}
    assert outcome.candidates == []


def test_a_timed_out_fetch_reports_the_kind_s_timeout_notes() -> None:
    [outcome] = run([ReportingSource(FakeSettings(name="docs", hang=True, timeout_ms=20))])
    assert outcome.status == "timeout"
    assert outcome.notes == {"status": "the store did not answer"}


def test_a_plain_failure_has_no_notes() -> None:
    [outcome] = run([fake("docs", error="boom")])
    assert (outcome.status, outcome.error, outcome.notes) == ("failed", "RuntimeError: boom", {})
