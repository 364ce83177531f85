"""The token budget: Relay-E's window allocation, and a request's input budget with the share
of it that injected context may take (``plan_budget``)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

SYSTEM_SHARE = 0.10
CONTEXT_SHARE = 0.40
HISTORY_SHARE = 0.50
MIN_HEADROOM = 2000
HEADROOM_SHARE = 0.10


@dataclass(frozen=True)
class BudgetAllocation:
    response_headroom: int
    system: int
    context: int
    history: int


def relay_headroom(context_window: int) -> int:
    return max(MIN_HEADROOM, math.ceil(HEADROOM_SHARE * context_window))


def allocate_budget(context_window: int, reserved_output: int | None = None) -> BudgetAllocation:
    """Relay-E's ``allocateBudget``: response headroom ``max(2000, 10%)`` (or the given reserve),
    then 10% system, 40% context and 50% history of what is left for input."""
    headroom = relay_headroom(context_window) if reserved_output is None else reserved_output
    headroom = min(headroom, context_window)
    available = context_window - headroom
    return BudgetAllocation(
        response_headroom=headroom,
        system=int(available * SYSTEM_SHARE),
        context=int(available * CONTEXT_SHARE),
        history=int(available * HISTORY_SHARE),
    )


@dataclass
class Budget:
    context_window: int
    reserved_output: int
    max_input: int
    context: int
    used: int = 0
    request_tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def reserved_output_tokens(
    *,
    context_window: int,
    reserve_setting: int | str,
    request_max_tokens: int | None,
    route_max_output: int | None,
) -> int:
    """``auto``: the request's own output limit, else the route's, else Relay-E's headroom.
    A number can raise the reserve but it never drops below the request's ``max_tokens``."""
    if isinstance(reserve_setting, int):
        reserve = max(reserve_setting, request_max_tokens or 0)
    elif request_max_tokens:
        reserve = request_max_tokens
    elif route_max_output:
        reserve = route_max_output
    else:
        reserve = relay_headroom(context_window)
    return min(reserve, context_window)


def plan_budget(
    *,
    context_window: int,
    max_tokens_setting: int | str,
    reserve_setting: int | str,
    context_cap: int | None,
    request_max_tokens: int | None,
    route_max_output: int | None,
    request_tokens: int,
) -> Budget:
    """The input budget and the share of it that injected context may take.

    ``max_input`` is ``budget.max_tokens``, or with ``auto`` the window less the reserved output.
    Context gets 40% of the input budget (Relay-E), capped by ``context_tokens`` and by the room
    the request itself leaves, so injection alone never pushes a request over its budget.
    """
    reserve = reserved_output_tokens(
        context_window=context_window,
        reserve_setting=reserve_setting,
        request_max_tokens=request_max_tokens,
        route_max_output=route_max_output,
    )
    ceiling = context_window - reserve
    max_input = min(max_tokens_setting, ceiling) if isinstance(max_tokens_setting, int) else ceiling
    context = allocate_budget(max_input, reserved_output=0).context
    if context_cap is not None:
        context = min(context, context_cap)
    context = max(0, min(context, max_input - request_tokens))
    return Budget(
        context_window=context_window,
        reserved_output=reserve,
        max_input=max_input,
        context=context,
        request_tokens=request_tokens,
    )
