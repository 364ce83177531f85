"""Compression management endpoints (capabilities, health, stats; docs/api.md) and the recovery
store's retrieve and invalidate."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from pydantic import BaseModel, ConfigDict, Field
from rest_framework.request import Request
from rest_framework.response import Response

from compression.models import RecoveryBlob
from compression.recovery import RecoveryError, invalidate, retrieve
from compression.stats import audit, stats_report
from contextplatform.core.errors import ApiError
from contextplatform.core.views import ApiView
from contextplatform.protocols.registry import PROTOCOLS


class RetrieveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(min_length=1, max_length=40)
    key: str = Field(min_length=1, max_length=32)
    route: str | None = Field(default=None, min_length=1, max_length=100)
    user: str | None = Field(default=None, min_length=1, max_length=200)


class InvalidateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    route: str = Field(min_length=1, max_length=100)
    user: str = Field(min_length=1, max_length=200)
    request_id: str = Field(min_length=1, max_length=40)


def audited(request: Request, action: str, status: int, detail: dict[str, Any]) -> None:
    key = getattr(request._request, "api_key", None)
    audit(
        action=action,
        key_id=key.pk if key else None,
        method=request.method or "",
        path=request.path,
        status=status,
        detail=detail,
    )


class CapabilitiesView(ApiView):
    required_scopes = {"GET": "compression.read"}

    @extend_schema(responses={200: dict}, summary="What compression can do here")
    def get(self, request: Request) -> Response:
        return Response(
            {
                "strategies": ["extractive", "truncate", "recoverable"],
                "scoring_methods": ["bm25", "judge"],
                "targets": ["tool_outputs", "history", "rag", "memory", "current_user"],
                "recovery": "postgresql",
                "json_structure_preserved": True,
                "multimodal_preserved": True,
                "protocol_metadata_kept": True,
                "formats": list(PROTOCOLS),
                "token_estimator": "heuristic",
            }
        )


class HealthView(ApiView):
    required_scopes = {"GET": "compression.read"}

    @extend_schema(responses={200: dict}, summary="Compression and recovery store health")
    def get(self, request: Request) -> Response:
        try:
            RecoveryBlob.objects.exists()
        except Exception as error:
            return Response(
                {"status": "degraded", "recovery": "unavailable", "error": type(error).__name__},
                status=503,
            )
        return Response({"status": "healthy", "recovery": "healthy"})


class StatsView(ApiView):
    required_scopes = {"GET": "compression.read"}

    @extend_schema(responses={200: dict}, summary="Compression counters and the audit trail")
    def get(self, request: Request) -> Response:
        return Response(stats_report())


class RecoveryRetrieveView(ApiView):
    required_scopes = {"POST": "resolve"}

    @extend_schema(
        request=RetrieveBody,
        responses={200: dict},
        summary="An original omitted by recoverable compression",
    )
    def post(self, request: Request) -> Response:
        body = self.body(request, RetrieveBody)
        try:
            content = retrieve(
                request_id=body.request_id,
                key=body.key,
                route=body.route,
                user=body.user,
            )
        except RecoveryError as error:
            raise ApiError(error.code, error.message, status=error.status) from error
        return Response({"request_id": body.request_id, "key": body.key, "content": content})


class RecoveryInvalidateView(ApiView):
    required_scopes = {"POST": "compression.manage"}

    @extend_schema(
        request=InvalidateBody,
        responses={200: dict},
        summary="Delete a request's recovery originals",
    )
    def post(self, request: Request) -> Response:
        body = self.body(request, InvalidateBody)
        deleted = invalidate(route=body.route, user=body.user, request_id=body.request_id)
        audited(request, "compression.recovery.invalidate", 200, {"deleted": deleted})
        return Response({"deleted": deleted})
