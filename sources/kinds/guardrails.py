"""``skill_guardrails``: fixed texts attached to the route (hard constraints, priority 100+)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sources.base import (
    ContextRequest,
    ContextSource,
    SourceResult,
    SourceSettings,
    register_source_kind,
)


class GuardrailSettings(SourceSettings):
    type: Literal["skill_guardrails"] = "skill_guardrails"
    priority: int = Field(default=100, ge=0, le=1000)
    texts: list[str] = Field(default_factory=list, max_length=100)


@register_source_kind
class GuardrailSource(ContextSource):
    type = "skill_guardrails"
    Settings = GuardrailSettings

    async def fetch(self, request: ContextRequest) -> SourceResult:
        return self.fetch_at_once(request)

    def fetch_at_once(self, request: ContextRequest) -> SourceResult:
        """The route's own texts: always at hand."""
        settings: GuardrailSettings = self.settings  # type: ignore[assignment]
        return SourceResult(
            [
                self.item(text, metadata={"index": index})
                for index, text in enumerate(settings.texts)
                if text.strip()
            ]
        )
