"""Plain text of chat messages in either provider's shape."""

from __future__ import annotations

import json
from typing import Any


def content_text(content: Any) -> str:
    """Text of a message's content: a string, OpenAI parts, or Anthropic blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                kind = part.get("type")
                if kind in {"text", "input_text", "output_text"}:
                    parts.append(str(part.get("text", "")))
                elif kind == "tool_result":
                    parts.append(content_text(part.get("content")))
                elif kind == "tool_use":
                    parts.append(f"{part.get('name', '')} {json.dumps(part.get('input', {}))}")
        return "\n".join(p for p in parts if p)
    if isinstance(content, dict):
        return content_text([content])
    return str(content)
