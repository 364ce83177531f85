"""The two ways a resolve refuses a request, each worded in one place.

``context_length_exceeded`` (400): the request cannot fit the route's input budget, before any
source ran or after compression did what it could. ``source_failed`` (503): a source whose
``on_failure`` is ``block`` failed or timed out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contextplatform.core.errors import ApiError

if TYPE_CHECKING:
    from contextplatform.resolve.budget import Budget
    from sources.fetch import SourceOutcome


def context_length_exceeded(
    tokens: int, budget: Budget, *, after_compression: bool = False
) -> ApiError:
    message = (
        f"the request needs about {tokens} input tokens but the route allows "
        f"{max(budget.max_input, 0)} "
        f"({budget.context_window} window less {budget.reserved_output} reserved for output)"
    )
    if after_compression:
        message += (
            " after configured compression: protected instructions, tool structure, schemas or "
            "preserved content cannot be shortened"
        )
    return ApiError("context_length_exceeded", message, status=400, param="request")


def source_failed(outcome: SourceOutcome, resolve_id: str) -> ApiError:
    said = "timed out" if outcome.status == "timeout" else "failed"
    return ApiError(
        "source_failed",
        f"source {outcome.name!r} {said} and the route says on_failure: block "
        f"(replay {resolve_id})",
        status=503,
        param=f"sources.{outcome.name}",
    )
