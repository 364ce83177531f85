"""Feedback on a resolve: an application's thumbs up (1), neutral (0) or down (-1) on one replay
record, with an optional comment. One per record: posting again replaces it."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from contextplatform.core.errors import not_found
from contextplatform.replay.arrival import await_replay
from contextplatform.replay.models import Feedback


def give_feedback(
    *, record_id: str, score: int, comment: str, key_id: int | None
) -> tuple[Feedback, bool]:
    """Record (or replace) the feedback on ``record_id``; whether it is new. A record of another
    tenant is not in this schema: 404, as an unknown one."""
    if not await_replay(record_id):  # the writer may still be on its way with it
        raise not_found(f"resolve {record_id!r} does not exist", None)
    with transaction.atomic():
        return Feedback.objects.update_or_create(
            record_id=record_id,
            defaults={"score": score, "comment": comment, "key_id": key_id},
        )


def feedback_representation(feedback: Feedback) -> dict[str, Any]:
    return {
        "id": feedback.record_id,
        "score": feedback.score,
        "comment": feedback.comment,
        "created_at": feedback.created_at.isoformat(),
        "updated_at": feedback.updated_at.isoformat(),
    }
