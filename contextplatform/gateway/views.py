"""The gateway's endpoints: ``POST /v1/chat/completions`` (OpenAI), ``POST /v1/messages``
(Anthropic), ``POST /v1/responses`` (OpenAI Responses; ``GET`` and ``DELETE /v1/responses/{id}``
for a kept one), streaming or not, ``GET /v1/models`` and ``GET /v1/models/{model}``, and
``POST /v1/messages/count_tokens``. Django async views, so a stream is
passed on as it arrives and a client that goes away cancels the upstream call. Thin: read the HTTP
request, run the call (``lifecycle.ChatCall``: admit, resolve, reserve, forward, tool loop,
settle, finish), present; every error in the caller's provider shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from contextplatform.core import text_limits
from contextplatform.core.errors import ApiError
from contextplatform.gateway.calls import request_user
from contextplatform.gateway.connections import in_tenant
from contextplatform.gateway.forward import UpstreamRejected
from contextplatform.gateway.lifecycle import ChatCall, authenticated_tenant
from contextplatform.gateway.protocol import GatewayError, Protocol, error_response
from contextplatform.gateway.rate_limit import check_rate
from contextplatform.gateway.response_lookup import stored_response
from contextplatform.gateway.response_store import delete_response
from contextplatform.gateway.responses import ResponsesCall
from contextplatform.gateway.token_counts import count_tokens
from contextplatform.routes.models import Route
from contextplatform.routes.selectors import all_routes, loaded_route

RESOLVE_ID_HEADER = "x-context-resolve-id"
# The arm of the route's traffic split the call ran (as REST resolve sends it).
VARIANT_HEADER = "x-context-variant"
# The deployment that answered (of the route's fallbacks, the one that did).
DEPLOYMENT_HEADER = "x-context-deployment"
MODELS_OWNER = "context-platform"


def refused(protocol: Protocol, error: Exception) -> HttpResponse:
    """The gateway's own error in the caller's provider shape (anything else is raised)."""
    if isinstance(error, ApiError):
        error = GatewayError.from_api_error(error)
    if isinstance(error, GatewayError):
        return error_response(protocol, error)
    raise error


class GatewayView(View):
    """Authentication, errors in the provider's shape, OPTIONS and 405 for the gateway's views."""

    protocol: ClassVar[Protocol] = "openai"

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        # API keys, not cookies: no CSRF token to check.
        return csrf_exempt(super().as_view(**initkwargs))

    def refusal(self, error: Exception) -> HttpResponse:
        return refused(self.protocol, error)

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
    """One chat call: its phases are ``lifecycle.ChatCall``'s; here the HTTP request is read and
    the outcome presented (the provider's answer or stream, the upstream's refusal as it came,
    the gateway's own errors in the provider's shape)."""

    def new_call(self, request: HttpRequest) -> ChatCall:
        return ChatCall(self.protocol, request)

    async def post(self, request: HttpRequest) -> HttpResponseBase:
        return await carried_call(self.protocol, self.new_call(request))


async def carried_call(protocol: Protocol, call: ChatCall) -> HttpResponseBase:
    """A chat call carried through its phases and presented as the gateway answers it (what the
    views serve, and the admin's playground sends)."""
    try:
        response = await call.run()
    except UpstreamRejected as rejected:
        response = HttpResponse(
            rejected.body, status=rejected.status, content_type=rejected.content_type
        )
    except (GatewayError, ApiError) as error:
        response = refused(protocol, error)
    if call.resolution is not None:
        response[RESOLVE_ID_HEADER] = call.resolution.id
        response[VARIANT_HEADER] = call.resolution.variant
    if call.attempts.answered_by is not None:
        response[DEPLOYMENT_HEADER] = call.attempts.answered_by
    return response


class ChatCompletionsView(ChatView):
    protocol = "openai"


class MessagesView(ChatView):
    protocol = "anthropic"


class ResponsesView(ChatView):
    """``POST /v1/responses``: the chat call's phases on the translated body
    (``responses.ResponsesCall``)."""

    protocol = "openai"

    def new_call(self, request: HttpRequest) -> ChatCall:
        return ResponsesCall(request)


class StoredResponseView(GatewayView):
    """``GET /v1/responses/{id}``: a response the gateway kept, the caller's own (its
    ``x-user-id``, else the query's ``user``; one kept without a user is the user-less callers');
    ``DELETE`` deletes it (``{"id", "object": "response", "deleted": true}``); any other is 404
    in OpenAI's error shape."""

    protocol = "openai"

    async def get(self, request: HttpRequest, response_id: str) -> HttpResponse:
        return await self.own(request, response_id, stored_response)

    async def delete(self, request: HttpRequest, response_id: str) -> HttpResponse:
        return await self.own(request, response_id, delete_response)

    async def own(
        self,
        request: HttpRequest,
        response_id: str,
        action: Callable[[str, str | None], dict[str, Any]],
    ) -> HttpResponse:
        """``action`` on the caller's own response, in the tenant's schema."""
        try:
            tenant = authenticated_tenant(request)
            await check_rate(request)
            text_limits.refuse_bad_params({"response_id": response_id}, ())
            user = request_user(request.headers, request.GET, "user")
            return JsonResponse(await in_tenant(tenant, lambda: action(response_id, user)))
        except (GatewayError, ApiError) as error:
            return self.refusal(error)


def _model(route: Route) -> dict[str, Any]:
    """A route as OpenAI's model object: what the list shows and the retrieve answers."""
    return {
        "id": route.name,
        "object": "model",
        "created": int(route.created_at.timestamp()),
        "owned_by": MODELS_OWNER,
    }


def _models() -> dict[str, Any]:
    return {"object": "list", "data": [_model(route) for route in all_routes()]}


class ModelsView(GatewayView):
    """The tenant's routes in OpenAI's model list shape: what a client may send as ``model``."""

    protocol = "openai"

    async def get(self, request: HttpRequest) -> HttpResponse:
        try:
            tenant = authenticated_tenant(request)
            await check_rate(request)
            return JsonResponse(await in_tenant(tenant, _models))
        except GatewayError as error:
            return self.refusal(error)


class ModelView(GatewayView):
    """One route in OpenAI's model shape (``client.models.retrieve``); an unknown one is 404
    ``not_found`` in OpenAI's error shape."""

    protocol = "openai"

    async def get(self, request: HttpRequest, model: str) -> HttpResponse:
        try:
            tenant = authenticated_tenant(request)
            await check_rate(request)
            # A NUL or an over-long name is a 400 before the database sees it.
            text_limits.refuse_bad_params({"model": model}, ())
            return JsonResponse(
                await in_tenant(tenant, lambda: _model(loaded_route(model, "model").route))
            )
        except (GatewayError, ApiError) as error:
            return self.refusal(error)


class CountTokensView(GatewayView):
    """Anthropic's ``count_tokens``: the body counted as the route would send it
    (``token_counts``)."""

    protocol = "anthropic"

    async def post(self, request: HttpRequest) -> HttpResponse:
        try:
            return JsonResponse(await count_tokens(request))
        except (GatewayError, ApiError) as error:
            return self.refusal(error)
