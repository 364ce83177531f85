"""The two chat request shapes we accept (OpenAI Chat Completions, Anthropic Messages)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contextplatform.core.validation import parse
from sources.base import ChatTurn
from sources.messages import content_text

ChatFormat = Literal["openai", "anthropic"]
ANTHROPIC_ONLY_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking", "document"}


class Passthrough(BaseModel):
    model_config = ConfigDict(extra="allow")


class OpenAIMessage(Passthrough):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class OpenAIChatRequest(Passthrough):
    model: str | None = None
    messages: list[OpenAIMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None


class AnthropicBlock(Passthrough):
    type: str


class AnthropicMessage(Passthrough):
    role: Literal["user", "assistant"]
    content: str | list[AnthropicBlock]


class AnthropicChatRequest(Passthrough):
    model: str | None = None
    system: str | list[dict[str, Any]] | None = None
    messages: list[AnthropicMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class ChatRequest:
    format: ChatFormat
    body: dict[str, Any]
    max_tokens: int | None
    turns: tuple[ChatTurn, ...]

    @property
    def query(self) -> str:
        """The latest user message's text: what the sources are asked about."""
        for turn in reversed(self.turns):
            if turn.role == "user" and turn.text.strip():
                return turn.text
        return ""


def detect_format(body: dict[str, Any]) -> ChatFormat:
    if "system" in body or "anthropic_version" in body:
        return "anthropic"
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:  # bad types fail in parse()
        if not isinstance(message, dict):
            continue
        if (
            message.get("role") in {"system", "developer", "tool", "function"}
            or "tool_calls" in message
        ):
            return "openai"
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") in ANTHROPIC_ONLY_BLOCKS
            for block in content
        ):
            return "anthropic"
    return "openai"


def parse_chat_request(
    body: Any, explicit: ChatFormat | None, *, prefix: str = "request"
) -> ChatRequest:
    chat_format = explicit or (detect_format(body) if isinstance(body, dict) else "openai")
    if chat_format == "anthropic":
        anthropic = parse(AnthropicChatRequest, body, prefix=prefix)
        max_tokens = anthropic.max_tokens
    else:
        openai = parse(OpenAIChatRequest, body, prefix=prefix)
        max_tokens = openai.max_completion_tokens or openai.max_tokens
    turns = tuple(
        ChatTurn(role=str(message.get("role")), text=content_text(message.get("content")))
        for message in body["messages"]
    )
    return ChatRequest(format=chat_format, body=body, max_tokens=max_tokens, turns=turns)
