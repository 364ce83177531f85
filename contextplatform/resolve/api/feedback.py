"""``POST /api/v1/resolve/{id}/feedback``: an application's verdict on a resolve (the id from
resolve's answer or the gateway's ``x-context-resolve-id``). Thin: parse, call the service,
present."""

from __future__ import annotations

from typing import Any, Literal

from drf_spectacular.utils import extend_schema
from pydantic import BaseModel, ConfigDict, Field, field_validator
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.views import ApiView
from contextplatform.replay.feedback import feedback_representation, give_feedback
from contextplatform.replay.models import Feedback


class FeedbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    score: Literal[1, 0, -1] = Field(description="1 thumbs up, 0 neutral, -1 thumbs down")
    comment: str = Field(default="", max_length=Feedback.MAX_COMMENT)

    @field_validator("score", mode="before")
    @classmethod
    def a_whole_number(cls, value: Any) -> Any:
        # JSON's true and 1.0 are not the scores 1: only the integers 1, 0 and -1 are.
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("must be 1, 0 or -1")
        return value


class FeedbackView(ApiView):
    required_scopes = {"POST": "resolve"}
    atomic_writes = False  # it may wait for a record another worker writes

    @extend_schema(
        request=FeedbackBody,
        responses={200: dict, 201: dict},
        summary="Give feedback on a resolve (201 the first time, 200 when it replaces)",
    )
    def post(self, request: Request, resolve_id: str) -> Response:
        body = self.body(request, FeedbackBody)
        feedback, created = give_feedback(
            record_id=resolve_id,
            score=body.score,
            comment=body.comment,
            key_id=request.auth.pk if request.auth is not None else None,
        )
        return Response(
            feedback_representation(feedback),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )
