"""``POST /api/v1/sessions/{session}/prewarm``: read a route's user- and session-scoped sources
ahead of the session's next resolve. Thin: parse, run the use case, present."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.views import ApiView
from contextplatform.resolve.use_cases import prewarm_session


class PrewarmBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    route: str = Field(min_length=1, max_length=100)
    user: str = Field(min_length=1, max_length=200)


class SessionPrewarmView(ApiView):
    required_scopes = {"POST": "resolve"}
    atomic_writes = False  # it fetches sources (core/views.py)

    @extend_schema(
        request=PrewarmBody,
        responses={202: dict},
        summary="Pre-warm a session: fetch the route's user- and session-scoped sources now",
    )
    def post(self, request: Request, session: str) -> Response:
        body = self.body(request, PrewarmBody)
        answer = prewarm_session(
            tenant=self.tenant(request), route_name=body.route, user=body.user, session=session
        )
        return Response(answer, status=status.HTTP_202_ACCEPTED)
