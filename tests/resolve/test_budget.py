"""The token budget: Relay-E's allocation and the input budget a resolve plans."""

from __future__ import annotations

import pytest

from contextplatform.resolve.budget import (
    Budget,
    BudgetAllocation,
    allocate_budget,
    plan_budget,
    relay_headroom,
    reserved_output_tokens,
)


def plan(
    *,
    context_window: int = 128_000,
    max_tokens_setting: int | str = "auto",
    reserve_setting: int | str = "auto",
    context_cap: int | None = None,
    request_max_tokens: int | None = None,
    route_max_output: int | None = None,
    request_tokens: int = 0,
) -> Budget:
    return plan_budget(
        context_window=context_window,
        max_tokens_setting=max_tokens_setting,
        reserve_setting=reserve_setting,
        context_cap=context_cap,
        request_max_tokens=request_max_tokens,
        route_max_output=route_max_output,
        request_tokens=request_tokens,
    )


# --- allocate_budget (Relay-E) ----------------------------------------------------------------


def test_allocate_8k_window_has_the_2000_token_minimum_headroom() -> None:
    allocation = allocate_budget(8192)
    assert allocation.response_headroom == 2000  # 10% would be only 820
    # 6192 left for input: 10% system, 40% context, 50% history (floored).
    assert allocation == BudgetAllocation(
        response_headroom=2000, system=619, context=2476, history=3096
    )


def test_allocate_8000_window() -> None:
    assert allocate_budget(8000) == BudgetAllocation(
        response_headroom=2000, system=600, context=2400, history=3000
    )


def test_allocate_200k_window_has_ten_percent_headroom() -> None:
    assert allocate_budget(200_000) == BudgetAllocation(
        response_headroom=20_000, system=18_000, context=72_000, history=90_000
    )


@pytest.mark.parametrize(
    ("window", "headroom"),
    [
        (1000, 2000),
        (19_999, 2000),
        (20_000, 2000),
        (20_001, 2001),
        (20_010, 2001),
        (128_000, 12_800),
    ],
)
def test_relay_headroom_is_max_of_2000_and_ten_percent_rounded_up(
    window: int, headroom: int
) -> None:
    assert relay_headroom(window) == headroom


def test_allocate_never_reserves_more_than_the_window() -> None:
    allocation = allocate_budget(1500)
    assert allocation.response_headroom == 1500
    assert (allocation.system, allocation.context, allocation.history) == (0, 0, 0)


def test_allocate_with_explicit_reserve() -> None:
    allocation = allocate_budget(10_000, reserved_output=1000)
    assert allocation == BudgetAllocation(
        response_headroom=1000, system=900, context=3600, history=4500
    )
    assert allocate_budget(10_000, reserved_output=0).context == 4000


@pytest.mark.parametrize("window", [256, 4096, 8192, 32_768, 128_000, 200_000, 1_000_000])
def test_allocation_shares_never_exceed_the_window(window: int) -> None:
    allocation = allocate_budget(window)
    available = window - allocation.response_headroom
    assert allocation.system + allocation.context + allocation.history <= available
    assert allocation.history >= allocation.context >= allocation.system


# --- plan_budget ------------------------------------------------------------------------------


def test_api_md_example() -> None:
    budget = plan(request_max_tokens=512, request_tokens=1200)
    assert budget.context_window == 128_000
    assert budget.reserved_output == 512
    assert budget.max_input == 127_488
    assert budget.context == 50_995  # int(0.4 * 127488)
    assert budget.used == 0
    assert budget.as_dict() == {
        "context_window": 128_000,
        "reserved_output": 512,
        "max_input": 127_488,
        "context": 50_995,
        "used": 0,
        "request_tokens": 1200,
    }


def test_numeric_reserve_never_drops_below_request_max_tokens() -> None:
    budget = plan(reserve_setting=256, request_max_tokens=4096)
    assert budget.reserved_output == 4096
    assert budget.max_input == 128_000 - 4096


def test_numeric_reserve_can_raise_the_reserve_above_request_max_tokens() -> None:
    budget = plan(reserve_setting=8000, request_max_tokens=512)
    assert budget.reserved_output == 8000
    assert budget.max_input == 120_000


def test_numeric_reserve_without_request_max_tokens_is_taken_as_is() -> None:
    assert plan(reserve_setting=3000, route_max_output=9000).reserved_output == 3000
    zero = plan(reserve_setting=0)
    assert zero.reserved_output == 0
    assert zero.max_input == 128_000


def test_numeric_max_tokens_caps_max_input() -> None:
    budget = plan(max_tokens_setting=32_000, request_max_tokens=512)
    assert budget.reserved_output == 512
    assert budget.max_input == 32_000
    assert budget.context == 12_800


def test_numeric_max_tokens_above_the_room_left_is_capped_by_the_window() -> None:
    budget = plan(max_tokens_setting=500_000, request_max_tokens=512)
    assert budget.max_input == 127_488


def test_context_tokens_caps_context() -> None:
    assert plan(request_max_tokens=512, context_cap=1000).context == 1000
    # A cap above 40% of the input budget changes nothing.
    assert plan(request_max_tokens=512, context_cap=100_000).context == 50_995


def test_context_never_exceeds_room_left_by_the_request() -> None:
    budget = plan(request_max_tokens=512, request_tokens=100_000)
    assert budget.context == 127_488 - 100_000
    assert budget.request_tokens + budget.context <= budget.max_input


def test_context_is_zero_when_the_request_alone_fills_the_input_budget() -> None:
    assert plan(request_max_tokens=512, request_tokens=127_488).context == 0
    assert plan(request_max_tokens=512, request_tokens=200_000).context == 0


@pytest.mark.parametrize("request_tokens", [0, 1, 5000, 70_000, 76_493, 76_494, 127_487])
def test_context_plus_request_fits_max_input(request_tokens: int) -> None:
    budget = plan(request_max_tokens=512, request_tokens=request_tokens)
    assert 0 <= budget.context <= 50_995
    assert budget.request_tokens + budget.context <= budget.max_input


def test_route_max_output_is_the_reserve_when_the_request_has_none() -> None:
    budget = plan(route_max_output=4096)
    assert budget.reserved_output == 4096
    assert budget.max_input == 123_904
    assert budget.context == int(0.4 * 123_904)


def test_request_max_tokens_comes_before_route_max_output() -> None:
    assert plan(request_max_tokens=512, route_max_output=4096).reserved_output == 512


def test_relay_headroom_when_neither_request_nor_route_limit_output() -> None:
    budget = plan()
    assert budget.reserved_output == 12_800
    assert budget.max_input == 115_200
    assert budget.context == 46_080
    small = plan(context_window=8192)
    assert small.reserved_output == 2000
    assert small.max_input == 6192


def test_reserve_larger_than_the_window_leaves_no_input() -> None:
    budget = plan(context_window=8192, reserve_setting=1_000_000)
    assert budget.reserved_output == 8192
    assert budget.max_input == 0
    assert budget.context == 0


def test_reserved_output_tokens_directly() -> None:
    common = {"context_window": 8192}
    assert (
        reserved_output_tokens(
            **common, reserve_setting="auto", request_max_tokens=100, route_max_output=300
        )
        == 100
    )
    assert (
        reserved_output_tokens(
            **common, reserve_setting="auto", request_max_tokens=None, route_max_output=300
        )
        == 300
    )
    assert (
        reserved_output_tokens(
            **common, reserve_setting="auto", request_max_tokens=None, route_max_output=None
        )
        == 2000
    )
    assert (
        reserved_output_tokens(
            **common, reserve_setting=50, request_max_tokens=100, route_max_output=None
        )
        == 100
    )
    assert (
        reserved_output_tokens(
            **common, reserve_setting="auto", request_max_tokens=9000, route_max_output=None
        )
        == 8192
    )
