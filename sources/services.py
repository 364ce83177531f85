"""Writes of profiles and session messages."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Max

from sources.messages import MESSAGE_EXTRAS, message_text
from sources.models import ChatMessage, ChatSession, UserProfile
from sources.selectors import forget_session_read


def put_user_profile(*, user_id: str, attributes: dict[str, Any]) -> UserProfile:
    profile, _ = UserProfile.objects.update_or_create(
        user_id=user_id, defaults={"attributes": attributes}
    )
    return profile


@transaction.atomic
def append_session_messages(
    *, session_key: str, user_id: str | None, messages: list[dict[str, Any]], resolve_id: str = ""
) -> list[ChatMessage]:
    """Append messages in order; the session row is locked so concurrent appends keep their order."""
    forget_session_read()
    session, _ = ChatSession.objects.get_or_create(key=session_key, user_id=user_id or "")
    session = ChatSession.objects.select_for_update().get(pk=session.pk)
    last = session.messages.aggregate(last=Max("seq"))["last"] or 0
    created = [
        ChatMessage(
            session=session,
            seq=last + offset,
            role=message["role"],
            # A message without content (an assistant turn that only called tools) is stored as
            # an empty text: the column holds JSON, and SQL NULL is not a message's content.
            content=message.get("content") if message.get("content") is not None else "",
            text=message_text(message),
            extra={k: message[k] for k in MESSAGE_EXTRAS if message.get(k) is not None},
            resolve_id=resolve_id,
        )
        for offset, message in enumerate(messages, start=1)
    ]
    ChatMessage.objects.bulk_create(created)
    session.save(update_fields=["updated_at"])
    return created
