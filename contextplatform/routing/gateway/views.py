"""The gateway's endpoints: ``POST /v1/chat/completions`` (OpenAI), ``POST /v1/messages``
(Anthropic), both streaming or not, and ``GET /v1/models``. Django async views, so a stream is
passed on as it arrives and a client that goes away cancels the upstream call. Thin: read the call,
run the resolve use case, forward, present; every error in the caller's provider shape."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, ClassVar

import httpx
from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from django_tenants.utils import tenant_context

from contextplatform.core.errors import ApiError
from contextplatform.deployments.selectors import Upstream
from contextplatform.routing.gateway.budgets import HeldBudget, hold_budget
from contextplatform.routing.gateway.calls import GatewayCall, gateway_call, resolve_headers
from contextplatform.routing.gateway.connections import return_to_pool
from contextplatform.routing.gateway.forward import (
    UpstreamRejected,
    call_upstream,
    max_stream_bytes,
    open_stream,
)
from contextplatform.routing.gateway.protocol import (
    GatewayError,
    Protocol,
    error_response,
    forbidden,
    unauthorized,
)
from contextplatform.routing.gateway.rate_limit import check_rate
from contextplatform.routing.gateway.stream_usage import UsageChunkFilter, with_stream_usage
from contextplatform.routing.gateway.streams import StreamTranscript
from contextplatform.routing.gateway.upstreams import upstream_for
from contextplatform.routing.pipeline.resolver import Resolution
from contextplatform.routing.pipeline.usage import ProviderUsage, usage_from_response
from contextplatform.routing.selectors import all_routes
from contextplatform.routing.use_cases import (
    ResolveCall,
    hand_back,
    record_usage,
    resolve_context,
)
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


def in_tenant(tenant: Tenant, work: Callable[[], Any]) -> Any:
    """Run ORM work on the request's thread (its connection) in the tenant's schema."""

    def run() -> Any:
        try:
            with tenant_context(tenant):
                return work()
        finally:
            return_to_pool()

    return sync_to_async(run, thread_sensitive=True)()


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
            user=call.user,
            session=call.session,
            chat_format=protocol,
            store_memory=call.store_memory,
            headers=headers,
            loaded=loaded,
        )
    )
    return upstream, resolution


async def complete_turn(
    tenant: Tenant,
    resolve_id: str,
    response: dict[str, Any],
    usage: ProviderUsage | None = None,
) -> None:
    """What a hand-back does (the answer to the session, each kind's after-response hook), done
    here so the client needs none, and the provider's usage recorded (replay record, the
    deployment's calibration), in one trip to the database thread; a failure is logged, the answer
    is already the client's."""

    def work() -> None:
        try:
            hand_back(tenant=tenant, resolve_id=resolve_id, response=response)
        except Exception:
            logger.exception("completing the turn of %s failed", resolve_id)
        if usage is not None:
            try:
                record_usage(resolve_id=resolve_id, usage=usage)
            except Exception:
                logger.exception("recording the usage of %s failed", resolve_id)

    try:
        await in_tenant(tenant, work)
    except Exception:  # the database thread itself failed
        logger.exception("completing the turn of %s failed", resolve_id)


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
        resolve_id: str | None = None
        try:
            tenant = authenticated_tenant(request)
            await check_rate(request)
            call = gateway_call(self.protocol, request.headers, request.body)
            headers = resolve_headers(request.headers)
            upstream, resolution = await in_tenant(
                tenant, lambda: _prepared(tenant, call, self.protocol, headers)
            )
            resolve_id = resolution.id
            held = await hold_budget(tenant, resolution, call.session, call.user)
            forward = {"allowlist": tenant.outbound_allowlist, "client_headers": request.headers}
            if call.stream:
                # The provider's usage is asked for even when the client did not ask for it.
                body, hide_usage = with_stream_usage(self.protocol, resolution.rewritten)
                try:
                    upstream_response = await open_stream(upstream, body, **forward)
                except BaseException:  # refused, failed or cancelled: nothing was spent
                    await held.release()
                    raise
                response: HttpResponseBase = self.streamed(
                    tenant, resolve_id, upstream_response, hide_usage=hide_usage, held=held
                )
            else:
                try:
                    answer = await call_upstream(upstream, resolution.rewritten, **forward)
                except BaseException:
                    await held.release()
                    raise
                await held.settle_answer(self.protocol, answer.payload)
                usage = usage_from_response(answer.payload)
                await complete_turn(tenant, resolve_id, answer.payload, usage)
                response = HttpResponse(
                    answer.body, status=answer.status, content_type="application/json"
                )
        except UpstreamRejected as rejected:
            response = HttpResponse(
                rejected.body, status=rejected.status, content_type=rejected.content_type
            )
        except (GatewayError, ApiError) as error:
            response = self.refusal(error)
        if resolve_id is not None:
            response[RESOLVE_ID_HEADER] = resolve_id
        return response

    def streamed(
        self,
        tenant: Tenant,
        resolve_id: str,
        upstream_response: httpx.Response,
        *,
        hide_usage: bool = False,
        held: HeldBudget | None = None,
    ) -> StreamingHttpResponse:
        transcript = StreamTranscript(self.protocol)
        usage_filter = UsageChunkFilter() if hide_usage else None
        limit = max_stream_bytes()

        async def events() -> AsyncIterator[bytes]:
            passed = 0
            whole = False
            try:
                async for chunk in upstream_response.aiter_bytes():
                    passed += len(chunk)
                    if passed > limit:
                        logger.warning("stream of %s cut at %d bytes", resolve_id, limit)
                        break
                    transcript.feed(chunk)
                    passed_on = usage_filter.feed(chunk) if usage_filter else chunk
                    if passed_on:
                        yield passed_on
                else:
                    whole = True
                    if usage_filter and (rest := usage_filter.flush()):
                        yield rest
            except httpx.HTTPError as error:
                logger.warning("the upstream broke off the stream of %s: %s", resolve_id, error)
            finally:
                # Also when the client went away (the task is cancelled at the yield above):
                # closing the response closes the upstream connection, which ends its call.
                await upstream_response.aclose()
                if held is not None:  # what was generated until the stream ended is spent
                    await held.settle_stream(transcript)
            if whole:
                await complete_turn(
                    tenant, resolve_id, transcript.response(), transcript.provider_usage
                )

        response = StreamingHttpResponse(
            events(),
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
