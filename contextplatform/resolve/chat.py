"""The two chat request shapes we accept (OpenAI Chat Completions, Anthropic Messages, each checked
in full: ``provider_shapes.py``): which one a body is, and what the resolve reads from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from contextplatform.core.validation import parse
from contextplatform.protocols.registry import protocol_for
from sources.base import ChatTurn
from sources.messages import content_text

ChatFormat = Literal["openai", "anthropic"]
ANTHROPIC_ONLY_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking", "document"}


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
                return turn.text
        return ""


# Fields and message parts that only one of the two shapes has: a body showing one of them is of
# that shape whatever else it says.
OPENAI_ONLY_FIELDS = (
    "max_completion_tokens",
    "n",
    "response_format",
    "frequency_penalty",
    "presence_penalty",
    "logprobs",
    "logit_bias",
    "seed",
    "stop",
    "user",
    "functions",
    "parallel_tool_calls",
    "stream_options",
)
ANTHROPIC_ONLY_FIELDS = (
    "system",
    "anthropic_version",
    "stop_sequences",
    "top_k",
    "thinking",
)
OPENAI_ONLY_PARTS = {"image_url", "input_audio", "file", "refusal"}
OPENAI_ONLY_ROLES = {"system", "developer", "tool", "function"}


def shape_signal(body: dict[str, Any]) -> tuple[ChatFormat, str] | None:
    """The shape a body shows by a field or part only that shape has, and which one; None when the
    body is valid in both shapes (a plain Messages body: model, max_tokens, string contents)."""
    for key in ANTHROPIC_ONLY_FIELDS:
        if key in body:
            return "anthropic", f"the body has {key!r}, which only Anthropic Messages has"
    for key in OPENAI_ONLY_FIELDS:
        if key in body:
            return "openai", f"the body has {key!r}, which only OpenAI Chat Completions has"
    messages = body.get("messages")
    for index, message in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict):  # bad types fail in parse()
            continue
        where = f"messages[{index}]"
        if message.get("role") in OPENAI_ONLY_ROLES:
            role = message["role"]
            return "openai", f"{where} has role {role!r}, which only OpenAI Chat Completions has"
        if "tool_calls" in message or message.get("content", "") is None:
            return "openai", f"{where} is an OpenAI assistant message (tool_calls or null content)"
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in ANTHROPIC_ONLY_BLOCKS:
                return "anthropic", f"{where} has a {kind!r} block, which only Anthropic has"
            if kind in OPENAI_ONLY_PARTS:
                return "openai", f"{where} has an {kind!r} part, which only OpenAI has"
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict) and "input_schema" in tool:
            return "anthropic", "a tool has 'input_schema', which only Anthropic tools have"
        if isinstance(tool, dict) and tool.get("type") == "function":
            return "openai", "a tool is of type 'function', which only OpenAI tools are"
    return None


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
        "openai",
        "the body is valid in both shapes and the route names no deployment: openai, the default",
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
        chat_format, because = "openai", "the body is not an object"
    provider = protocol_for(chat_format)
    max_tokens = provider.max_tokens_of(
        parse(provider.request_shape(for_call=for_call), body, prefix=prefix)
    )
    turns = tuple(
        ChatTurn(role=str(message.get("role")), text=content_text(message.get("content")))
        for message in body["messages"]
    )
    return ChatRequest(
        format=chat_format, body=body, max_tokens=max_tokens, turns=turns, format_reason=because
    )
