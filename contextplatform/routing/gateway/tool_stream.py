"""One streamed call with tools the gateway serves: the rounds of upstream streams behind the one
stream the client reads (``stream_loop.StreamRound`` decides what passes; this does the I/O:
serving the calls on the tenant's database thread, holding the follow-up's cost against the
session budget, opening the follow-up stream)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from contextplatform.deployments.selectors import Upstream
from contextplatform.routing.gateway.budgets import HeldBudget, follow_up_cost
from contextplatform.routing.gateway.forward import UpstreamRejected, open_stream
from contextplatform.routing.gateway.protocol import GatewayError, error_body
from contextplatform.routing.gateway.served_tools import ServedTools
from contextplatform.routing.gateway.stream_loop import StreamRound, sse
from contextplatform.routing.gateway.tool_calls import follow_up_body
from contextplatform.routing.gateway.tool_loop import follow_up_failed
from contextplatform.routing.pipeline.resolver import Resolution
from contextplatform.routing.pipeline.usage import ProviderUsage, usage_of
from tenants.models import Tenant

logger = logging.getLogger("contextplatform.gateway")

InTenant = Callable[[Tenant, Callable[[], Any]], Awaitable[Any]]


class ToolStream:
    def __init__(
        self,
        tenant: Tenant,
        upstream: Upstream,
        body: dict[str, Any],
        tools: ServedTools,
        held: HeldBudget,
        forward: dict[str, Any],
        resolution: Resolution,
        hide_usage: bool,
        in_tenant: InTenant,
    ) -> None:
        self.tenant = tenant
        self.upstream = upstream
        self.body = body
        self.tools = tools
        self.held = held
        self.forward = forward
        self.resolution = resolution
        self.in_tenant = in_tenant
        self.round = StreamRound(
            protocol=upstream.protocol, reserved=tools.names, client_wants_usage=not hide_usage
        )
        self.round.begin_round()
        self.failure: GatewayError | None = None

    async def follow_up(self) -> httpx.Response | None:
        """The next round's stream when the round that ended called reserved tools (and the loop
        may go on), else None: the caller then writes ``ending()``."""
        calls = self.round.reserved_calls()
        if not calls:
            return None
        if not self.tools.may_continue():
            self.tools.records.append({"tool": calls[0].name, "status": "rounds_exhausted"})
            return None
        tools = self.tools
        served = await self.in_tenant(self.tenant, lambda: tools.serve_round(calls))
        follow = follow_up_body(self.upstream.protocol, self.body, self.round.turn(), served)
        if not await self.held.extend(*follow_up_cost(self.resolution, follow)):
            self.tools.records.append({"tool": calls[0].name, "status": "budget_exceeded"})
            return None
        try:
            response = await open_stream(self.upstream, follow, **self.forward)
        except (GatewayError, UpstreamRejected) as error:
            logger.warning("a context follow-up stream failed: %s", error)
            self.tools.records.append({"tool": calls[0].name, "status": "follow_up_failed"})
            if self.tools.fail_closed:
                self.failure = follow_up_failed(error)
            return None
        self.body = follow
        self.round.begin_round()
        return response

    def ending(self) -> bytes:
        """The end of the client's stream: the held end of the turn, or, when a follow-up failed
        under fail_closed, the provider's in-stream error event (its SDK raises it)."""
        if self.failure is not None:
            error = error_body(self.upstream.protocol, self.failure)
            if self.upstream.protocol == "anthropic":
                return sse(error, "error")
            return sse(error)
        return self.round.finish()

    def provider_usage(self) -> ProviderUsage | None:
        return usage_of(self.round.total_usage())

    def first_usage(self) -> ProviderUsage | None:
        usages = self.round.usages
        return usage_of(usages[0]) if usages else self.provider_usage()


__all__ = ["ToolStream"]
