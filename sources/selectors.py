"""Reads of profiles and session messages, always scoped by user in the query itself."""

from __future__ import annotations

from django.db.models import QuerySet

from sources.models import ChatMessage, UserProfile


def user_profile(user_id: str) -> UserProfile | None:
    return UserProfile.objects.filter(user_id=user_id).first()


def session_messages(*, session_key: str, user_id: str | None) -> QuerySet[ChatMessage]:
    return ChatMessage.objects.filter(
        session__key=session_key, session__user_id=user_id or ""
    ).order_by("seq")
