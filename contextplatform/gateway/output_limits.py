"""The output limit a call is forwarded with, so the provider cannot answer past what the session
budget granted it.

Each protocol names its limit in its own field: Anthropic's ``max_tokens`` (required), OpenAI
chat's ``max_completion_tokens`` or the older ``max_tokens``, and ``max_output_tokens`` in a
Responses-style body. Every field the client sent is lowered to the grant (never raised); a body
that names none gets the field its provider reads: ``max_completion_tokens`` for OpenAI's
reasoning families, which refuse ``max_tokens``, ``max_tokens`` everywhere else (what OpenAI-
compatible servers read). Pure: no database, no I/O.
"""

from __future__ import annotations

from typing import Any

from contextplatform.protocols.registry import protocol_for

OUTPUT_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def _limit(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def client_output_limit(body: dict[str, Any]) -> int | None:
    """The smallest output limit the client's body names, or None when it names none."""
    limits = [limit for name in OUTPUT_LIMIT_FIELDS if (limit := _limit(body.get(name)))]
    return min(limits) if limits else None


def limit_field(protocol: str, model: str) -> str:
    """The field a body that names no limit is given (the protocol's)."""
    return protocol_for(protocol).output_limit_field(model)


def with_output_limit(
    protocol: str, model: str, body: dict[str, Any], allowance: int
) -> dict[str, Any]:
    """``body`` with every output limit it names at most ``allowance`` (a new dict; the same one
    when nothing changes)."""
    named = {name: _limit(body.get(name)) for name in OUTPUT_LIMIT_FIELDS if name in body}
    lowered = {
        name: allowance for name, limit in named.items() if limit is None or limit > allowance
    }
    if not named:
        lowered = {limit_field(protocol, model): allowance}
    return {**body, **lowered} if lowered else body


__all__ = ["client_output_limit", "limit_field", "with_output_limit"]
