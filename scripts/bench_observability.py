"""Section 7: the cost of observability on the resolve path, in process, and the live fan-out.

The resolve path has three observability parts: *metrics* (``metrics.observe_source`` per source,
``metrics.StageClock`` per stage, django-prometheus's counters around every SQL query, the live
stream's own counter), *replay* (``resolver.save_replay``: one ``ReplayRecord`` INSERT) and *live*
(``live_events.publish_source_events``: one group message per resolve). "Off" swaps a part's calls for
no-ops in the bench process (``unittest.mock.patch``); nothing in the platform switches them off,
and ``resolve(record=False)`` would change more than these (no compression records, dry-run
sources). Settings — every part on, every part off, one part on alone — run in a fresh random
order in every round, so drift and other load fall on all of them alike; each resolve runs as the ASGI
server runs a view (``sync_to_async`` in a thread, ``fetch_all`` back on the event loop), with a
listener of the tenant's group on that loop.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import numpy as np

from scripts.bench_env import load_average, utc_now
from scripts.bench_fanout import FanoutResult, measure_fanout
from scripts.bench_memory import redis_answers, redis_url
from scripts.bench_resolver import resolve_bench
from scripts.bench_setup import (
    BENCH_TENANT,
    bench_route,
    clear_bench_replay,
    ensure_tenant,
    log,
    save_routes,
)
from scripts.bench_stats import Summary, summarize

ROUTE = "bench-observability"
SOURCE_SLEEPS_MS = (1.0, 1.0, 1.0, 1.0)
PARTS = ("metrics", "replay", "live")
TARGET_P50_MS = 1.0
CHANNEL_PREFIX = "cpbench"  # the in-process Redis layer's keys, apart from any server's ("cp")
DRAIN_TIMEOUT_S = 10.0
SEED = 7


@dataclass(frozen=True)
class Setting:
    name: str
    on: frozenset[str]

    @property
    def off(self) -> frozenset[str]:
        return frozenset(PARTS) - self.on


ALL_ON = Setting("on", frozenset(PARTS))
ALL_OFF = Setting("off", frozenset())
ALONE = tuple(Setting(part, frozenset({part})) for part in PARTS)
LIVE_ALONE = ALONE[PARTS.index("live")]
# Both parts that do I/O or hand work to another thread: shows whether their costs add up.
REPLAY_AND_LIVE = Setting("replay+live", frozenset({"replay", "live"}))
REDIS_SETTINGS = (ALL_ON, ALL_OFF, *ALONE, REPLAY_AND_LIVE)


@dataclass(frozen=True)
class Sizes:
    rounds: int
    warmup: int
    fanout_seconds: float


FULL_SIZES = Sizes(rounds=1000, warmup=50, fanout_seconds=15.0)
QUICK_SIZES = Sizes(rounds=100, warmup=10, fanout_seconds=5.0)


# Switching parts off -----------------------------------------------------------------------------


class NullMetric:
    """Stands in for a prometheus_client metric: every call does nothing."""

    def labels(self, *args: object, **kwargs: object) -> NullMetric:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass

    def time(self) -> nullcontext[None]:
        return nullcontext()


class NullClock:
    """``metrics.StageClock`` without the histogram."""

    def lap(self, stage: str) -> None:
        pass

    def restart(self) -> None:
        pass


NULL_METRIC = NullMetric()


def no_op(*args: object, **kwargs: object) -> None:
    return None


PATCHES: dict[str, tuple[tuple[str, Any], ...]] = {
    "metrics": (
        ("contextplatform.core.metrics.observe_source", no_op),
        ("contextplatform.core.metrics.StageClock", NullClock),
        ("contextplatform.core.live_events.LIVE_EVENTS", NULL_METRIC),
        ("contextplatform.resolve.live_events.LIVE_EVENTS", NULL_METRIC),
    ),
    "replay": (("contextplatform.resolve.pipeline.save_replay", no_op),),
    "live": (("contextplatform.resolve.live_events.publish_source_events", no_op),),
}


def uncounted_statements() -> Iterator[Any]:
    """The engine's statement counters (``contextplatform.postgresql.counted``) as no-ops, on the
    cursor class this process's connections were made with."""
    from django.db import connection

    connection.ensure_connection()
    with connection.connection.cursor() as cursor:
        cursor_class = type(cursor)
    for counter in ("executed", "executed_many", "duration"):
        yield mock.patch.object(cursor_class, counter, NULL_METRIC)


@contextmanager
def switched_off(parts: frozenset[str]) -> Iterator[None]:
    with ExitStack() as stack:
        for part in sorted(parts):
            for target, replacement in PATCHES[part]:
                stack.enter_context(mock.patch(target, replacement))
        if "metrics" in parts:
            for patch in uncounted_statements():
                stack.enter_context(patch)
        yield


# Measuring ---------------------------------------------------------------------------------------


@dataclass
class LayerRun:
    """One channel layer's rounds, per setting and round: the wall ms of ``resolve()`` and the
    bench process's CPU ms from its start until its live events reached the listener (every
    thread: the resolve's, the event loop's, the live sender's; not PostgreSQL's or Redis's)."""

    layer: str
    wall: dict[str, list[float]]
    cpu: dict[str, list[float]]
    events_expected: int = 0
    events_received: int = 0

    def summary(self, setting: str, measure: str = "wall") -> Summary:
        return summarize(getattr(self, measure)[setting])

    def differences(self, setting: str, measure: str = "wall") -> list[float]:
        """``setting`` minus all-off within each round (the two ran next to each other)."""
        samples = getattr(self, measure)
        return [on - off for on, off in zip(samples[setting], samples[ALL_OFF.name], strict=True)]

    def mean_interval(self, setting: str, measure: str = "wall") -> tuple[float, float]:
        """Mean paired difference and the half-width of its 95 % confidence interval."""
        data = np.asarray(self.differences(setting, measure))
        return float(data.mean()), float(1.96 * data.std(ddof=1) / np.sqrt(len(data)))

    def settings(self) -> list[str]:
        return [name for name in self.wall if name != ALL_OFF.name]


@dataclass
class ObservabilityResults:
    date: str
    quick: bool
    sizes: Sizes
    redis: str
    layers: list[LayerRun] = field(default_factory=list)
    fanout: FanoutResult | None = None
    skipped: str = ""
    load_average: str = ""
    runtime_s: float = 0.0

    def layer(self, name: str) -> LayerRun | None:
        return next((run for run in self.layers if run.layer == name), None)


class Listener:
    """A member of the tenant's group on the bench's event loop, as a connected dashboard is."""

    def __init__(self) -> None:
        self.events = 0
        self.ready = asyncio.Event()
        self._arrived = asyncio.Event()

    async def listen(self, layer: Any, group: str) -> None:
        from contextplatform.core.live_events import LISTENER_LOOP

        LISTENER_LOOP.remember()  # as the dashboards' consumer does when it joins
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        self.ready.set()
        try:
            while True:
                message = await layer.receive(channel)
                self.events += len(message["events"])
                self._arrived.set()
        finally:
            await layer.group_discard(group, channel)

    async def caught_up(self, events: int, timeout_s: float) -> bool:
        """Wait (idle, no polling) until ``events`` events in all have arrived."""
        deadline = time.monotonic() + timeout_s
        while self.events < events:
            self._arrived.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), remaining)
        return True


def timed_resolve(setting: Setting) -> float:
    """Wall ms of one recorded ``resolve()`` of the bench route with ``setting``'s parts on."""
    from django_tenants.utils import schema_context

    with switched_off(setting.off), schema_context(BENCH_TENANT):
        return resolve_bench(ROUTE)[1]


async def run_rounds(layer_name: str, settings: Sequence[Setting], sizes: Sizes) -> LayerRun:
    """Every round runs every setting once, in a fresh seeded random order. After each resolve
    the bench waits until its live events have reached the listener, so no setting inherits
    the background work of the one before; CPU is counted from the start of the resolve to
    that point."""
    from asgiref.sync import sync_to_async
    from channels.layers import get_channel_layer

    from contextplatform.core.live_events import metrics_group
    from contextplatform.replay.writer import REPLAY_WRITER

    layer = get_channel_layer()
    listener = Listener()
    listening = asyncio.create_task(listener.listen(layer, metrics_group(BENCH_TENANT)))
    await listener.ready.wait()
    run = LayerRun(
        layer=layer_name, wall={s.name: [] for s in settings}, cpu={s.name: [] for s in settings}
    )
    resolve_in_thread = sync_to_async(timed_resolve)
    order = random.Random(SEED)
    for index in range(sizes.warmup + sizes.rounds):
        for setting in order.sample(list(settings), len(settings)):
            cpu_started = time.process_time()
            wall_ms = await resolve_in_thread(setting)
            if "replay" in setting.on:  # written off the resolve path: drained, CPU counted
                await asyncio.to_thread(REPLAY_WRITER.flush)
            if "live" in setting.on:
                run.events_expected += len(SOURCE_SLEEPS_MS)
                await listener.caught_up(run.events_expected, DRAIN_TIMEOUT_S)
            cpu_ms = (time.process_time() - cpu_started) * 1000
            if index >= sizes.warmup:
                run.wall[setting.name].append(wall_ms)
                run.cpu[setting.name].append(cpu_ms)
    run.events_received = listener.events
    listening.cancel()
    await asyncio.gather(listening, return_exceptions=True)  # leaves the group
    return run


def layer_settings(url: str | None) -> dict[str, Any]:
    if url is None:
        return {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [url], "prefix": CHANNEL_PREFIX},
        }
    }


def measure_layer(
    layer_name: str, url: str | None, settings: Sequence[Setting], sizes: Sizes
) -> LayerRun:
    from django.test import override_settings

    with override_settings(CHANNEL_LAYERS=layer_settings(url)):
        return asyncio.run(run_rounds(layer_name, settings, sizes))


def run_observability(quick: bool) -> ObservabilityResults:
    started = time.perf_counter()
    sizes = QUICK_SIZES if quick else FULL_SIZES
    url = redis_url()
    results = ObservabilityResults(date=utc_now(), quick=quick, sizes=sizes, redis=url)
    ensure_tenant(BENCH_TENANT)
    save_routes([bench_route(ROUTE, list(SOURCE_SLEEPS_MS))])
    clear_bench_replay()
    problem = redis_answers(url)
    if problem:
        results.skipped = f"no Redis at {url}: {problem}"
        log(f"observability: Redis parts SKIPPED ({results.skipped})")
    else:
        log(f"observability overhead, Redis layer: {sizes.rounds} rounds x 6 settings …")
        results.layers.append(measure_layer("redis", url, REDIS_SETTINGS, sizes))
    log(f"observability overhead, in-memory layer: {sizes.rounds} rounds x 3 settings …")
    results.layers.append(measure_layer("in-memory", None, (ALL_ON, ALL_OFF, LIVE_ALONE), sizes))
    clear_bench_replay()
    if not problem:
        log(f"live fan-out: uvicorn (Redis layer), {sizes.fanout_seconds:g} s of resolves …")
        results.fanout = measure_fanout(url, sizes.fanout_seconds)
        clear_bench_replay()
    results.load_average = load_average()
    results.runtime_s = time.perf_counter() - started
    return results
