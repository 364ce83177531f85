"""HTTP endpoints of resolve, the hand-back of the model's answer and the retrieval preview.
Thin: parse, run the use case, present."""

from __future__ import annotations

from typing import Any, Literal

from drf_spectacular.utils import extend_schema
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.errors import envelope
from contextplatform.core.views import ApiView
from contextplatform.protocols.usage import usage_from_response
from contextplatform.resolve.match_preview import preview_route
from contextplatform.resolve.use_cases import ResolveCall, finish_turn, resolve_context
from tenants import key_rates, key_services, rate_limits

# The arm of the route's traffic split a resolve ran (the gateway sends it too).
VARIANT_HEADER = "x-context-variant"


class MemoryOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    store: bool | None = Field(
        default=None, description="false opts this turn out of the memory write"
    )


class ResolveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    route: str = Field(min_length=1, max_length=100)
    user: str | None = Field(default=None, min_length=1, max_length=200)
    session: str | None = Field(default=None, min_length=1, max_length=200)
    format: Literal["openai", "anthropic"] | None = None
    request: dict[str, Any]
    memory: MemoryOptions | None = None


class PreviewBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    route: str = Field(min_length=1, max_length=100)
    query: str = Field(min_length=1, max_length=20_000)
    user: str | None = Field(default=None, min_length=1, max_length=200)


class ResponseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    response: dict[str, Any]


class ResolveView(ApiView):
    required_scopes = {"POST": "resolve"}
    atomic_writes = False  # it fetches sources (core/views.py)

    @extend_schema(
        request=ResolveBody, responses={200: dict}, summary="Resolve context for a chat request"
    )
    def post(self, request: Request) -> Response:
        # The gateway's limit too (one count per key across both): 429 with Retry-After.
        limited = rate_limits.refusal(request.auth.pk) if rate_limits.enabled() else None
        # And the key's own requests a minute, when it sets them.
        limited = limited or key_rates.rpm_refusal(request.auth)
        if limited is not None:
            return Response(
                envelope("rate_limited", limited.message), status=429, headers=limited.headers
            )
        body = self.body(request, ResolveBody)
        resolution = resolve_context(
            ResolveCall(
                tenant=self.tenant(request),
                route=body.route,
                request_body=body.request,
                user=body.user,
                session=body.session,
                chat_format=body.format,
                store_memory=body.memory.store if body.memory else None,
                headers=request.headers,
                key_id=request.auth.pk,
            )
        )
        # The relevance judge's calls count against the key's budget.
        tokens, usd = key_services.judge_spend(resolution.outcomes)
        key_services.charge(api_key=request.auth, tokens=tokens, usd=usd)
        return Response(resolution.report(), headers={VARIANT_HEADER: resolution.variant})


class ContextPreviewView(ApiView):
    required_scopes = {"POST": "routes.read"}
    atomic_writes = False  # writes nothing; it fetches sources

    @extend_schema(
        request=PreviewBody, responses={200: dict}, summary="Preview a route's RAG retrieval"
    )
    def post(self, request: Request) -> Response:
        body = self.body(request, PreviewBody)
        tenant = self.tenant(request)
        return Response(
            preview_route(
                tenant_schema=tenant.schema_name,
                route_name=body.route,
                query=body.query,
                user=body.user,
                allowlist=tenant.outbound_allowlist,
            )
        )


class ResolveResponseView(ApiView):
    required_scopes = {"POST": "resolve"}
    atomic_writes = False  # it waits for a record another worker writes

    @extend_schema(
        request=ResponseBody, responses={202: dict}, summary="Hand the model's answer back"
    )
    def post(self, request: Request, resolve_id: str) -> Response:
        body = self.body(request, ResponseBody)
        result = finish_turn(
            tenant=self.tenant(request),
            resolve_id=resolve_id,
            response=body.response,
            usage=usage_from_response(body.response),
        )
        return Response(result, status=status.HTTP_202_ACCEPTED)
