"""``user_profile``: the tenant's attributes of the requesting user (priority 50-99)."""

from __future__ import annotations

import json
from typing import Literal

from asgiref.sync import sync_to_async
from pydantic import Field

from sources.base import (
    ContextRequest,
    ContextSource,
    SourceResult,
    SourceSettings,
    register_source_kind,
)
from sources.selectors import user_attributes


class UserProfileSettings(SourceSettings):
    type: Literal["user_profile"] = "user_profile"
    priority: int = Field(default=80, ge=0, le=1000)
    fields: list[str] | None = Field(
        default=None, description="attributes to include; all when unset"
    )


@register_source_kind
class UserProfileSource(ContextSource):
    type = "user_profile"
    Settings = UserProfileSettings
    prewarmable = True  # the user's attributes, whatever the turn asks

    async def fetch(self, request: ContextRequest) -> SourceResult:
        if not request.user:
            return SourceResult()
        return await sync_to_async(self.fetch_at_once)(request)

    def fetch_at_once(self, request: ContextRequest) -> SourceResult:
        """One statement in the tenant's schema, on the request's thread."""
        attributes = user_attributes(request.user) if request.user else None
        if attributes is None:
            return SourceResult()
        settings: UserProfileSettings = self.settings  # type: ignore[assignment]
        if settings.fields is not None:
            attributes = {key: attributes[key] for key in settings.fields if key in attributes}
        body = {"user_id": request.user, **attributes}
        return SourceResult(
            [
                self.item(
                    json.dumps(body, ensure_ascii=False, sort_keys=True),
                    metadata={"kind": "profile"},
                )
            ]
        )
