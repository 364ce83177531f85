"""The input a provider bills beyond the request's own text, where the provider publishes it
(the tables are the protocols': ``protocols/provider_input.py``)."""

from __future__ import annotations

from typing import Any

from contextplatform.protocols.registry import protocol_for


def published_overhead(protocol: str, model: str, body: dict[str, Any]) -> int:
    """The input the provider adds to ``body`` (as its deployment's ``model`` is called), in
    tokens, by what the provider publishes."""
    return protocol_for(protocol).published_overhead(model, body)


__all__ = ["published_overhead"]
