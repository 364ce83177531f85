"""A turn in the session store: the user's message at resolve, the model's answer at hand-back
(which also reaches each source kind's after-response hook)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.utils import timezone

from contextplatform.core.errors import ApiError
from contextplatform.replay.arrival import await_replay
from contextplatform.replay.models import ReplayRecord
from sources.base import ContextSource, registered_kinds
from sources.messages import MESSAGE_EXTRAS, content_text, message_text
from sources.selectors import last_session_turn
from sources.services import append_session_messages


def begin_turn(
    *, resolve_id: str, user: str | None, session: str, messages: list[dict[str, Any]]
) -> None:
    """Store what the request adds to the session: its latest user message, or the tool results
    it ends with (OpenAI's ``tool`` messages after the assistant's calls), unless the session
    already ends with it. An Anthropic tool result is a user message, stored as one."""
    added = new_turn_messages(messages)
    if not added:
        return
    # Role and text only: the row's content (a message's whole JSON) is not what is compared.
    last = last_session_turn(session_key=session, user_id=user, for_resolve=resolve_id)
    if last is not None and last == (added[-1]["role"], message_text(added[-1])):
        return
    append_session_messages(
        session_key=session, user_id=user, messages=added, resolve_id=resolve_id
    )


def new_turn_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages a request's turn adds: its latest user message, or its trailing run of tool
    results (each kept whole: content, tool_call_id, name)."""
    if not messages:
        return []
    if messages[-1].get("role") == "user":
        return [{"role": "user", "content": messages[-1].get("content")}]
    start = len(messages)
    while start > 0 and messages[start - 1].get("role") == "tool":
        start -= 1
    return [
        {"role": "tool", **{k: m[k] for k in ("content", *MESSAGE_EXTRAS) if k in m}}
        for m in messages[start:]
    ]


def assistant_message(response: Any) -> dict[str, Any]:
    """The assistant message from an OpenAI or Anthropic response body, or a bare message."""
    if not isinstance(response, dict):
        raise ApiError(
            "invalid_request", "response: expected the model's response object", param="response"
        )
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message") or {}
        if not isinstance(message, dict):
            raise ApiError(
                "invalid_request",
                "response.choices[0].message: expected an object",
                param="response.choices[0].message",
            )
        kept = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            kept["tool_calls"] = message["tool_calls"]
        return kept
    if "content" in response and response.get("role", "assistant") == "assistant":
        return {"role": "assistant", "content": response.get("content")}
    raise ApiError(
        "invalid_request",
        "response: expected an OpenAI chat completion (choices[0].message) or an Anthropic message (content)",
        param="response",
    )


def complete_turn(*, record_id: str, response: Any, capture_content: bool) -> dict[str, Any]:
    if not await_replay(record_id):
        raise ApiError("not_found", f"no resolve with id {record_id!r}", status=404)
    return _complete_turn(record_id=record_id, response=response, capture_content=capture_content)


@transaction.atomic
def _complete_turn(*, record_id: str, response: Any, capture_content: bool) -> dict[str, Any]:
    record = ReplayRecord.objects.select_for_update().filter(pk=record_id).first()
    if record is None:
        raise ApiError("not_found", f"no resolve with id {record_id!r}", status=404)
    if record.status == "refused":
        raise ApiError(
            "conflict", "this resolve was refused; there is no turn to complete", status=409
        )
    assistant_message(response)  # a malformed answer is refused before anything is written
    if record.response_received_at is not None:
        return {"id": record.id, "status": "accepted", "duplicate": True, "messages_written": 0}
    # Every kind hears of the answer (not only those in the record): a route whose context is off
    # still queued its memory write at resolve.
    written, acted = record_answer(
        record, response, capture_content=capture_content, kinds=registered_kinds()
    )
    record.save(update_fields=["response_received_at", "response_body"])
    return {
        "id": record.id,
        "status": "accepted",
        "duplicate": False,
        "messages_written": written,
        "memory_write": "queued" if acted else "none",
    }


def record_answer(
    record: ReplayRecord,
    response: Any,
    *,
    capture_content: bool,
    kinds: Iterable[type[ContextSource]],
) -> tuple[int, bool]:
    """The model's answer to the record's resolve: into its session (when it names one), to each
    of ``kinds``' after-response hooks, and onto the record (not saved here). Returns the messages
    written and whether a kind acted on the answer."""
    message = assistant_message(response)
    written = 0
    if record.session_key:
        append_session_messages(
            session_key=record.session_key,
            user_id=record.user_id or None,
            messages=[message],
            resolve_id=record.id,
        )
        written = 1
    answer = content_text(message.get("content"))
    acted = [kind.after_response(record.id, answer) for kind in kinds]
    record.response_received_at = timezone.now()
    if capture_content:
        record.response_body = response
    return written, any(acted)
