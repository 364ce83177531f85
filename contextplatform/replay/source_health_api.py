"""``GET /api/v1/sources/health``: each source's health per route."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.views import ApiView
from contextplatform.replay.source_health_selectors import sources_health


class SourceHealthView(ApiView):
    required_scopes = {"GET": "replay.read"}

    @extend_schema(
        parameters=[OpenApiParameter("route", str, required=False)],
        responses={200: dict},
        summary="Each source's health per route: the last hour against the week before",
    )
    def get(self, request: Request) -> Response:
        route = request.query_params.get("route") or None
        return Response({"data": [health.as_dict() for health in sources_health(route)]})
