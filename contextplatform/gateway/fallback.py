"""Calls that survive a provider: a route's ``model.upstream`` may list deployments in fallback
order, and a call moves to the next one when a deployment gives no answer to pass on (a
connection error, a timeout, a 429 or a 5xx, before the first byte of the answer). A 4xx other
than 429 is the caller's to fix and passes through as it is.

A deployment that failed cools down (in this process) for the ``Retry-After`` it sent (seconds
or an HTTP date, bounded by ``GATEWAY_FALLBACK_MAX_COOLDOWN_S``), else for
``GATEWAY_FALLBACK_COOLDOWN_S``; a cooling deployment is tried after the others, the one whose
cool-down ends first leading. An answer ends its deployment's cool-down. Every attempt (the
deployment, how it ended, how long it took) goes into the replay record."""

from __future__ import annotations

import email.utils
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from django.conf import settings

from contextplatform.core.metrics import GATEWAY_FALLBACKS
from contextplatform.deployments.balancing import balanced_order
from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway import deployment_limits
from contextplatform.gateway.forward import UpstreamRejected, UpstreamUnavailable, connect_retries
from contextplatform.gateway.pool_stats import POOL_STATS
from contextplatform.gateway.protocol import GatewayError
from contextplatform.routes.configuration.schema import BalanceSettings

logger = logging.getLogger("contextplatform.gateway")

DEFAULT_COOLDOWN_S = 30.0
DEFAULT_MAX_COOLDOWN_S = 600.0
RATE_LIMITED = 429

T = TypeVar("T")


def cooldown_s() -> float:
    return float(getattr(settings, "GATEWAY_FALLBACK_COOLDOWN_S", DEFAULT_COOLDOWN_S))


def max_cooldown_s() -> float:
    return float(getattr(settings, "GATEWAY_FALLBACK_MAX_COOLDOWN_S", DEFAULT_MAX_COOLDOWN_S))


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """A ``Retry-After`` header in seconds: delta-seconds or an HTTP date; None when absent or
    unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)


class Cooldowns:
    """Until when each deployment (per tenant schema and name) is left out, by the monotonic
    clock; shared by the threads and loops of this process."""

    def __init__(self) -> None:
        self._until: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def cool(self, key: tuple[str, str], seconds: float) -> None:
        if seconds <= 0:
            return
        until = time.monotonic() + min(seconds, max_cooldown_s())
        with self._lock:
            self._until[key] = max(self._until.get(key, 0.0), until)

    def clear(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._until.pop(key, None)

    def ends(self, key: tuple[str, str]) -> float | None:
        """When ``key``'s cool-down ends (monotonic), None when it is not cooling."""
        now = time.monotonic()
        with self._lock:
            until = self._until.get(key)
            if until is not None and until <= now:
                del self._until[key]
                return None
            return until


COOLDOWNS = Cooldowns()


def in_order(
    schema: str, upstreams: Sequence[Upstream], balance: BalanceSettings | None = None
) -> list[Upstream]:
    """The deployments in the order to try them: those not cooling as listed (with ``balance``,
    the strategy's pick among them first), then the cooling ones, the one whose cool-down ends
    first leading."""
    ends = {upstream.name: COOLDOWNS.ends((schema, upstream.name)) for upstream in upstreams}
    ready = [upstream for upstream in upstreams if ends[upstream.name] is None]
    if balance is not None and len(ready) > 1:
        ready = balanced(schema, ready, balance)
    cooling = sorted(
        (upstream for upstream in upstreams if ends[upstream.name] is not None),
        key=lambda upstream: ends[upstream.name] or 0.0,
    )
    return ready + cooling


def balanced(schema: str, ready: Sequence[Upstream], balance: BalanceSettings) -> list[Upstream]:
    names = [upstream.name for upstream in ready]
    in_flight, latency_ms = POOL_STATS.of(schema, names)
    order = balanced_order(
        balance.strategy,
        names,
        weights=balance.weights,
        in_flight=in_flight,
        latency_ms=latency_ms,
        draw=random.random,
    )
    by_name = {upstream.name: upstream for upstream in ready}
    return [by_name[name] for name in order]


@dataclass(frozen=True)
class Attempt:
    """One deployment tried: how it ended (``answered``, ``rejected`` for a 4xx passed on,
    ``status``, ``timeout``, ``connection``, or ``rate_limited_locally``: skipped, unsent, at
    its ``limits``), its HTTP status when it answered one."""

    deployment: str
    outcome: str
    ms: int
    status: int | None = None

    def as_record(self) -> dict[str, object]:
        record: dict[str, object] = {
            "deployment": self.deployment,
            "outcome": self.outcome,
            "ms": self.ms,
        }
        if self.status is not None:
            record["status"] = self.status
        return record


class Attempts:
    """The attempts of one call, in the order made; what the replay record keeps."""

    def __init__(self) -> None:
        self.made: list[Attempt] = []

    def add(self, attempt: Attempt) -> None:
        self.made.append(attempt)

    @property
    def answered_by(self) -> str | None:
        last = self.made[-1] if self.made else None
        return last.deployment if last is not None and last.outcome == "answered" else None

    def record(self) -> list[dict[str, object]]:
        return [attempt.as_record() for attempt in self.made]


def _elapsed_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def all_limited(skipped: Sequence[deployment_limits.LimitReached]) -> GatewayError:
    soonest = min(reached.retry_after_s for reached in skipped)
    named = ", ".join(f"{reached.deployment!r} ({reached.limit})" for reached in skipped)
    return GatewayError(
        429,
        "rate_limited",
        f"every deployment of this route is at its limit for this minute: {named}; retry "
        f"after {soonest} s",
        headers={"Retry-After": str(soonest)},
    )


async def first_answer(
    schema: str,
    upstreams: Sequence[Upstream],
    send: Callable[[Upstream], Awaitable[T]],
    attempts: Attempts,
    balance: BalanceSettings | None = None,
) -> tuple[T, Upstream]:
    """``send`` to each deployment in turn (``in_order``) until one answers; the answer and the
    deployment that gave it. A 4xx other than 429 passes through at once; when every deployment
    failed, the last one's error is raised; when none was sent (each at its limits), 429."""
    last: Exception | None = None
    skipped: list[deployment_limits.LimitReached] = []
    ordered = in_order(schema, upstreams, balance)
    for place, upstream in enumerate(ordered, start=1):
        key = (schema, upstream.name)
        reached = await deployment_limits.admit(schema, upstream)
        if reached is not None:
            attempts.add(Attempt(upstream.name, "rate_limited_locally", 0))
            skipped.append(reached)
            continue
        started = time.monotonic()
        POOL_STATS.started(key)
        answered_ms: float | None = None
        try:
            # A deployment that cannot be reached is left at once while another one remains.
            with connect_retries(place == len(ordered)):
                answer = await send(upstream)
            answered_ms = (time.monotonic() - started) * 1000
        except UpstreamRejected as error:
            if error.status != RATE_LIMITED:
                attempts.add(Attempt(upstream.name, "rejected", _elapsed_ms(started), error.status))
                raise
            attempts.add(Attempt(upstream.name, "status", _elapsed_ms(started), error.status))
            wait = retry_after_s(
                error.headers.get("retry-after") or error.headers.get("Retry-After")
            )
            COOLDOWNS.cool(key, cooldown_s() if wait is None else wait)
            last = error
        except UpstreamUnavailable as error:
            attempts.add(
                Attempt(upstream.name, error.kind, _elapsed_ms(started), error.upstream_status)
            )
            wait = retry_after_s(error.retry_after)
            COOLDOWNS.cool(key, cooldown_s() if wait is None else wait)
            last = error
        else:
            attempts.add(Attempt(upstream.name, "answered", _elapsed_ms(started)))
            COOLDOWNS.clear(key)
            return answer, upstream
        finally:
            POOL_STATS.ended(key, answered_ms)
        moves_on = place < len(ordered)
        if moves_on:  # the call moves to the next deployment: a fallback
            GATEWAY_FALLBACKS.labels(upstream.name, attempts.made[-1].outcome).inc()
        logger.warning(
            "the upstream deployment %r failed (%s); %s",
            upstream.name,
            attempts.made[-1].outcome,
            "trying the next" if moves_on else "none left",
        )
    if last is None:
        assert skipped, "a route's call has at least one deployment"
        raise all_limited(skipped)
    raise last


__all__ = [
    "COOLDOWNS",
    "Attempt",
    "Attempts",
    "Cooldowns",
    "all_limited",
    "first_answer",
    "in_order",
    "retry_after_s",
]
