"""The gateway's endpoints: ``POST /v1/chat/completions`` (OpenAI), ``POST /v1/messages``
(Anthropic), both streaming or not, and ``GET /v1/models``. Django async views, so a stream is
passed on as it arrives and a client that goes away cancels the upstream call. Thin: read the call,
run the resolve use case, forward, present; every error in the caller's provider shape."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine, Mapping
from typing import Any, ClassVar

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from contextplatform.core.errors import ApiError
from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway.budgets import HeldBudget, hold_budget
from contextplatform.gateway.calls import GatewayCall, gateway_call, resolve_headers
from contextplatform.gateway.connections import in_tenant
from contextplatform.gateway.forward import (
    UpstreamAnswer,
    UpstreamBroke,
    UpstreamRejected,
    UpstreamResponse,
    call_upstream,
    max_stream_bytes,
    open_stream,
)
from contextplatform.gateway.keepalive import keepalive_seconds, with_keepalive
from contextplatform.gateway.protocol import (
    GatewayError,
    Protocol,
    error_response,
    forbidden,
    unauthorized,
)
from contextplatform.gateway.rate_limit import check_rate
from contextplatform.gateway.served_tools import ServedTools, served_tools
from contextplatform.gateway.stream_usage import UsageChunkFilter, with_stream_usage
from contextplatform.gateway.streams import StreamTranscript
from contextplatform.gateway.tool_calls import ServedCall, ToolCall
from contextplatform.gateway.tool_loop import LoopedAnswer, ToolSteps, answer_with_tools
from contextplatform.gateway.tool_stream import ToolStream
from contextplatform.gateway.upstreams import upstream_for
from contextplatform.protocols.usage import ProviderUsage, usage_from_response
from contextplatform.replay.writer import writes_inline
from contextplatform.resolve.resolver import Resolution
from contextplatform.resolve.use_cases import (
    ResolveCall,
    finish_call,
    resolve_context,
)
from contextplatform.routes.selectors import all_routes
from tenants.models import Tenant

logger = logging.getLogger("contextplatform.gateway")

SCOPE = "resolve"
RESOLVE_ID_HEADER = "x-context-resolve-id"
MODELS_OWNER = "context-platform"


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


def _prepared(
    tenant: Tenant, call: GatewayCall, protocol: Protocol, headers: Mapping[str, str]
) -> tuple[Upstream, Resolution]:
    # The deployment is checked first: a request for the wrong protocol leaves no turn behind.
    loaded, upstream = upstream_for(call.route, protocol)
    resolution = resolve_context(
        ResolveCall(
            tenant=tenant,
            route=call.route,
            request_body=call.body,
            chat=call.chat,
            user=call.user,
            session=call.session,
            chat_format=protocol,
            store_memory=call.store_memory,
            headers=headers,
            loaded=loaded,
            serves_tools=True,
            defer_replay=True,
        )
    )
    return upstream, resolution


async def finish(
    tenant: Tenant,
    resolution: Resolution,
    response: dict[str, Any] | None,
    usage: ProviderUsage | None = None,
    *,
    tools: ServedTools | None = None,
    first_usage: ProviderUsage | None = None,
    held: HeldBudget | None = None,
) -> None:
    """The call is over: what a hand-back does (the answer to the session, the hooks of the kinds
    that wait for it), done here so the client needs none, with the provider's usage (and the
    deployment's calibration, from the first call: the one the estimate is of) and the served
    tool calls, into the replay record, written once; ``response`` None when the call ended
    without an answer; ``held``: the settled session budget, whose reservation and charge the
    record keeps beside the usage. One trip to the database thread; a failure is logged, the answer is the
    client's already."""
    pending = resolution.pending_replay
    if pending is None or pending.submitted:
        return

    def work() -> None:
        try:
            finish_call(
                tenant=tenant,
                resolution=resolution,
                response=response,
                usage=usage,
                first_call=first_usage,
                tool_calls=tools.records if tools is not None else None,
                session_budget=held.record() if held is not None else None,
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


class GatewayView(View):
    """Authentication, errors in the provider's shape, OPTIONS and 405 for the gateway's views."""

    protocol: ClassVar[Protocol] = "openai"

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        # API keys, not cookies: no CSRF token to check.
        return csrf_exempt(super().as_view(**initkwargs))

    def refusal(self, error: Exception) -> HttpResponse:
        if isinstance(error, ApiError):
            error = GatewayError.from_api_error(error)
        if isinstance(error, GatewayError):
            return error_response(self.protocol, error)
        raise error

    def allowed(self) -> str:
        return ", ".join(m.upper() for m in self.http_method_names if hasattr(self, m))

    async def options(  # type: ignore[override]  # an async view's handlers are coroutines
        self, request: HttpRequest, *args: Any, **kwargs: Any
    ) -> HttpResponse:
        try:
            authenticated_tenant(request)
        except GatewayError as error:
            if error.status == 401:
                return error_response(self.protocol, error)
        response = HttpResponse()
        response["Allow"] = self.allowed()
        response["Content-Length"] = "0"
        return response

    def http_method_not_allowed(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        error = GatewayError(
            405, "method_not_allowed", f"method {request.method} is not allowed here"
        )
        response = error_response(self.protocol, error)
        response["Allow"] = self.allowed()

        async def answer() -> HttpResponse:
            return response

        return answer()


class ChatView(GatewayView):
    """One chat call: resolve, forward, return the provider's answer (or pass its stream on)."""

    async def post(self, request: HttpRequest) -> HttpResponseBase:
        resolution: Resolution | None = None
        streaming = False
        try:
            tenant = authenticated_tenant(request)
            await check_rate(request)
            call = gateway_call(self.protocol, request.headers, request.body)
            headers = resolve_headers(request.headers)
            upstream, resolution = await in_tenant(
                tenant, lambda: _prepared(tenant, call, self.protocol, headers)
            )
            held = await hold_budget(tenant, resolution, upstream, call.session, call.user)
            # The output limit lowered to what the session budget granted.
            forwarded = held.limit_output(resolution.rewritten)
            forward = {"allowlist": tenant.outbound_allowlist, "client_headers": request.headers}
            tools = served_tools(resolution, call.user, tenant.capture_content)
            if call.stream:
                # The provider's usage is asked for even when the client did not ask for it.
                body, hide_usage = with_stream_usage(self.protocol, forwarded)
                try:
                    upstream_response = await open_stream(upstream, body, **forward)
                except BaseException:  # refused, failed or cancelled: nothing was spent
                    await held.release()
                    raise
                if tools:
                    steps = tool_steps(tenant, tools, held)
                    loop = ToolStream(upstream, body, tools, steps, forward, hide_usage)
                    response: HttpResponseBase = self.streamed(
                        tenant, resolution, upstream_response, held=held, loop=loop
                    )
                else:
                    response = self.streamed(
                        tenant, resolution, upstream_response, hide_usage=hide_usage, held=held
                    )
                streaming = True  # the stream finishes the call when it ends
            else:
                try:
                    answer = await call_upstream(upstream, forwarded, **forward)
                    looped = await self.looped(
                        tenant, upstream, answer, tools, held, forward, forwarded
                    )
                except BaseException:
                    await held.release()
                    raise
                answer = looped.answer
                await held.settle_answer(self.protocol, answer.payload)
                usage = usage_from_response(answer.payload)
                await finish(
                    tenant,
                    resolution,
                    answer.payload,
                    usage,
                    tools=tools,
                    first_usage=looped.first_usage,
                    held=held,
                )
                response = HttpResponse(
                    answer.body, status=answer.status, content_type="application/json"
                )
        except UpstreamRejected as rejected:
            response = HttpResponse(
                rejected.body, status=rejected.status, content_type=rejected.content_type
            )
        except (GatewayError, ApiError) as error:
            response = self.refusal(error)
        finally:
            # A call that ended without an answer (refused, failed, cancelled) is still recorded;
            # in a task of its own, which a client that went away does not cancel.
            if resolution is not None and not streaming:
                pending = resolution.pending_replay
                if pending is not None and not pending.submitted:
                    await asyncio.shield(in_background(finish(tenant, resolution, None)))
        if resolution is not None:
            response[RESOLVE_ID_HEADER] = resolution.id
        return response

    async def looped(
        self,
        tenant: Tenant,
        upstream: Upstream,
        answer: UpstreamAnswer,
        tools: ServedTools,
        held: HeldBudget,
        forward: dict[str, Any],
        body: dict[str, Any],
    ) -> LoopedAnswer:
        """The answer after the gateway served the calls of its own tools (unchanged when the
        call has none or the model called none)."""
        if not tools:
            return LoopedAnswer(answer, usage_from_response(answer.payload), 0)

        async def ask(body: dict[str, Any]) -> UpstreamAnswer:
            return await call_upstream(upstream, body, **forward)

        return await answer_with_tools(
            self.protocol,
            body,
            answer,
            tools,
            steps=tool_steps(tenant, tools, held),
            ask=ask,
        )

    def streamed(
        self,
        tenant: Tenant,
        resolution: Resolution,
        upstream_response: UpstreamResponse,
        *,
        hide_usage: bool = False,
        held: HeldBudget | None = None,
        loop: ToolStream | None = None,
    ) -> StreamingHttpResponse:
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
            await current.aclose()  # closing the response ends the upstream's call
            usage = loop.provider_usage() if loop is not None else None
            if held is not None:  # what was generated until the stream ended is spent
                await held.settle_stream(transcript, usage)
            await finish(
                tenant,
                resolution,
                transcript.response() if whole or transcript.finished else None,
                usage or transcript.provider_usage,
                tools=loop.tools if loop is not None else None,
                first_usage=loop.first_usage() if loop is not None else None,
                held=held,
            )

        response = StreamingHttpResponse(
            with_keepalive(events(), keepalive_seconds()),
            status=upstream_response.status_code,
            content_type=upstream_response.headers.get("content-type", "text/event-stream"),
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # proxies must not hold the events back
        return response


class ChatCompletionsView(ChatView):
    protocol = "openai"


class MessagesView(ChatView):
    protocol = "anthropic"


def _models(tenant: Tenant) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": route.name,
                "object": "model",
                "created": int(route.created_at.timestamp()),
                "owned_by": MODELS_OWNER,
            }
            for route in all_routes()
        ],
    }


class ModelsView(GatewayView):
    """The tenant's routes in OpenAI's model list shape: what a client may send as ``model``."""

    protocol = "openai"

    async def get(self, request: HttpRequest) -> HttpResponse:
        try:
            tenant = authenticated_tenant(request)
            await check_rate(request)
            return JsonResponse(await in_tenant(tenant, lambda: _models(tenant)))
        except GatewayError as error:
            return self.refusal(error)
