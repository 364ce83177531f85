"""The providers' protocols by the name a deployment's configuration gives."""

from __future__ import annotations

from contextplatform.protocols.anthropic_messages import AnthropicMessages
from contextplatform.protocols.base import ProtocolError, ProviderProtocol
from contextplatform.protocols.openai_chat import OpenAIChat

OPENAI = OpenAIChat()
ANTHROPIC = AnthropicMessages()
PROTOCOLS: dict[str, ProviderProtocol] = {OPENAI.name: OPENAI, ANTHROPIC.name: ANTHROPIC}


def protocol_for(name: str) -> ProviderProtocol:
    """The protocol called ``name``; a ProtocolError when there is none."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ProtocolError(f"unknown protocol {name!r}") from None


__all__ = ["ANTHROPIC", "OPENAI", "PROTOCOLS", "protocol_for"]
