"""Which deployment of a route's pool a call tries first (``model.balance``): pure, no Django, no
I/O. The gateway passes in what its process knows of each deployment (calls in flight, the
moving average of its answers' latency) and a source of randomness; the first pick leads, the
others stay fallbacks in the route's order.

* ``weighted``: at random, each deployment as likely as its weight (1 when unweighted);
* ``least_busy``: the fewest calls in flight from this process, ties to the earlier listed;
* ``latency``: the lowest moving average of answer latency; a deployment not yet measured is
  tried first (it has to be, to be measured), and the average is scaled by the calls it has in
  flight, so that a fast deployment that queues is not piled on.

``DEFAULT_STRATEGY`` is the one that did best on scripts/bench_balance.py (two loopback
upstreams, one slower, 32 concurrent clients)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final, Literal, get_args

Strategy = Literal["weighted", "least_busy", "latency"]
STRATEGIES: Final[tuple[str, ...]] = get_args(Strategy)
DEFAULT_STRATEGY: Final[Strategy] = "latency"

# The weight of the newest latency in the moving average: about the last ten answers count.
LATENCY_ALPHA: Final = 0.2
MAX_WEIGHT: Final = 1000.0


def next_latency(average: float | None, sample_ms: float, alpha: float = LATENCY_ALPHA) -> float:
    """The moving average after one more answer that took ``sample_ms``."""
    if average is None:
        return sample_ms
    return average + alpha * (sample_ms - average)


def _weighted(names: Sequence[str], weights: Mapping[str, float], draw: float) -> str:
    total = sum(weights.get(name, 1.0) for name in names)
    point = draw * total
    for name in names:
        point -= weights.get(name, 1.0)
        if point < 0:
            return name
    return names[-1]  # ``draw`` close to 1 and the sum's rounding


def _least_busy(names: Sequence[str], in_flight: Mapping[str, int]) -> str:
    return min(names, key=lambda name: in_flight.get(name, 0))


def _fastest(
    names: Sequence[str], in_flight: Mapping[str, int], latency_ms: Mapping[str, float]
) -> str:
    unmeasured = [name for name in names if name not in latency_ms]
    if unmeasured:
        return _least_busy(unmeasured, in_flight)
    return min(names, key=lambda name: latency_ms[name] * (1 + in_flight.get(name, 0)))


def pick(
    strategy: Strategy,
    names: Sequence[str],
    *,
    weights: Mapping[str, float] | None = None,
    in_flight: Mapping[str, int] | None = None,
    latency_ms: Mapping[str, float] | None = None,
    draw: Callable[[], float] | None = None,
) -> str:
    """The deployment of ``names`` (not empty) the strategy sends the call to first. ``draw``
    returns a number in [0, 1) (``random.random``); only ``weighted`` calls it."""
    if not names:
        raise ValueError("a pool has at least one deployment")
    if len(names) == 1:
        return names[0]
    if strategy == "weighted":
        if draw is None:
            raise ValueError("the weighted strategy draws at random: pass draw")
        return _weighted(names, weights or {}, draw())
    if strategy == "least_busy":
        return _least_busy(names, in_flight or {})
    return _fastest(names, in_flight or {}, latency_ms or {})


def balanced_order(
    strategy: Strategy,
    names: Sequence[str],
    *,
    weights: Mapping[str, float] | None = None,
    in_flight: Mapping[str, int] | None = None,
    latency_ms: Mapping[str, float] | None = None,
    draw: Callable[[], float] | None = None,
) -> list[str]:
    """``names`` with the strategy's pick first, the others after it in their order."""
    if not names:
        return []
    first = pick(
        strategy,
        names,
        weights=weights,
        in_flight=in_flight,
        latency_ms=latency_ms,
        draw=draw,
    )
    return [first, *(name for name in names if name != first)]


__all__ = [
    "DEFAULT_STRATEGY",
    "LATENCY_ALPHA",
    "MAX_WEIGHT",
    "STRATEGIES",
    "Strategy",
    "balanced_order",
    "next_latency",
    "pick",
]
