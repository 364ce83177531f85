"""HTTP endpoints of user profiles and session messages."""

from __future__ import annotations

from typing import Any, Literal

from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.errors import invalid_request, not_found
from contextplatform.core.read_back import without_read_only
from contextplatform.core.validation import parse
from contextplatform.core.views import ApiView
from sources.models import ChatMessage, UserProfile
from sources.selectors import session_messages, session_users, user_profile
from sources.services import append_session_messages, put_user_profile


class ProfileBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attributes: dict[str, Any]


class SessionMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None
    # A tool exchange in OpenAI's shape: the assistant's calls, a tool message's answer to one.
    tool_calls: list[dict[str, Any]] | None = Field(default=None, max_length=128)
    tool_call_id: str | None = Field(default=None, min_length=1, max_length=200)
    name: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("content")
    @classmethod
    def null_only_for_the_assistant(cls, content: Any, info: ValidationInfo) -> Any:
        # As in OpenAI's shape: an assistant turn that only called tools has no content (stored
        # as ""); any other turn without content is a mistake of the caller's.
        if content is None and info.data.get("role") != "assistant":
            raise ValueError("null is allowed only in assistant messages")
        return content


class SessionMessagesBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: str | None = Field(default=None, min_length=1, max_length=200)
    messages: list[SessionMessage] = Field(min_length=1, max_length=1000)


# What a profile's representation adds to what it writes; a write ignores them (core/read_back.py).
PROFILE_READ_ONLY = frozenset({"user", "updated_at"})


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
        **(message.extra or {}),
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
        body = self.body(request, ProfileBody, PROFILE_READ_ONLY)
        return Response(
            profile_representation(put_user_profile(user_id=user, attributes=body.attributes))
        )


# What a message's representation adds to what it writes (a write ignores them).
MESSAGE_READ_ONLY = frozenset({"seq", "created_at"})


def append_body(data: Any) -> Any:
    """The append body, also from a listing (``GET``'s ``{"session", "user", "data"}``): its
    messages are appended in order, their ``seq`` and ``created_at`` are the new session's own."""
    if not isinstance(data, dict) or "data" not in data or "messages" in data:
        return data
    listed = without_read_only(data, frozenset({"session"}))
    messages = listed.pop("data")
    if isinstance(messages, list):
        messages = [
            without_read_only(m, MESSAGE_READ_ONLY) if isinstance(m, dict) else m for m in messages
        ]
    return {**listed, "messages": messages}


class SessionMessagesView(ApiView):
    required_scopes = {"GET": "memory.read", "POST": "memory.write"}

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "user",
                str,
                required=False,
                description="the session's user; needed only when two users hold sessions of "
                "this key (empty: the anonymous session)",
            )
        ],
        responses={200: dict},
        summary="A session's messages",
    )
    def get(self, request: Request, session: str) -> Response:
        user = self.session_user(request, session)
        messages = session_messages(session_key=session, user_id=user)
        return Response(
            {
                "session": session,
                "user": user,
                "data": [message_representation(m) for m in messages],
            }
        )

    @staticmethod
    def session_user(request: Request, session: str) -> str | None:
        """``?user=`` when given; else the one user holding the session. Two users holding the
        same key keep separate sessions, so without ``user`` that is refused, never merged."""
        if "user" in request.query_params:
            return request.query_params["user"] or None
        users = session_users(session)
        if len(users) > 1:
            raise invalid_request(
                f"user: more than one user holds a session {session!r}; name one with ?user=",
                "user",
            )
        return users[0] or None if users else None

    @extend_schema(
        request=SessionMessagesBody, responses={201: dict}, summary="Append messages to a session"
    )
    def post(self, request: Request, session: str) -> Response:
        body = parse(SessionMessagesBody, append_body(request.data))
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
