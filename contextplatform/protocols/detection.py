"""Which provider's shape a chat body is in, when its caller did not say: a field, a role, a
content part or a tool definition that only one shape has. Pure."""

from __future__ import annotations

from typing import Any

from contextplatform.protocols.base import ProtocolName

ANTHROPIC_ONLY_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking", "document"}

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


def shape_signal(body: dict[str, Any]) -> tuple[ProtocolName, str] | None:
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


__all__ = ["shape_signal"]
