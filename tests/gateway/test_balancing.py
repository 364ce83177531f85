"""A route's pool through the live gateway (``model.balance``) and a deployment's ``limits``:
weights respected, the least busy deployment preferred over a slow one, fallback inside a pool,
a deployment at its rpm or tpm skipped for the call (``rate_limited_locally`` in the record) and
429 ``rate_limited`` with Retry-After when every one is; both fields read back as written and
are validated. Two real loopback upstreams; deployments of each test's own."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from contextplatform.core.minute_counts import WINDOW_S
from tests.gateway.conftest import DEPLOYMENT_HEADER, Fallbacks, outcomes


@pytest.fixture
def pool(fallbacks: Fallbacks) -> Fallbacks:
    """A route's pool is made as its fallbacks are: two upstreams, deployments of the test's own."""
    return fallbacks


def balanced_route(pool: Fallbacks, names: list[str], balance: dict[str, Any]) -> str:
    route = pool.route(names)
    with pool.gateway.api() as api:
        response = api.patch(f"/api/v1/routes/{route}", json={"model": {"balance": balance}})
    assert response.status_code == 200, response.text
    assert response.json()["model"]["balance"]["strategy"] == balance.get("strategy", "latency")
    return route


def limited(pool: Fallbacks, base_url: str, limits: dict[str, int]) -> str:
    name = pool.deployment(base_url)
    with pool.gateway.api() as api:
        response = api.patch(f"/api/v1/deployments/{name}", json={"limits": limits})
    assert response.status_code == 200, response.text
    assert response.json()["limits"] == limits
    return name


def answered_by(pool: Fallbacks, route: str, calls: int, clients: int = 1) -> Counter[str]:
    def one(_: int) -> str:
        response = pool.chat(route)
        assert response.status_code == 200, response.text
        return response.headers[DEPLOYMENT_HEADER]

    with ThreadPoolExecutor(clients) as workers:
        return Counter(workers.map(one, range(calls)))


def within_one_minute() -> None:
    """Wait for the next minute when this one ends within seconds: a test's counts stay in one
    window of the limits."""
    left = WINDOW_S - time.time() % WINDOW_S
    if left < 8:
        time.sleep(left + 0.1)


def test_weights_share_the_calls_three_to_one(pool: Fallbacks) -> None:
    one = pool.deployment(pool.first.openai_base_url)
    two = pool.deployment(pool.second.openai_base_url)
    route = balanced_route(pool, [one, two], {"strategy": "weighted", "weights": {one: 3}})

    shares = answered_by(pool, route, 200, clients=4)

    assert shares[one] + shares[two] == 200
    # 150 expected; the standard deviation of 200 draws at 3:4 is about 6.
    assert 125 <= shares[one] <= 175, shares
    assert pool.first.hits == shares[one] and pool.second.hits == shares[two]


def test_least_busy_keeps_most_calls_off_a_slow_deployment(pool: Fallbacks) -> None:
    slow = pool.deployment(pool.first.openai_base_url)
    fast = pool.deployment(pool.second.openai_base_url)
    pool.first.answer_slowly(3.0)
    route = balanced_route(pool, [slow, fast], {"strategy": "least_busy"})

    shares = answered_by(pool, route, 32, clients=8)

    assert shares[slow] + shares[fast] == 32
    assert shares[fast] >= 3 * shares[slow], shares


def test_without_balance_the_first_deployment_takes_every_call(pool: Fallbacks) -> None:
    route, one, _ = pool.pair()
    assert answered_by(pool, route, 12, clients=4) == Counter({one: 12})


def test_a_failing_pick_falls_back_to_the_rest_of_the_pool(pool: Fallbacks) -> None:
    one = pool.deployment(pool.first.openai_base_url)
    two = pool.deployment(pool.second.openai_base_url)
    # Nearly every call picks two first; it fails and one answers, as a fallback.
    route = balanced_route(pool, [one, two], {"strategy": "weighted", "weights": {two: 1000}})
    pool.second.fail(503)

    response = pool.chat(route)

    assert response.status_code == 200, response.text
    assert response.headers[DEPLOYMENT_HEADER] == one
    assert outcomes(pool.attempts(response)) == [(two, "status", 503), (one, "answered", None)]
    # two cools down: the next calls go to one without trying it.
    later = pool.chat(route)
    assert outcomes(pool.attempts(later)) == [(one, "answered", None)]


def test_a_deployment_at_its_rpm_is_skipped_for_the_next(pool: Fallbacks) -> None:
    within_one_minute()
    one = limited(pool, pool.first.openai_base_url, {"rpm": 2})
    two = pool.deployment(pool.second.openai_base_url)
    route = pool.route([one, two])

    first_calls = [pool.chat(route) for _ in range(2)]
    third = pool.chat(route)

    assert [r.headers[DEPLOYMENT_HEADER] for r in first_calls] == [one, one]
    assert third.status_code == 200, third.text
    assert third.headers[DEPLOYMENT_HEADER] == two
    assert outcomes(pool.attempts(third)) == [
        (one, "rate_limited_locally", None),
        (two, "answered", None),
    ]
    assert pool.first.hits == 2  # the skipped call never reached it


def test_every_deployment_at_its_limit_is_a_429_with_retry_after(pool: Fallbacks) -> None:
    within_one_minute()
    one = limited(pool, pool.first.openai_base_url, {"rpm": 1})
    two = limited(pool, pool.second.openai_base_url, {"rpm": 1})
    route = balanced_route(pool, [one, two], {"strategy": "least_busy"})
    assert pool.chat(route).status_code == 200
    assert pool.chat(route).status_code == 200

    refused = pool.chat(route)

    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "rate_limited"
    assert one in error["message"] and two in error["message"]
    assert 1 <= int(refused.headers["Retry-After"]) <= WINDOW_S
    assert outcomes(pool.attempts(refused)) == [
        (one, "rate_limited_locally", None),
        (two, "rate_limited_locally", None),
    ]
    assert pool.first.hits + pool.second.hits == 2
    client = openai.OpenAI(
        base_url=pool.gateway.openai_base_url, api_key=pool.gateway.key, max_retries=0
    )
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model=route, messages=[{"role": "user", "content": "hello"}])


def test_a_deployment_past_its_tpm_is_skipped_once_its_tokens_are_reported(
    pool: Fallbacks,
) -> None:
    within_one_minute()
    one = limited(pool, pool.first.openai_base_url, {"tpm": 5})
    two = pool.deployment(pool.second.openai_base_url)
    route = pool.route([one, two])

    first = pool.chat(route)  # nothing reported yet this minute: sent
    assert first.headers[DEPLOYMENT_HEADER] == one
    assert first.json()["usage"]["total_tokens"] >= 5

    second = pool.chat(route)

    assert second.headers[DEPLOYMENT_HEADER] == two
    assert outcomes(pool.attempts(second)) == [
        (one, "rate_limited_locally", None),
        (two, "answered", None),
    ]


def test_a_stream_is_skipped_and_counted_like_an_answer(pool: Fallbacks) -> None:
    within_one_minute()
    one = limited(pool, pool.first.openai_base_url, {"rpm": 1})
    two = pool.deployment(pool.second.openai_base_url)
    route = pool.route([one, two])

    first = pool.chat(route, stream=True)
    second = pool.chat(route, stream=True)

    assert first.headers[DEPLOYMENT_HEADER] == one
    assert second.headers[DEPLOYMENT_HEADER] == two
    assert "data: [DONE]" in second.text


def test_limits_and_balance_read_back_and_are_validated(pool: Fallbacks) -> None:
    one = limited(pool, pool.first.openai_base_url, {"rpm": 600, "tpm": 200000})
    two = pool.deployment(pool.second.openai_base_url)
    with pool.gateway.api() as api:
        read = api.get(f"/api/v1/deployments/{one}").json()
        assert read["limits"] == {"rpm": 600, "tpm": 200000}
        assert api.get(f"/api/v1/deployments/{two}").json()["limits"] == {}
        # A representation posted back is accepted as it is.
        assert api.put(f"/api/v1/deployments/{one}", json=read).json()["limits"] == read["limits"]
        for limits, param in (({"rpm": 0}, "limits.rpm"), ({"rps": 1}, "limits.rps")):
            bad = api.patch(f"/api/v1/deployments/{one}", json={"limits": limits})
            assert bad.status_code == 400, bad.text
            assert bad.json()["error"]["param"] == param
        cleared = api.patch(f"/api/v1/deployments/{one}", json={"limits": None})
        assert cleared.json()["limits"] == {}

    balance = {"strategy": "weighted", "weights": {one: 3.0, two: 1.0}}
    route = balanced_route(pool, [one, two], balance)
    with pool.gateway.api() as api:
        stored = api.get(f"/api/v1/routes/{route}").json()
        assert stored["model"]["balance"] == balance
        assert stored["model"]["upstream"] == [one, two]
        for bad_balance, words in (
            ({"strategy": "weighted", "weights": {"nope": 2}}, "does not list"),
            ({"strategy": "weighted", "weights": {one: 0}}, "greater than 0"),
            ({"strategy": "round_robin"}, "strategy"),
        ):
            bad = api.patch(f"/api/v1/routes/{route}", json={"model": {"balance": bad_balance}})
            assert bad.status_code == 400, bad.text
            assert words in bad.json()["error"]["message"]
            assert bad.json()["error"]["param"].startswith("model")
        single = api.patch(f"/api/v1/routes/{route}", json={"model": {"upstream": one}})
        assert single.status_code == 400
        assert "at least two deployments" in single.json()["error"]["message"]
        off = api.patch(f"/api/v1/routes/{route}", json={"model": {"balance": None}})
        assert off.status_code == 200, off.text
        assert "balance" not in off.json()["model"]
