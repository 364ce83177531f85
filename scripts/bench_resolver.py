"""In-process benchmarks of ``resolve()``: overhead over the slowest source, and parallelism."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from scripts.bench_setup import BENCH_TENANT, SOURCE_COUNT, bench_route, save_routes
from scripts.bench_stats import Summary, summarize

OVERHEAD_ROUTE = "bench-overhead"
PARALLEL_ROUTE = "bench-parallel"
OVERHEAD_SLEEPS_MS = [2.0, 3.0, 4.0, 2.0, 3.0, 4.0]
PARALLEL_SLEEP_MS = 50.0
TARGET_P50_MS = 5.0
TARGET_P99_MS = 20.0
PARALLEL_FACTOR = 1.15
ROUTE_SLEEP_MS = {OVERHEAD_ROUTE: max(OVERHEAD_SLEEPS_MS), PARALLEL_ROUTE: PARALLEL_SLEEP_MS}

CHAT_BODY: dict[str, Any] = {
    "model": "bench",
    "max_tokens": 512,
    "messages": [
        {"role": "system", "content": "You are a helpful support assistant."},
        {"role": "user", "content": "My headphones crackle on the left side."},
        {"role": "assistant", "content": "Sorry to hear that. Since when?"},
        {"role": "user", "content": "Since yesterday. Can I get a refund or a replacement?"},
    ],
}


@dataclass(frozen=True)
class Sample:
    wall_ms: float  # the whole resolve() call, replay write included when recording
    duration_ms: float  # resolution.duration_ms: stamped before the replay write
    slowest_ms: float  # max(outcome.ms)
    sleep_ms: float  # the longest sleep configured on the route's sources
    kept: int
    candidates: int
    overlapped: bool  # every source's fetch interval overlapped every other's

    @property
    def overhead_ms(self) -> float:
        return self.wall_ms - self.slowest_ms

    @property
    def pipeline_overhead_ms(self) -> float:
        return self.duration_ms - self.slowest_ms

    @property
    def over_sleep_ms(self) -> float:
        """Everything that is not the sources' own waiting, token estimation of items included."""
        return self.wall_ms - self.sleep_ms


@dataclass
class OverheadResult:
    recorded: list[Sample] = field(default_factory=list)
    unrecorded: list[Sample] = field(default_factory=list)

    def overhead(self) -> Summary:
        return summarize([s.overhead_ms for s in self.recorded])

    def pipeline_overhead(self) -> Summary:
        return summarize([s.pipeline_overhead_ms for s in self.recorded])

    def overhead_without_replay(self) -> Summary:
        return summarize([s.overhead_ms for s in self.unrecorded])

    def replay_write(self) -> Summary:
        return summarize([s.wall_ms - s.duration_ms for s in self.recorded])

    def over_sleep(self) -> Summary:
        return summarize([s.over_sleep_ms for s in self.recorded])

    def slowest_source(self) -> Summary:
        return summarize([s.slowest_ms for s in self.recorded])


@dataclass
class ParallelResult:
    parallel: list[Sample]
    sequential: list[Sample]

    def parallel_total(self) -> Summary:
        return summarize([s.wall_ms for s in self.parallel])

    def sequential_total(self) -> Summary:
        return summarize([s.wall_ms for s in self.sequential])

    def slowest_source(self) -> Summary:
        return summarize([s.slowest_ms for s in self.parallel])

    def over_sleep(self) -> Summary:
        return summarize([s.over_sleep_ms for s in self.parallel])

    def overlapped(self) -> int:
        return sum(1 for s in self.parallel if s.overlapped)


def prepare_routes() -> None:
    save_routes(
        [
            bench_route(OVERHEAD_ROUTE, OVERHEAD_SLEEPS_MS),
            bench_route(PARALLEL_ROUTE, [PARALLEL_SLEEP_MS] * SOURCE_COUNT),
        ]
    )


def resolve_bench(route: str, *, record: bool = True) -> tuple[Any, float]:
    """``resolve()`` of a bench route with ``CHAT_BODY``, in the current schema: the resolution
    and the call's wall ms. Raises when a source did not succeed."""
    from dataclasses import replace

    from contextplatform.resolve.modes import LIVE, PREVIEW
    from contextplatform.resolve.pipeline import ResolveRequest, resolve

    # Recorded: the live mode without the turn's start (the bench's requests name no session).
    mode = replace(LIVE, touches=LIVE.touches - {"session", "memory_write"}) if record else PREVIEW
    started = time.perf_counter()
    resolution = resolve(
        ResolveRequest(tenant_schema=BENCH_TENANT, route=route, request_body=CHAT_BODY), mode
    ).resolution
    wall_ms = (time.perf_counter() - started) * 1000
    if any(o.status != "ok" for o in resolution.outcomes):
        raise RuntimeError(f"a bench source did not succeed: {resolution.source_reports()}")
    return resolution, wall_ms


def resolve_once(route: str, *, record: bool) -> Sample:
    from contextplatform.replay.writer import REPLAY_WRITER

    resolution, wall_ms = resolve_bench(route, record=record)
    REPLAY_WRITER.flush()  # the record is written off the resolve path; not into the next one
    return Sample(
        wall_ms=wall_ms,
        duration_ms=resolution.duration_ms,
        slowest_ms=max(o.ms for o in resolution.outcomes),
        sleep_ms=ROUTE_SLEEP_MS[route],
        kept=sum(1 for d in resolution.decisions if d.kept),
        overlapped=max(o.started_at for o in resolution.outcomes)
        < min(o.ended_at for o in resolution.outcomes),
        candidates=len(resolution.decisions),
    )


def measure_overhead(iterations: int, warmup: int) -> OverheadResult:
    """Interleave recorded and unrecorded resolves so drift affects both alike."""
    from django_tenants.utils import schema_context

    result = OverheadResult()
    with schema_context(BENCH_TENANT):
        for _ in range(warmup):
            resolve_once(OVERHEAD_ROUTE, record=True)
            resolve_once(OVERHEAD_ROUTE, record=False)
        for _ in range(iterations):
            result.recorded.append(resolve_once(OVERHEAD_ROUTE, record=True))
            result.unrecorded.append(resolve_once(OVERHEAD_ROUTE, record=False))
    return result


async def fetch_sequential(sources: list[Any], request: Any, estimator: Any = None) -> list[Any]:
    """The baseline: the same sources awaited one after another."""
    from contextplatform.core.estimation import default_estimator
    from sources.fetch import fetch_source

    chosen = estimator or default_estimator()
    return [await fetch_source(source, request, chosen) for source in sources]


@contextmanager
def sequential_fetch() -> Iterator[None]:
    with mock.patch("contextplatform.resolve.resolver.fetch_all", fetch_sequential):
        yield


def measure_parallelism(parallel_runs: int, sequential_runs: int, warmup: int) -> ParallelResult:
    from django_tenants.utils import schema_context

    with schema_context(BENCH_TENANT):
        for _ in range(warmup):
            resolve_once(PARALLEL_ROUTE, record=True)
        parallel = [resolve_once(PARALLEL_ROUTE, record=True) for _ in range(parallel_runs)]
        with sequential_fetch():
            sequential = [resolve_once(PARALLEL_ROUTE, record=True) for _ in range(sequential_runs)]
    return ParallelResult(parallel=parallel, sequential=sequential)


def timed_ms(action: Callable[[], object], repeats: int) -> Summary:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return summarize(samples)


def measure_estimation(repeats: int = 50) -> dict[str, Summary]:
    """CPU pieces of one resolve, timed alone, to show where the overhead goes."""
    from django_tenants.utils import schema_context

    from contextplatform.core.estimation import count_json, default_estimator

    estimator = default_estimator()
    with schema_context(BENCH_TENANT):
        resolution, _ = resolve_bench(OVERHEAD_ROUTE, record=False)
    texts = [d.item.content for d in resolution.decisions]
    rewritten = resolution.rewritten
    return {
        f"token estimate of the {len(texts)} candidate items (in sources' ms)": timed_ms(
            lambda: [estimator.count(text) for text in texts], repeats
        ),
        "count_json(request body), tokens before": timed_ms(
            lambda: count_json(CHAT_BODY, estimator), repeats
        ),
        "count_json(rewritten body), tokens after": timed_ms(
            lambda: count_json(rewritten, estimator), repeats
        ),
    }
