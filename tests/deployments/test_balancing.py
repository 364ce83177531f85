"""The pool strategies (deployments/balancing.py) and the route's ``model.balance`` as validated:
pure, no database."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from pydantic import ValidationError

from contextplatform.deployments.balancing import (
    DEFAULT_STRATEGY,
    balanced_order,
    next_latency,
    pick,
)
from contextplatform.routes.configuration.schema import ModelSettings

POOL = ["a", "b", "c"]


def test_weighted_picks_in_proportion_to_the_weights() -> None:
    rng = random.Random(7)
    picks = Counter(
        pick("weighted", ["a", "b"], weights={"a": 3}, draw=rng.random) for _ in range(4000)
    )
    assert 2850 <= picks["a"] <= 3150  # 3:1, within about five standard deviations
    assert picks["a"] + picks["b"] == 4000


def test_weighted_draw_ends_map_to_the_first_and_last() -> None:
    assert pick("weighted", POOL, weights={"a": 1, "b": 1, "c": 2}, draw=lambda: 0.0) == "a"
    assert pick("weighted", POOL, weights={"a": 1, "b": 1, "c": 2}, draw=lambda: 0.49) == "b"
    assert pick("weighted", POOL, weights={"a": 1, "b": 1, "c": 2}, draw=lambda: 0.999999) == "c"


def test_weighted_needs_a_draw() -> None:
    with pytest.raises(ValueError, match="draw"):
        pick("weighted", POOL)


def test_least_busy_picks_the_fewest_in_flight_ties_to_the_earlier() -> None:
    assert pick("least_busy", POOL, in_flight={"a": 3, "b": 1, "c": 2}) == "b"
    assert pick("least_busy", POOL, in_flight={"a": 1, "b": 1, "c": 1}) == "a"
    assert pick("least_busy", POOL, in_flight={"a": 2}) == "b"  # absent: none in flight


def test_latency_tries_an_unmeasured_deployment_first() -> None:
    assert pick("latency", POOL, latency_ms={"a": 5.0, "c": 9.0}) == "b"


def test_latency_picks_the_lowest_average_scaled_by_the_calls_in_flight() -> None:
    averages = {"a": 100.0, "b": 20.0, "c": 50.0}
    assert pick("latency", POOL, latency_ms=averages) == "b"
    # b is fastest but has 4 calls queued: 20 * 5 = 100 > c's 50 * 1.
    assert pick("latency", POOL, latency_ms=averages, in_flight={"b": 4}) == "c"


def test_the_order_puts_the_pick_first_and_keeps_the_rest_in_order() -> None:
    order = balanced_order("least_busy", POOL, in_flight={"a": 2, "b": 2, "c": 0})
    assert order == ["c", "a", "b"]
    assert balanced_order("least_busy", []) == []
    assert balanced_order("latency", ["only"]) == ["only"]


def test_pick_refuses_an_empty_pool() -> None:
    with pytest.raises(ValueError):
        pick("latency", [])


def test_the_moving_average_starts_at_the_first_sample_and_follows() -> None:
    assert next_latency(None, 80.0) == 80.0
    assert next_latency(100.0, 200.0, alpha=0.5) == 150.0
    average: float | None = None
    for _ in range(50):
        average = next_latency(average, 10.0)
    assert average == pytest.approx(10.0)


def model(**balance: Any) -> ModelSettings:
    return ModelSettings.model_validate({"upstream": ["a", "b"], "balance": balance})


def test_a_balance_without_a_strategy_takes_the_default() -> None:
    assert model().balance is not None
    assert model().balance.strategy == DEFAULT_STRATEGY  # type: ignore[union-attr]
    stored = model(strategy="weighted", weights={"a": 3}).stored()
    assert stored["balance"] == {"strategy": "weighted", "weights": {"a": 3.0}}
    assert "balance" not in ModelSettings.model_validate({"upstream": "a"}).stored()


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"upstream": ["a", "b"], "balance": {"strategy": "fastest"}}, "strategy"),
        (
            {"upstream": ["a", "b"], "balance": {"strategy": "weighted", "weights": {"x": 2}}},
            "'x', which model.upstream does not list",
        ),
        (
            {"upstream": ["a", "b"], "balance": {"strategy": "weighted", "weights": {"a": 0}}},
            "greater than 0",
        ),
        (
            {"upstream": ["a", "b"], "balance": {"strategy": "weighted", "weights": {"a": -1}}},
            "greater than 0",
        ),
        (
            {"upstream": ["a", "b"], "balance": {"strategy": "least_busy", "weights": {"a": 2}}},
            "weighted strategy only",
        ),
        ({"upstream": "a", "balance": {}}, "at least two deployments"),
        ({"balance": {}}, "at least two deployments"),
        ({"upstream": ["a", "b"], "balance": {"spread": 1}}, "Extra inputs"),
    ],
)
def test_a_bad_balance_is_refused_saying_why(data: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        ModelSettings.model_validate(data)
