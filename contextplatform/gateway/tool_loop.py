"""The non-streaming tool loop: while the model's answer calls tools the gateway serves, serve them,
ask again with their results, and give the client one answer carrying the usage of every call.

The loop ends when an answer calls none of them, after ``MAX_ROUNDS`` rounds, when the session
budget cannot hold another call, or when a follow-up fails. Whatever reserved calls the last answer
still holds are taken out of it. A failed follow-up under ``compress.failure_mode: fail_closed`` is
a 502 for the client; otherwise the client gets the answer it had, without the reserved calls."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from contextplatform.gateway.forward import UpstreamAnswer, UpstreamRejected
from contextplatform.gateway.protocol import GatewayError, Protocol
from contextplatform.gateway.served_tools import ServedTools
from contextplatform.gateway.tool_calls import (
    ServedCall,
    ToolCall,
    follow_up_body,
    reserved_calls,
    with_usage,
    without_reserved,
)
from contextplatform.protocols.usage import ProviderUsage, usage_from_response

logger = logging.getLogger("contextplatform.gateway")

Serve = Callable[[list[ToolCall]], Awaitable[list[ServedCall]]]
Ask = Callable[[dict[str, Any]], Awaitable[UpstreamAnswer]]
Extend = Callable[[dict[str, Any]], Awaitable[bool]]


@dataclass(frozen=True)
class ToolSteps:
    """The I/O a loop round needs, made once per call by the view: serving calls on the tenant's
    database thread, holding a follow-up's cost against the session budget."""

    serve: Serve
    extend: Extend


@dataclass(frozen=True)
class LoopedAnswer:
    answer: UpstreamAnswer  # what the client receives
    first_usage: ProviderUsage | None  # the first call's usage: the one the estimate is of
    follow_ups: int


def follow_up_failed(error: Exception) -> GatewayError:
    return GatewayError(502, "upstream_error", f"the context follow-up call failed: {error}")


async def follow_up_for(
    protocol: Protocol,
    body: dict[str, Any],
    turn: dict[str, Any],
    calls: list[ToolCall],
    tools: ServedTools,
    steps: ToolSteps,
) -> dict[str, Any] | None:
    """The next request of the loop, the reserved ``calls`` of ``turn`` served, or None (and the
    reason recorded) when the loop stops: its rounds are used up, or the session budget cannot
    hold another call. Shared by the non-streaming loop and the stream's rounds."""
    if not tools.may_continue():
        tools.records.append({"tool": calls[0].name, "status": "rounds_exhausted"})
        return None
    served = await steps.serve(calls)
    follow = follow_up_body(protocol, body, turn, served)
    if not await steps.extend(follow):
        tools.records.append({"tool": calls[0].name, "status": "budget_exceeded"})
        return None
    return follow


def follow_up_refused(
    tools: ServedTools, calls: list[ToolCall], error: Exception
) -> GatewayError | None:
    """A follow-up call failed: recorded; the client's error under fail_closed, else None (the
    answer goes without the reserved calls)."""
    logger.warning("a context follow-up call failed: %s", error)
    tools.records.append({"tool": calls[0].name, "status": "follow_up_failed"})
    return follow_up_failed(error) if tools.fail_closed else None


async def answer_with_tools(
    protocol: Protocol,
    body: dict[str, Any],
    answer: UpstreamAnswer,
    tools: ServedTools,
    *,
    steps: ToolSteps,
    ask: Ask,
) -> LoopedAnswer:
    first_usage = usage_from_response(answer.payload)
    usages: list[Any] = [answer.payload.get("usage")]
    payload = answer.payload
    follow_ups = 0
    while calls := reserved_calls(protocol, payload, tools.names):
        follow = await follow_up_for(protocol, body, payload, calls, tools, steps)
        if follow is None:
            break
        try:
            next_answer = await ask(follow)
        except (GatewayError, UpstreamRejected) as error:
            if (refusal := follow_up_refused(tools, calls, error)) is not None:
                raise refusal from error
            break
        follow_ups += 1
        body, payload = follow, next_answer.payload
        usages.append(payload.get("usage"))
    if follow_ups == 0 and not reserved_calls(protocol, payload, tools.names):
        return LoopedAnswer(answer=answer, first_usage=first_usage, follow_ups=0)
    final = with_usage(protocol, without_reserved(protocol, payload, tools.names), usages)
    raw = json.dumps(final).encode()
    return LoopedAnswer(
        answer=UpstreamAnswer(status=answer.status, body=raw, payload=final),
        first_usage=first_usage,
        follow_ups=follow_ups,
    )


__all__ = ["LoopedAnswer", "ToolSteps", "answer_with_tools", "follow_up_for", "follow_up_refused"]
