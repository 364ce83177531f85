"""One gateway chat call, phase by phase: admit → resolve → reserve → forward → tool loop →
settle → finish.

* admit: the key (its ``resolve`` scope), the rate limit, the body read and checked once against
  its provider's shape (``calls.gateway_call``);
* resolve: the route's deployment checked for the protocol, then the context resolved (the parse
  of admit passed on, not repeated);
* reserve: the session budget held for the call's cost (``budgets.hold_budget``), and the key's
  tokens a minute and budget (``key_limits``; on the resolve's trip to the request's thread when
  nothing waits on the event loop before them), and the output limit lowered to what they
  granted; the tools the gateway serves itself;
* forward: the rewritten request sent to the route's deployments in fallback order until one
  answers (``fallback``; a stream opened and its first byte read, or the answer read);
* tool loop: the model's calls of the gateway's own tools answered and the model asked again
  (``tool_loop`` for an answer, ``tool_stream`` for a stream);
* settle: what was spent charged against the held budget, the rest given back;
* finish: the answer handed back to the session and the replay record written, once; also when
  the call ended without an answer (refused, failed, cancelled).

A stream settles and finishes when it ends (``streamed``). The views only read the HTTP request,
run the call and present what it returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from opentelemetry.trace import Span, SpanKind

from contextplatform.core import tracing
from contextplatform.core.errors import ApiError
from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway import deployment_limits
from contextplatform.gateway.budgets import HeldBudget, hold_budget, session_limit
from contextplatform.gateway.call_metrics import observe_call
from contextplatform.gateway.calls import GatewayCall, gateway_call, resolve_headers
from contextplatform.gateway.connections import in_tenant
from contextplatform.gateway.fallback import Attempts, first_answer
from contextplatform.gateway.forward import (
    Forwarding,
    UpstreamAnswer,
    UpstreamBroke,
    UpstreamResponse,
    call_upstream,
    first_chunk,
    max_stream_bytes,
    model_call_span,
    open_stream,
)
from contextplatform.gateway.keepalive import keepalive_seconds, with_keepalive
from contextplatform.gateway.key_limits import (
    hold_key_limits,
    hold_key_limits_now,
    holds_at_once,
    limits_key,
)
from contextplatform.gateway.protocol import Protocol, forbidden, unauthorized
from contextplatform.gateway.rate_limit import check_rate
from contextplatform.gateway.served_tools import ServedTools, served_tools
from contextplatform.gateway.stream_usage import UsageChunkFilter, with_stream_usage
from contextplatform.gateway.streams import StreamTranscript
from contextplatform.gateway.tool_calls import ServedCall, ToolCall
from contextplatform.gateway.tool_loop import LoopedAnswer, ToolSteps, answer_with_tools
from contextplatform.gateway.tool_stream import ToolStream
from contextplatform.gateway.upstreams import upstreams_for
from contextplatform.protocols.usage import ProviderUsage, usage_from_response
from contextplatform.replay.writer import writes_inline
from contextplatform.resolve.resolver import Resolution
from contextplatform.resolve.use_cases import finish_turn, resolve_context
from contextplatform.routes.configuration.schema import BalanceSettings
from tenants.models import Tenant

logger = logging.getLogger("contextplatform.gateway")

SCOPE = "resolve"


def authenticated_tenant(request: HttpRequest) -> Tenant:
    """The tenant of the key the middleware verified, which must hold the ``resolve`` scope."""
    api_key = getattr(request, "api_key", None)
    if api_key is None:
        if getattr(request, "api_key_rejected", False):
            raise unauthorized("invalid or revoked API key")
        raise unauthorized(
            "an API key is required (Authorization: Bearer <key> or x-api-key: <key>)"
        )
    if SCOPE not in api_key.scopes:
        raise forbidden(f"this API key lacks the scope {SCOPE!r}")
    tenant: Tenant = api_key.tenant
    return tenant


async def finish(
    tenant: Tenant,
    resolution: Resolution,
    response: dict[str, Any] | None,
    usage: ProviderUsage | None = None,
    *,
    tools: ServedTools | None = None,
    first_usage: ProviderUsage | None = None,
    held: HeldBudget | None = None,
    attempts: Attempts | None = None,
    upstream: Upstream | None = None,
    started: float | None = None,
    stream: bool = False,
    answer_started: float | None = None,
) -> None:
    """The call is over: what a hand-back does (the answer to the session, the hooks of the kinds
    that wait for it), done here so the client needs none, with the provider's usage (and the
    deployment's calibration, from the first call: the one the estimate is of) and the served
    tool calls, into the replay record, written once; ``response`` None when the call ended
    without an answer; ``held``: the settled session budget, whose reservation and charge the
    record keeps beside the usage; ``attempts``: the deployments tried; ``upstream``: the one
    that answered (its price prices the usage); ``started``: when the call began (monotonic), for
    the record's ``call_ms``; ``answer_started``: when the answering deployment's stream was
    asked for (its latency runs to the stream's end). The call's metrics and live event are
    counted here, in process. One trip to the database thread; a failure is logged, the answer is
    the client's already."""
    pending = resolution.pending_replay
    if pending is None or pending.submitted:
        return
    call_ms = (time.monotonic() - started) * 1000 if started is not None else None
    price = upstream.price if upstream is not None else None
    if attempts is not None:
        observe_call(
            schema=tenant.schema_name,
            route=resolution.route,
            attempts=attempts,
            answered=response is not None,
            usage=usage,
            price=price,
            call_ms=call_ms or 0.0,
            stream=stream,
            stream_ms=(time.monotonic() - answer_started) * 1000
            if answer_started is not None
            else None,
        )

    def work() -> None:
        try:
            finish_turn(
                tenant=tenant,
                resolve_id=resolution.id,
                resolution=resolution,
                response=response,
                usage=usage,
                first_call=first_usage,
                tool_calls=tools.records if tools is not None else None,
                session_budget=held.record() if held is not None else None,
                attempts=attempts.record() if attempts is not None else None,
                price=price,
                call_ms=round(call_ms, 2) if call_ms is not None else None,
            )
        except Exception:
            logger.exception("completing the turn of %s failed", resolution.id)

    if not pending.record.session_key and not resolution.answer_kinds and not writes_inline():
        work()  # nothing to write now (no session, no kind waits): no trip to the database thread
        return
    try:
        await in_tenant(tenant, work)
    except Exception:  # the database thread itself failed
        logger.exception("completing the turn of %s failed", resolution.id)


def tool_steps(tenant: Tenant, tools: ServedTools, held: HeldBudget) -> ToolSteps:
    """How a call's loop serves its reserved calls and holds each follow-up's cost."""

    async def serve(calls: list[ToolCall]) -> list[ServedCall]:
        served: list[ServedCall] = await in_tenant(tenant, lambda: tools.serve_round(calls))
        return served

    return ToolSteps(serve=serve, extend=held.extend)


# Turns completed after their stream: held here so that a task outlives a cancelled response.
_background: set[asyncio.Task[None]] = set()


def in_background(work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    task = asyncio.ensure_future(work)
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


@dataclass
class Reserved:
    """What the reserve phase holds for the forward: the budget, the body it limited (for the
    deployment that answers, once one did), the served tools, how to reach the deployments."""

    held: HeldBudget
    body: dict[str, Any]
    tools: ServedTools
    forward: Forwarding
    rewritten: dict[str, Any]

    def body_for(self, upstream: Upstream) -> dict[str, Any]:
        """The body one deployment is sent: its output limit in the field that deployment reads
        (its model name is set by ``forward``)."""
        return self.held.limit_output(self.rewritten, upstream)


class ChatCall:
    """One chat call through its phases; ``run`` drives them and returns the response (an error
    the gateway answers itself is raised, for the view to present in the provider's shape)."""

    # Whether the call came to /v1/responses (its deployments may speak Responses).
    responses: ClassVar[bool] = False

    def __init__(self, protocol: Protocol, request: HttpRequest) -> None:
        self.protocol = protocol
        self.request = request
        self.tenant: Tenant | None = None
        self.call: GatewayCall | None = None
        self.upstream: Upstream | None = None
        self.upstreams: list[Upstream] = []
        self.balance: BalanceSettings | None = None
        self.attempts = Attempts()
        self.resolution: Resolution | None = None
        self.streaming = False  # the stream finishes the call when it ends
        self.started = time.monotonic()  # the record's call_ms counts from here
        self.answer_started: float | None = None  # the latest attempt's start: the answer's
        # The key's limits held on the resolve's trip to the thread (``_hold_early``), and why
        # they could not be, for the reserve phase to take up (or to give back, when it never
        # comes).
        self.early_held: HeldBudget | None = None
        self.early_error: Exception | None = None

    async def run(self) -> HttpResponseBase:
        # The call's span: the resolve's and the deployment's calls are its children.
        with tracing.span(
            "gateway.call", {"context.protocol": self.protocol}, kind=SpanKind.SERVER
        ):
            return await self.phases()

    async def phases(self) -> HttpResponseBase:
        try:
            tenant, call = await self.admit()
            tracing.set_attributes(
                {
                    "context.tenant": tenant.schema_name,
                    "context.route": call.route,
                    "context.stream": call.stream,
                }
            )
            upstream, resolution = await self.resolve(tenant, call)
            tracing.set_attributes({"context.resolve_id": resolution.id})
            reserved = await self.reserve(tenant, call, upstream, resolution)
            if call.stream:
                return await self.forward_stream(tenant, resolution, reserved)
            answer = await self.forward(tenant, reserved)
            await reserved.held.settle_answer(self.protocol, answer.answer.payload)
            await self.finish_answer(tenant, resolution, answer, reserved)
            return HttpResponse(
                answer.answer.body, status=answer.answer.status, content_type="application/json"
            )
        finally:
            if self.early_held is not None:  # resolved and held, then cancelled before reserve
                held, self.early_held = self.early_held, None
                await held.release()
            await self.finish_unanswered()

    # ------------------------------------------------------------------ admit

    async def admit(self) -> tuple[Tenant, GatewayCall]:
        self.tenant = tenant = authenticated_tenant(self.request)
        await check_rate(self.request)
        self.call = call = gateway_call(self.protocol, self.request.headers, self.request.body)
        return tenant, call

    # ------------------------------------------------------------------ resolve

    async def resolve(self, tenant: Tenant, call: GatewayCall) -> tuple[Upstream, Resolution]:
        headers = resolve_headers(self.request.headers)
        self.upstreams, self.resolution = await in_tenant(
            tenant, lambda: self._prepared(tenant, call, headers)
        )
        self.upstream = self.upstreams[0]
        return self.upstream, self.resolution

    def _prepared(
        self, tenant: Tenant, call: GatewayCall, headers: Mapping[str, str]
    ) -> tuple[list[Upstream], Resolution]:
        # The deployment is checked first: a request for the wrong protocol leaves no turn behind.
        loaded, upstreams = upstreams_for(
            call.route, self.protocol, responses=self.responses, body=call.body
        )
        self.balance = loaded.spec.model.balance
        api_key = getattr(self.request, "api_key", None)
        try:
            resolution = resolve_context(
                call.resolve_call(
                    tenant,
                    self.protocol,
                    headers,
                    loaded,
                    defer_replay=True,
                    key_id=api_key.pk if api_key is not None else None,
                )
            )
        except ApiError:
            # Refused before any deployment was called (a blocking source failed); the route
            # exists, so its name is a bounded label.
            observe_call(
                schema=tenant.schema_name,
                route=call.route,
                attempts=Attempts(),
                answered=False,
                usage=None,
                price=None,
                call_ms=(time.monotonic() - self.started) * 1000,
                stream=call.stream,
            )
            raise
        self._hold_early(tenant, call, resolution, upstreams)
        return upstreams, resolution

    def _hold_early(
        self,
        tenant: Tenant,
        call: GatewayCall,
        resolution: Resolution,
        upstreams: list[Upstream],
    ) -> None:
        """The key's tokens a minute and budget held here, on the resolve's trip to the request's
        thread, when nothing has to happen on the event loop before them: no session budget
        (its hold comes first, and may wait for a probe) and no cold deployment to wait for.
        Held as ``reserve`` would hold them; a refusal is raised there, in its place."""
        api_key = getattr(self.request, "api_key", None)
        if api_key is None or not limits_key(api_key):
            return
        if call.session and session_limit(resolution) is not None:
            return
        if not holds_at_once(api_key, tenant, upstreams[0]):
            return
        self.early_held = held = HeldBudget(tenant, None)
        try:
            hold_key_limits_now(held, api_key, tenant, resolution, upstreams)
        except Exception as error:
            self.early_error = error

    # ------------------------------------------------------------------ reserve

    async def reserve(
        self, tenant: Tenant, call: GatewayCall, upstream: Upstream, resolution: Resolution
    ) -> Reserved:
        if self.early_held is not None:  # the key's limits, held with the resolve
            held, self.early_held = self.early_held, None
            if self.early_error is not None:
                await held.release()
                raise self.early_error
        else:
            # Held for the costliest deployment the call may reach.
            held = await hold_budget(
                tenant, resolution, upstream, call.session, call.user, fallbacks=self.upstreams[1:]
            )
            try:  # the key's own tokens a minute and budget, for the same costliest deployment
                api_key = getattr(self.request, "api_key", None)
                await hold_key_limits(held, api_key, tenant, resolution, self.upstreams)
            except BaseException:
                await held.release()
                raise
        return Reserved(
            held=held,
            # The output limit lowered to what the session budget granted.
            body=held.limit_output(resolution.rewritten, upstream),
            tools=served_tools(resolution, call.user, tenant.capture_content),
            forward=Forwarding(
                allowlist=tenant.outbound_allowlist, client_headers=self.request.headers
            ),
            rewritten=resolution.rewritten,
        )

    def answered(self, upstream: Upstream, reserved: Reserved) -> None:
        """A deployment answered: the call's follow-ups go to it, with its body."""
        self.upstream = upstream
        reserved.held.answered_by(upstream)
        reserved.body = reserved.body_for(upstream)

    # ------------------------------------------------------------------ forward, tool loop

    async def forward(self, tenant: Tenant, reserved: Reserved) -> LoopedAnswer:
        """The answer (from the first deployment that gives one), after the tool loop; what was
        held is given back when none came."""

        async def send(upstream: Upstream) -> UpstreamAnswer:
            return await call_upstream(upstream, reserved.body_for(upstream), **reserved.forward)

        try:
            answer, upstream = await first_answer(
                tenant.schema_name, self.upstreams, send, self.attempts, self.balance
            )
            self.answered(upstream, reserved)
            return await self.tool_loop(tenant, upstream, answer, reserved)
        except BaseException:
            await reserved.held.release()
            raise

    async def tool_loop(
        self, tenant: Tenant, upstream: Upstream, answer: UpstreamAnswer, reserved: Reserved
    ) -> LoopedAnswer:
        """The answer after the gateway served the calls of its own tools (unchanged when the
        call has none or the model called none)."""
        tools = reserved.tools
        if not tools:
            return LoopedAnswer(answer, usage_from_response(answer.payload), 0)

        async def ask(body: dict[str, Any]) -> UpstreamAnswer:
            return await call_upstream(upstream, body, **reserved.forward)

        return await answer_with_tools(
            self.protocol,
            reserved.body,
            answer,
            tools,
            steps=tool_steps(tenant, tools, reserved.held),
            ask=ask,
        )

    async def forward_stream(
        self, tenant: Tenant, resolution: Resolution, reserved: Reserved
    ) -> StreamingHttpResponse:
        first = self.upstreams[0]
        # The stream's span ends with the stream (``streamed``), its follow-up rounds included.
        span = tracing.start(f"chat {first.model}", model_call_span(first), kind=SpanKind.CLIENT)

        async def send(upstream: Upstream) -> UpstreamResponse:
            # The provider's usage is asked for even when the client did not ask for it.
            body, _ = with_stream_usage(self.protocol, reserved.body_for(upstream))
            self.answer_started = time.monotonic()
            response = await open_stream(upstream, body, **reserved.forward)
            # Until the first byte the call may still move to the next deployment.
            await first_chunk(response, upstream)
            return response

        try:
            upstream_response, upstream = await first_answer(
                tenant.schema_name, self.upstreams, send, self.attempts, self.balance
            )
        except BaseException as error:  # refused, failed or cancelled: nothing was spent
            tracing.end(span, error)
            await reserved.held.release()
            raise
        self.answered(upstream, reserved)
        body, hide_usage = with_stream_usage(self.protocol, reserved.body)
        loop = None
        if reserved.tools:
            steps = tool_steps(tenant, reserved.tools, reserved.held)
            loop = ToolStream(upstream, body, reserved.tools, steps, reserved.forward, hide_usage)
        response = self.streamed(
            tenant,
            resolution,
            upstream_response,
            hide_usage=hide_usage and loop is None,
            held=reserved.held,
            loop=loop,
            span=span,
        )
        self.streaming = True
        return response

    # ------------------------------------------------------------------ settle, finish

    async def spent(self, tenant: Tenant, usage: ProviderUsage | None) -> None:
        """The tokens the answering deployment reported, against its ``tpm``."""
        upstream = self.upstream
        if upstream is not None and usage is not None:
            await deployment_limits.spend(tenant.schema_name, upstream, usage.input + usage.output)

    async def finish_answer(
        self, tenant: Tenant, resolution: Resolution, looped: LoopedAnswer, reserved: Reserved
    ) -> None:
        answer = looped.answer
        await self.spent(tenant, usage_from_response(answer.payload))
        await finish(
            tenant,
            resolution,
            answer.payload,
            usage_from_response(answer.payload),
            tools=reserved.tools,
            first_usage=looped.first_usage,
            held=reserved.held,
            attempts=self.attempts,
            upstream=self.upstream,
            started=self.started,
        )

    async def finish_unanswered(self) -> None:
        """A call that ended without an answer (refused, failed, cancelled) is still recorded;
        in a task of its own, which a client that went away does not cancel."""
        resolution, tenant = self.resolution, self.tenant
        if resolution is None or tenant is None or self.streaming:
            return
        pending = resolution.pending_replay
        if pending is not None and not pending.submitted:
            await asyncio.shield(
                in_background(
                    finish(
                        tenant,
                        resolution,
                        None,
                        attempts=self.attempts,
                        started=self.started,
                        stream=bool(self.call and self.call.stream),
                    )
                )
            )

    def client_events(self, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The stream as the client reads it (a Responses call translates it)."""
        return events

    def streamed(
        self,
        tenant: Tenant,
        resolution: Resolution,
        upstream_response: UpstreamResponse,
        *,
        hide_usage: bool = False,
        held: HeldBudget | None = None,
        loop: ToolStream | None = None,
        span: Span | None = None,
    ) -> StreamingHttpResponse:
        """The client's stream: the upstream's events passed on (through the tool loop's rounds
        when the gateway serves tools), then, when it ends however it ends, settle and finish."""
        transcript = StreamTranscript(self.protocol)
        usage_filter = UsageChunkFilter() if hide_usage and loop is None else None
        limit = max_stream_bytes()

        async def events() -> AsyncIterator[bytes]:
            passed = 0
            whole = False
            current = upstream_response
            try:
                while True:
                    async for chunk in current:
                        passed += len(chunk)
                        if passed > limit:
                            logger.warning("stream of %s cut at %d bytes", resolution.id, limit)
                            return
                        if loop is not None:
                            chunk = loop.round.feed(chunk)
                        else:
                            transcript.feed(chunk)
                        passed_on = usage_filter.feed(chunk) if usage_filter else chunk
                        if passed_on:
                            if loop is not None:
                                transcript.feed(passed_on)
                            yield passed_on
                    if loop is None:
                        whole = True
                        if usage_filter and (rest := usage_filter.flush()):
                            yield rest
                        return
                    await current.aclose()
                    following = await loop.follow_up()
                    if following is None:
                        whole = True
                        end = loop.ending()
                        transcript.feed(end)
                        yield end
                        return
                    current = following
            except UpstreamBroke as error:
                logger.warning("the upstream broke off the stream of %s: %s", resolution.id, error)
            finally:
                # Also when the client went away (the task is cancelled at a yield above), and
                # in a task of its own that no further cancellation reaches: the upstream call is
                # closed, what it generated is spent, and a turn that is over (whether or not the
                # client stayed for its last bytes: the sync openai client hangs up on [DONE]) is
                # completed.
                await asyncio.shield(in_background(after_stream(current, whole)))

        async def after_stream(current: UpstreamResponse, whole: bool) -> None:
            try:
                await current.aclose()  # closing the response ends the upstream's call
                usage = loop.provider_usage() if loop is not None else None
                if held is not None:  # settle: what was generated until the stream ended is spent
                    await held.settle_stream(transcript, usage)
                answer = transcript.response() if whole or transcript.finished else None
            except BaseException as error:  # the model call's span ends however this does
                tracing.end(span, error)
                raise
            spent = usage or transcript.provider_usage
            tracing.model_answered(
                span,
                response_model=answer.get("model") if answer is not None else None,
                input_tokens=spent.input if spent is not None else None,
                output_tokens=spent.output if spent is not None else None,
            )
            tracing.end(span)
            await self.spent(tenant, spent)
            await finish(
                tenant,
                resolution,
                answer,
                spent,
                tools=loop.tools if loop is not None else None,
                first_usage=loop.first_usage() if loop is not None else None,
                held=held,
                attempts=self.attempts,
                upstream=self.upstream,
                started=self.started,
                stream=True,
                answer_started=self.answer_started,
            )

        response = StreamingHttpResponse(
            with_keepalive(self.client_events(events()), keepalive_seconds()),
            status=upstream_response.status_code,
            content_type=upstream_response.headers.get("content-type", "text/event-stream"),
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # proxies must not hold the events back
        return response


__all__ = ["ChatCall", "authenticated_tenant", "finish", "in_background", "tool_steps"]
