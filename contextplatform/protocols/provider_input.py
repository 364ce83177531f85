"""The input a provider bills beyond the request's own text, where the provider publishes it.

A session budget reserves a call's input before the call; the provider then reports the input it
counted, which is more than the body's text: the chat template's framing of each message, and a
system prompt of its own when the request offers tools. What is published is added here to the
platform's count of the body; what is not is learned from the reports (the deployment's
calibration, and the reservation floor of ``reservation_margins``). Pure: no database, no I/O.
"""

from __future__ import annotations

import re
from typing import Any

# OpenAI's chat format frames every message in ``<|start|>{role}\n{content}<|end|>\n`` (3 tokens)
# and primes the answer with ``<|start|>assistant<|message|>`` (3 tokens): the OpenAI Cookbook's
# "How to count tokens with tiktoken", num_tokens_from_messages, for the gpt-4 and gpt-4o families.
OPENAI_TOKENS_PER_MESSAGE = 3
OPENAI_TOKENS_PER_REPLY = 3

# Anthropic adds a tool-use system prompt to every request that offers tools, billed as input:
# "Tool use with Claude", Pricing (docs.claude.com/en/docs/agents-and-tools/tool-use/overview),
# "Tool use system prompt token count" per model and tool choice. (auto or none, any or tool).
ANTHROPIC_TOOL_PROMPT_TOKENS: tuple[tuple[re.Pattern[str], int, int], ...] = tuple(
    (re.compile(pattern), auto_or_none, any_or_tool)
    for pattern, auto_or_none, any_or_tool in (
        # Claude 4 and 4.x (Opus, Sonnet, Haiku), Claude Sonnet 3.7, Claude Sonnet 3.5.
        (r"claude-(opus|sonnet|haiku)-4", 346, 313),
        (r"claude-(3-7-sonnet|sonnet-3-7|3-5-sonnet|sonnet-3-5)", 346, 313),
        (r"claude-(3-5-haiku|haiku-3-5|3-haiku|haiku-3)", 264, 340),
        (r"claude-(3-opus|opus-3)", 530, 281),
        (r"claude-(3-sonnet|sonnet-3)", 159, 235),
    )
)
# A model the table does not name (a proxy's alias, a newer model): the largest published count,
# so that the reservation covers whichever it is.
ANTHROPIC_TOOL_PROMPT_UNKNOWN = (530, 340)


def anthropic_tool_prompt_tokens(model: str, body: dict[str, Any]) -> int:
    """The tool-use system prompt Anthropic adds to ``body``: 0 without tools (a tool choice of
    ``none`` without tools adds nothing), else the model's published count for its choice."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        return 0
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else None
    forced = kind in ("any", "tool")
    name = model.rsplit("/", 1)[-1].strip().lower()
    for pattern, auto_or_none, any_or_tool in ANTHROPIC_TOOL_PROMPT_TOKENS:
        if pattern.search(name):
            return any_or_tool if forced else auto_or_none
    auto_or_none, any_or_tool = ANTHROPIC_TOOL_PROMPT_UNKNOWN
    return any_or_tool if forced else auto_or_none


def openai_framing_tokens(body: dict[str, Any]) -> int:
    messages = body.get("messages")
    count = len(messages) if isinstance(messages, list) else 0
    return count * OPENAI_TOKENS_PER_MESSAGE + OPENAI_TOKENS_PER_REPLY


__all__ = ["anthropic_tool_prompt_tokens", "openai_framing_tokens"]
