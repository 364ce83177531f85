"""The ``x-vsr-compression-control`` request header: ``bypass`` and ``target=N``, when allowed."""

from __future__ import annotations

from dataclasses import dataclass

from compression.config import RequestControls


@dataclass(frozen=True)
class Controls:
    bypass: bool = False
    target_tokens: int | None = None


def parse_controls(header_value: str | None, config: RequestControls) -> Controls:
    """Honoured only when the route enables them; names it does not allow are ignored, and so is a
    ``target`` that is not a positive integer. ``target`` is clamped by ``max_target_tokens``."""
    if not config.enabled or not header_value:
        return Controls()
    bypass = False
    target: int | None = None
    for token in header_value.lower().split(","):
        name, _, value = token.strip().partition("=")
        name, value = name.strip(), value.strip()
        if name not in config.allowed:
            continue
        if name == "bypass":
            bypass = True
        elif name == "target" and value.isdigit() and int(value) > 0:
            target = int(value)
            if config.max_target_tokens > 0:
                target = min(target, config.max_target_tokens)
    return Controls(bypass=bypass, target_tokens=target)
