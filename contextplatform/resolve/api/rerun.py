"""``POST /api/v1/replay/{id}/rerun``: a recorded request resolved again, against the route as it
is now (``{}``) or a draft of its ``context`` (validated as a save validates it, not saved), and
what changed, item by item. Thin: parse, check the draft's scope, run the use case, present."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from pydantic import BaseModel, ConfigDict
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.errors import not_found
from contextplatform.core.views import ApiView
from contextplatform.replay.selectors import replay_record
from contextplatform.resolve.reruns import rerun_and_diff
from contextplatform.routes.drafts import draft_spec
from contextplatform.routes.selectors import existing_route

DRAFT_SCOPE = "routes.write"


class RerunBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # A draft of the route's own ``context`` layer; absent: the route as it is now.
    context: dict[str, Any] | None = None


class ReplayRerunView(ApiView):
    required_scopes = {"POST": "replay.read"}
    atomic_writes = False  # it fetches sources and may call a judge (core/views.py)

    @extend_schema(
        request=RerunBody,
        responses={200: dict},
        summary="Re-run a recorded request (the route as it is now, or a draft) and diff it",
    )
    def post(self, request: Request, record_id: str) -> Response:
        data = request.data
        drafted = isinstance(data, dict) and data.get("context") is not None
        # Running a draft shows what an unsaved configuration would do: a route writer's check.
        if drafted and not request.user.has_scope(DRAFT_SCOPE):
            raise PermissionDenied(f"this API key lacks the scope {DRAFT_SCOPE!r}")
        body = self.body(request, RerunBody)
        record = replay_record(record_id)
        if record is None:
            raise not_found(f"no replay record {record_id!r}")
        spec = None
        if body.context is not None:
            spec = draft_spec(existing_route(record.route, param=None), body.context)
        return Response(rerun_and_diff(tenant=self.tenant(request), record=record, spec=spec))
