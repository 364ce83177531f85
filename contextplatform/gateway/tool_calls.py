"""The model's calls of the tools the gateway serves itself, in either provider's answer shape.

The gateway adds tools of its own to a forwarded request (``vsr_context_retrieve`` where
compression kept originals back, ``search_<source>`` for a lazy source). When the answer calls
them, the gateway answers the calls and asks the model again; the client never sees those tools.
This module is the gateway's side of it: finding the reserved calls in an answer, building the
follow-up request that carries their results, taking reserved calls out of an answer that goes to
the client, and adding up the usage of every call the client's request made; each provider's
shapes are its protocol's (``contextplatform.protocols``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from contextplatform.protocols.base import ProtocolName
from contextplatform.protocols.registry import protocol_for
from contextplatform.protocols.tools import UNSERVED_TEXT, ServedCall, ToolCall, parse_arguments

Protocol = ProtocolName


def tool_calls(protocol: Protocol, payload: dict[str, Any]) -> list[ToolCall]:
    """Every tool call of an answer, in order."""
    return protocol_for(protocol).tool_calls(payload)


def reserved_calls(
    protocol: Protocol, payload: dict[str, Any], reserved: Collection[str]
) -> list[ToolCall]:
    return [call for call in tool_calls(protocol, payload) if call.name in reserved]


def follow_up_body(
    protocol: Protocol,
    body: dict[str, Any],
    payload: dict[str, Any],
    served: Sequence[ServedCall],
) -> dict[str, Any]:
    """The request that carries the served calls' results: the forwarded body's messages, the
    model's turn with its text and only the served calls (the client's own tools it called in the
    same turn it may call again, now knowing more), and one result per call."""
    messages = list(body.get("messages") or [])
    messages += protocol_for(protocol).follow_up_messages(payload, served)
    return {**body, "messages": messages}


def without_reserved(
    protocol: Protocol, payload: dict[str, Any], reserved: Collection[str]
) -> dict[str, Any]:
    """The answer with the reserved calls taken out, as the client may see it: when nothing is
    left of it, a short text that says context could not be retrieved, and a plain stop."""
    return protocol_for(protocol).without_reserved(payload, reserved)


def summed_usage(protocol: Protocol, usages: Sequence[Any]) -> dict[str, Any] | None:
    """The usage of several calls as one ``usage`` object of the provider's shape (the last
    call's other fields kept), or None when no call reported any."""
    return protocol_for(protocol).summed_usage(usages)


def with_usage(
    protocol: Protocol, payload: dict[str, Any], usages: Sequence[Any]
) -> dict[str, Any]:
    """The final answer carrying the usage of every call made for it."""
    if len(usages) < 2:
        return payload
    total = summed_usage(protocol, usages)
    return payload if total is None else {**payload, "usage": total}


__all__ = [
    "UNSERVED_TEXT",
    "ServedCall",
    "ToolCall",
    "follow_up_body",
    "parse_arguments",
    "reserved_calls",
    "summed_usage",
    "tool_calls",
    "with_usage",
    "without_reserved",
]
