"""One streamed call with tools the gateway serves: the rounds of upstream streams behind the one
stream the client reads (``stream_loop.StreamRound`` decides what passes; this does the I/O:
serving the calls on the tenant's database thread, holding the follow-up's cost against the
session budget, opening the follow-up stream)."""

from __future__ import annotations

from typing import Any

from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway.forward import (
    Forwarding,
    UpstreamRejected,
    UpstreamResponse,
    open_stream,
)
from contextplatform.gateway.protocol import GatewayError, error_body
from contextplatform.gateway.served_tools import ServedTools
from contextplatform.gateway.stream_loop import StreamRound
from contextplatform.gateway.tool_loop import ToolSteps, follow_up_for, follow_up_refused
from contextplatform.protocols.registry import protocol_for
from contextplatform.protocols.usage import ProviderUsage, usage_of


class ToolStream:
    def __init__(
        self,
        upstream: Upstream,
        body: dict[str, Any],
        tools: ServedTools,
        steps: ToolSteps,
        forward: Forwarding,
        hide_usage: bool,
    ) -> None:
        self.upstream = upstream
        self.body = body
        self.tools = tools
        self.steps = steps
        self.forward = forward
        self.round = StreamRound(
            protocol=upstream.protocol, reserved=tools.names, client_wants_usage=not hide_usage
        )
        self.round.begin_round()
        self.failure: GatewayError | None = None

    async def follow_up(self) -> UpstreamResponse | None:
        """The next round's stream when the round that ended called reserved tools (and the loop
        may go on), else None: the caller then writes ``ending()``."""
        calls = self.round.reserved_calls()
        if not calls:
            return None
        tools = self.tools
        follow = await follow_up_for(
            self.upstream.protocol,
            self.body,
            self.round.turn(),
            calls,
            tools,
            self.steps,
        )
        if follow is None:
            return None
        try:
            response = await open_stream(self.upstream, follow, **self.forward)
        except (GatewayError, UpstreamRejected) as error:
            self.failure = follow_up_refused(tools, calls, error)
            return None
        self.body = follow
        self.round.begin_round()
        return response

    def ending(self) -> bytes:
        """The end of the client's stream: the held end of the turn, or, when a follow-up failed
        under fail_closed, the provider's in-stream error event (its SDK raises it)."""
        if self.failure is not None:
            error = error_body(self.upstream.protocol, self.failure)
            return protocol_for(self.upstream.protocol).error_event(error)
        return self.round.finish()

    def provider_usage(self) -> ProviderUsage | None:
        return usage_of(self.round.total_usage())

    def first_usage(self) -> ProviderUsage | None:
        usages = self.round.usages
        return usage_of(usages[0]) if usages else self.provider_usage()


__all__ = ["ToolStream"]
