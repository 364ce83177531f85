"""What one finished gateway call adds to the Prometheus series and to the tenant's live
dashboards: its status, the deployment that answered, its latency, its tokens and its cost. In
process and never raising: a counter's increment and a queued live event, no database."""

from __future__ import annotations

import functools
import logging
import time

from prometheus_client import Counter, Histogram

from contextplatform.core import metrics
from contextplatform.core.live_events import EVENT_TYPE, metrics_group, publish
from contextplatform.deployments.pricing import Price, usage_cost
from contextplatform.gateway.fallback import Attempts
from contextplatform.protocols.usage import ProviderUsage
from contextplatform.resolve.live_events import call_frame

logger = logging.getLogger("contextplatform.gateway")


def call_status(attempts: Attempts, answered: bool) -> str:
    """The call's status label (``metrics.GATEWAY_STATUSES``)."""
    last = attempts.made[-1] if attempts.made else None
    if last is None:
        return "refused"
    if last.outcome == "answered":
        return "ok" if answered else "incomplete"
    return "rejected" if last.outcome == "rejected" else "failed"


def observe_call(
    *,
    schema: str,
    route: str,
    attempts: Attempts,
    answered: bool,
    usage: ProviderUsage | None,
    price: Price | None,
    call_ms: float,
    stream: bool,
    stream_ms: float | None = None,
) -> None:
    """The call's series moved and its live event queued; never raises into the call.
    ``stream_ms``: a stream's time from its request to its end (its rounds included)."""
    try:
        status = call_status(attempts, answered)
        last = attempts.made[-1] if attempts.made else None
        deployment = last.deployment if last is not None else ""
        cost = None
        _calls(route, deployment, status).inc()
        if last is not None and last.outcome == "answered":
            # A stream's attempt ended at its first byte; an answer's at its last.
            if stream:
                _ttft(deployment).observe(last.ms / 1000)
                if stream_ms is not None:
                    _latency(deployment).observe(stream_ms / 1000)
            else:
                _latency(deployment).observe(last.ms / 1000)
        if usage is not None:
            _tokens(route, deployment, "input").inc(usage.input)
            _tokens(route, deployment, "output").inc(usage.output)
            _tokens(route, deployment, "cached_input").inc(usage.cached_input)
            cost = usage_cost(price, usage)
            if cost:
                _cost(route, deployment).inc(cost)
        event = call_frame(
            route=route,
            deployment=deployment,
            status=status,
            ms=call_ms,
            input_tokens=usage.input if usage is not None else 0,
            output_tokens=usage.output if usage is not None else 0,
            cached_input_tokens=usage.cached_input if usage is not None else 0,
            cost_usd=cost,
            at=time.time(),
        )
        publish(metrics_group(schema), {"type": EVENT_TYPE, "events": [event]})
    except Exception:
        logger.warning("observing the gateway call failed", exc_info=True)


# Each series's child looked up once per process, as ``core.metrics`` does for the sources'.
@functools.cache
def _calls(route: str, deployment: str, status: str) -> Counter:
    return metrics.GATEWAY_CALLS.labels(route, deployment, status)


@functools.cache
def _latency(deployment: str) -> Histogram:
    return metrics.UPSTREAM_LATENCY.labels(deployment)


@functools.cache
def _ttft(deployment: str) -> Histogram:
    return metrics.TIME_TO_FIRST_TOKEN.labels(deployment)


@functools.cache
def _tokens(route: str, deployment: str, kind: str) -> Counter:
    return metrics.GATEWAY_TOKENS.labels(route, deployment, kind)


@functools.cache
def _cost(route: str, deployment: str) -> Counter:
    return metrics.GATEWAY_COST.labels(route, deployment)


__all__ = ["call_status", "observe_call"]
