"""``recent_messages``: the session's last N turns plus a compacted digest of older turns."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from asgiref.sync import sync_to_async
from pydantic import Field

from contextplatform.core.estimation import default_estimator
from sources.base import (
    ChatTurn,
    ContextRequest,
    ContextSource,
    PrewarmSkipped,
    SourceResult,
    SourceSettings,
    register_source_kind,
)
from sources.messages import is_tool_result
from sources.selectors import session_turns

SENTENCE_END = re.compile(r"(?<=[.!?])\s")


class RecentMessagesSettings(SourceSettings):
    type: Literal["recent_messages"] = "recent_messages"
    priority: int = Field(default=60, ge=0, le=1000)
    last_n_turns: int = Field(default=6, ge=1, le=200)
    digest: bool = True
    digest_max_tokens: int = Field(default=300, ge=16, le=20_000)
    digest_words_per_turn: int = Field(default=24, ge=4, le=200)


def first_sentence(text: str, max_words: int) -> str:
    flat = " ".join(text.split())
    sentence = SENTENCE_END.split(flat, maxsplit=1)[0]
    words = sentence.split()
    return " ".join(words[:max_words]) + (" …" if len(words) > max_words else "")


def compact_digest(turns: list[ChatTurn], *, max_tokens: int, words_per_turn: int) -> str:
    """Deterministic digest: each older turn's first sentence, newest kept first when over budget."""
    estimator = default_estimator()
    header = f"Earlier in this session ({len(turns)} older messages, compacted):"
    lines: list[str] = []
    used = estimator.count(header)
    # Room for the omitted-messages note is kept while older turns remain, so the note never
    # pushes the digest over max_tokens (len(turns) bounds the omitted count from above).
    note_cost = estimator.count(f"- ({len(turns)} earlier messages omitted)") + 1
    for position, turn in enumerate(reversed(turns)):
        line = f"- {turn.role}: {first_sentence(turn.text, words_per_turn)}"
        cost = estimator.count(line) + 1
        reserve = note_cost if position < len(turns) - 1 else 0
        if used + cost + reserve > max_tokens:
            break
        lines.append(line)
        used += cost
    omitted = len(turns) - len(lines)
    if omitted and used + note_cost <= max_tokens:
        lines.append(f"- ({omitted} earlier messages omitted)")
    return "\n".join([header, *reversed(lines)])


def split_recent(turns: list[ChatTurn], last_n: int) -> tuple[list[ChatTurn], list[ChatTurn]]:
    """The last ``last_n`` turns and those before. A tool exchange is never cut in two: results
    whose call falls before the cut go with it to the older turns, so the verbatim turns never
    start with an answer to a call they do not show."""
    cut = max(len(turns) - last_n, 0)
    while cut < len(turns) and is_tool_result(turns[cut].text):
        cut += 1
    return turns[cut:], turns[:cut]


def render_turns(turns: list[ChatTurn]) -> str:
    return "\n".join(f"{turn.role}: {turn.text}" for turn in turns)


@register_source_kind
class RecentMessagesSource(ContextSource):
    type = "recent_messages"
    Settings = RecentMessagesSettings
    # The session's stored turns are read ahead; which of them the request already carries is
    # decided at the resolve, from its own messages.
    prewarmable = True

    async def fetch(self, request: ContextRequest) -> SourceResult:
        if not request.session:
            return SourceResult()
        stored = await sync_to_async(self._load)(
            request.session, request.user, for_resolve=request.request_id, as_of=request.as_of
        )
        return self.from_stored(request, stored)

    async def prewarm(self, request: ContextRequest) -> list[ChatTurn]:
        if not request.session:
            raise PrewarmSkipped("no session")
        return await sync_to_async(self._load)(request.session, request.user)

    def fetch_at_once(self, request: ContextRequest) -> SourceResult:
        """One statement in the tenant's schema, on the request's thread."""
        if not request.session:
            return SourceResult()
        return self.from_stored(
            request,
            self._load(
                request.session,
                request.user,
                for_resolve=request.request_id,
                as_of=request.as_of,
            ),
        )

    async def fetch_prewarmed(self, request: ContextRequest, warm: Any) -> SourceResult:
        return self.from_stored(request, list(warm))

    def from_stored(self, request: ContextRequest, stored: list[ChatTurn]) -> SourceResult:
        already_sent = {(turn.role, turn.text) for turn in request.turns}
        turns = [
            turn for turn in stored if (turn.role, turn.text) not in already_sent and turn.text
        ]
        if not turns:
            return SourceResult()
        settings: RecentMessagesSettings = self.settings  # type: ignore[assignment]
        recent, older = split_recent(turns, settings.last_n_turns)
        items = (
            [self.item(render_turns(recent), metadata={"kind": "recent", "turns": len(recent)})]
            if recent
            else []
        )
        if older and settings.digest:
            digest = compact_digest(
                older,
                max_tokens=settings.digest_max_tokens,
                words_per_turn=settings.digest_words_per_turn,
            )
            # The digest ranks just below the verbatim turns, so it is the first to go.
            items.append(
                self.item(
                    digest,
                    priority=max(self.priority - 1, 0),
                    metadata={"kind": "digest", "turns": len(older)},
                )
            )
        return SourceResult(items)

    @staticmethod
    def _load(
        session_key: str,
        user_id: str | None,
        for_resolve: str = "",
        as_of: datetime | None = None,
    ) -> list[ChatTurn]:
        return [
            ChatTurn(role=role, text=text)
            for role, text in session_turns(
                session_key=session_key, user_id=user_id, for_resolve=for_resolve, as_of=as_of
            )
        ]
