"""The provider's reported usage, read from its answers, and where it goes in a replay record.

OpenAI reports ``usage.prompt_tokens`` / ``completion_tokens`` (in a stream: in a final chunk
without choices, sent when the request says ``stream_options.include_usage``); Anthropic reports
``usage.input_tokens`` / ``output_tokens``, plus the cached input (``cache_creation_input_tokens``,
``cache_read_input_tokens``) that is part of the prompt too (in a stream: ``message_start``'s
message, then ``message_delta``'s running totals). Pure: no database, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ANTHROPIC_INPUT_FIELDS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


@dataclass(frozen=True)
class ProviderUsage:
    """``input`` counts every prompt token, cached ones included; ``cached_input`` is the part
    read from the provider's prompt cache (OpenAI's ``prompt_tokens_details.cached_tokens``,
    Anthropic's ``cache_read_input_tokens``) and ``cache_write`` the part written to it
    (Anthropic's ``cache_creation_input_tokens``): each has its own price."""

    input: int
    output: int
    cached_input: int = 0
    cache_write: int = 0

    def as_dict(self) -> dict[str, int]:
        counts = {"input": self.input, "output": self.output}
        if self.cached_input:
            counts["cached_input"] = self.cached_input
        if self.cache_write:
            counts["cache_write"] = self.cache_write
        return counts

    def in_shape_of(self, protocol: str) -> dict[str, int]:
        """As the provider's own ``usage`` object (cached input folded into the input)."""
        if protocol == "anthropic":
            return {"input_tokens": self.input, "output_tokens": self.output}
        return {
            "prompt_tokens": self.input,
            "completion_tokens": self.output,
            "total_tokens": self.input + self.output,
        }


def _tokens(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def usage_of(usage: Any) -> ProviderUsage | None:
    """A ``usage`` object in either provider's shape, or None when it is not one."""
    if not isinstance(usage, dict):
        return None
    prompt = _tokens(usage.get("prompt_tokens"))
    if prompt is not None:
        details = usage.get("prompt_tokens_details")
        cached = _tokens(details.get("cached_tokens")) if isinstance(details, dict) else None
        return ProviderUsage(
            input=prompt,
            output=_tokens(usage.get("completion_tokens")) or 0,
            cached_input=min(cached or 0, prompt),
        )
    inputs = [_tokens(usage.get(name)) for name in ANTHROPIC_INPUT_FIELDS]
    if inputs[0] is None and _tokens(usage.get("output_tokens")) is None:
        return None
    return ProviderUsage(
        input=sum(count or 0 for count in inputs),
        output=_tokens(usage.get("output_tokens")) or 0,
        cached_input=inputs[2] or 0,
        cache_write=inputs[1] or 0,
    )


def usage_from_response(payload: Any) -> ProviderUsage | None:
    """The usage of a non-streaming answer (an OpenAI chat completion or an Anthropic message)."""
    return usage_of(payload.get("usage")) if isinstance(payload, dict) else None


class StreamUsage:
    """The usage a stream reports, followed event by event (each a parsed ``data:`` object)."""

    def __init__(self) -> None:
        self._input: int | None = None
        self._output: int | None = None
        self._cached = 0
        self._written = 0

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            self._merge(message.get("usage") if isinstance(message, dict) else None)
        elif kind == "message_delta" or "usage" in event:
            self._merge(event.get("usage"))

    def _merge(self, raw: Any) -> None:
        if not isinstance(raw, dict):
            return
        usage = usage_of(raw)
        if usage is None:
            return
        # A delta that names no input (Anthropic's message_delta) keeps the input seen before.
        if "prompt_tokens" in raw or any(name in raw for name in ANTHROPIC_INPUT_FIELDS):
            self._input = usage.input
            self._cached = usage.cached_input
            self._written = usage.cache_write
        if "completion_tokens" in raw or "output_tokens" in raw:
            self._output = usage.output

    @property
    def usage(self) -> ProviderUsage | None:
        if self._input is None:
            return None
        return ProviderUsage(
            input=self._input,
            output=self._output or 0,
            cached_input=self._cached,
            cache_write=self._written,
        )


def is_usage_chunk(event: dict[str, Any]) -> bool:
    """OpenAI's final chunk of a stream with ``include_usage``: usage and no choices."""
    return isinstance(event.get("usage"), dict) and not event.get("choices")


def with_provider_usage(tokens: dict[str, Any], usage: ProviderUsage) -> dict[str, Any]:
    """A replay record's ``tokens`` with the provider's counts beside the platform's."""
    return {**tokens, "provider": usage.as_dict()}


def uncalibrated_input(tokens: dict[str, Any]) -> float | None:
    """The heuristic's estimate of the forwarded request, from a record's ``tokens``: ``after``,
    divided by the calibration it was multiplied with; None when the counts were exact (the
    calibration is the heuristic's) or missing."""
    after = tokens.get("after")
    if tokens.get("label") == "exact" or not isinstance(after, int | float):
        return None
    ratio = tokens.get("calibration")
    if isinstance(ratio, int | float) and ratio > 0:
        return after / ratio
    return float(after)
