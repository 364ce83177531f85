"""The two chat request shapes we accept (OpenAI Chat Completions, Anthropic Messages, each checked
in full: ``provider_shapes.py``): which one a body is, and what the resolve reads from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contextplatform.core.validation import parse
from contextplatform.protocols.base import ProtocolName
from contextplatform.protocols.detection import shape_signal
from contextplatform.protocols.registry import protocol_for
from sources.base import ChatTurn
from sources.messages import TOOL_RESULT_MARK, message_text

ChatFormat = ProtocolName
DEFAULT_FORMAT: ChatFormat = "openai"


@dataclass(frozen=True)
class ChatRequest:
    format: ChatFormat
    body: dict[str, Any]
    max_tokens: int | None
    turns: tuple[ChatTurn, ...]
    # Why the body was taken for ``format`` (the resolve report's ``format_reason``).
    format_reason: str = ""

    @property
    def query(self) -> str:
        """The latest user message's text: what the sources are asked about."""
        for turn in reversed(self.turns):
            if turn.role == "user" and turn.text.strip():
                # An Anthropic tool result comes in a user message: asked about as its text.
                return turn.text.removeprefix(f"{TOOL_RESULT_MARK} ")
        return ""


def detect_format(
    body: dict[str, Any], protocol: ChatFormat | None = None
) -> tuple[ChatFormat, str]:
    """The shape of a body the caller did not name, and why. A body valid in both shapes goes by
    the protocol of the route's deployment (``protocol``): guessing OpenAI for a plain Anthropic
    body injects ``tool`` messages the Anthropic API refuses."""
    signal = shape_signal(body)
    if signal is not None:
        return signal
    if protocol is not None:
        return (
            protocol,
            f"the body is valid in both shapes; the route's deployment speaks {protocol}",
        )
    return (
        DEFAULT_FORMAT,
        f"the body is valid in both shapes and the route names no deployment: {DEFAULT_FORMAT}, "
        "the default",
    )


def parse_chat_request(
    body: Any,
    explicit: ChatFormat | None,
    *,
    prefix: str = "request",
    protocol: ChatFormat | None = None,
    for_call: bool = False,
) -> ChatRequest:
    """``explicit``: the format the caller named (the resolve's ``format``, the gateway's endpoint),
    which wins; ``protocol``: the route's deployment's, for a body valid in both shapes;
    ``for_call``: the gateway's, whose body is sent on as it is, so it needs what the provider
    requires of a call (the format's ``request_shape(for_call=True)``)."""
    if explicit:
        chat_format, because = explicit, f"the request names format {explicit!r}"
    elif isinstance(body, dict):
        chat_format, because = detect_format(body, protocol)
    else:
        chat_format, because = DEFAULT_FORMAT, "the body is not an object"
    provider = protocol_for(chat_format)
    max_tokens = provider.max_tokens_of(
        parse(provider.request_shape(for_call=for_call), body, prefix=prefix)
    )
    turns = tuple(
        ChatTurn(role=str(message.get("role")), text=message_text(message))
        for message in body["messages"]
    )
    return ChatRequest(
        format=chat_format, body=body, max_tokens=max_tokens, turns=turns, format_reason=because
    )
