"""HTTP endpoints of user profiles and session messages."""

from __future__ import annotations

from typing import Any, Literal

from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.errors import not_found
from contextplatform.core.views import ApiView
from sources.models import ChatMessage, UserProfile
from sources.selectors import session_messages, user_profile
from sources.services import append_session_messages, put_user_profile


class ProfileBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attributes: dict[str, Any]


class SessionMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None


class SessionMessagesBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: str | None = Field(default=None, min_length=1, max_length=200)
    messages: list[SessionMessage] = Field(min_length=1, max_length=1000)


def profile_representation(profile: UserProfile) -> dict[str, Any]:
    return {
        "user": profile.user_id,
        "attributes": profile.attributes,
        "updated_at": profile.updated_at.isoformat(),
    }


def message_representation(message: ChatMessage) -> dict[str, Any]:
    return {
        "seq": message.seq,
        "role": message.role,
        "content": message.content,
        "created_at": message.created_at.isoformat(),
    }


class UserProfileView(ApiView):
    required_scopes = {"GET": "memory.read", "PUT": "memory.write"}

    @extend_schema(responses={200: dict}, summary="A user's profile attributes")
    def get(self, request: Request, user: str) -> Response:
        profile = user_profile(user)
        if profile is None:
            raise not_found(f"no profile for user {user!r}")
        return Response(profile_representation(profile))

    @extend_schema(
        request=ProfileBody, responses={200: dict}, summary="Replace a user's profile attributes"
    )
    def put(self, request: Request, user: str) -> Response:
        body = self.body(request, ProfileBody)
        return Response(
            profile_representation(put_user_profile(user_id=user, attributes=body.attributes))
        )


class SessionMessagesView(ApiView):
    required_scopes = {"GET": "memory.read", "POST": "memory.write"}

    @extend_schema(
        parameters=[OpenApiParameter("user", str, required=False)],
        responses={200: dict},
        summary="A session's messages",
    )
    def get(self, request: Request, session: str) -> Response:
        user = request.query_params.get("user") or None
        messages = session_messages(session_key=session, user_id=user)
        return Response(
            {
                "session": session,
                "user": user,
                "data": [message_representation(m) for m in messages],
            }
        )

    @extend_schema(
        request=SessionMessagesBody, responses={201: dict}, summary="Append messages to a session"
    )
    def post(self, request: Request, session: str) -> Response:
        body = self.body(request, SessionMessagesBody)
        created = append_session_messages(
            session_key=session, user_id=body.user, messages=[m.model_dump() for m in body.messages]
        )
        return Response(
            {
                "session": session,
                "user": body.user,
                "data": [message_representation(m) for m in created],
            },
            status=status.HTTP_201_CREATED,
        )
