"""The body of a key a tenant writes (``POST``/``PATCH /api/v1/keys``, the tenant admin's form):
its name, scopes, expiry, rate limit, budget and metadata, each checked with a message naming the
field."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tenants.scopes import ALL_SCOPES

MAX_METADATA_BYTES = 4096
MAX_METADATA_DEPTH = 4
MAX_RPM = 1_000_000
MAX_TPM = 10_000_000_000
MAX_BUDGET_USD = 1_000_000_000.0
MAX_BUDGET_TOKENS = 10**15


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(item) for item in value), default=0)
    return 0


class RateLimitSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rpm: int | None = Field(default=None, ge=1, le=MAX_RPM)
    tpm: int | None = Field(default=None, ge=1, le=MAX_TPM)


class BudgetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_usd: float | None = Field(default=None, ge=0, le=MAX_BUDGET_USD)
    max_tokens: int | None = Field(default=None, ge=0, le=MAX_BUDGET_TOKENS)
    period: Literal["day", "month", "total"] = "month"


class KeySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    scopes: list[str] = Field(min_length=1, max_length=len(ALL_SCOPES))
    expires_at: datetime | None = None
    rate_limit: RateLimitSpec | None = None
    budget: BudgetSpec | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(ALL_SCOPES))
        if unknown:
            raise ValueError(
                f"unknown scope(s) {', '.join(unknown)}; known: {', '.join(ALL_SCOPES)}"
            )
        return [scope for scope in ALL_SCOPES if scope in value]

    @field_validator("expires_at", mode="before")
    @classmethod
    def _expires_at(cls, value: Any) -> Any:
        # JSON has no datetimes: an ISO 8601 string (a time without a zone is UTC).
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(
                    "expected an ISO 8601 date and time, e.g. 2027-01-31T00:00:00Z"
                ) from None
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        if depth(value) > MAX_METADATA_DEPTH:
            raise ValueError(f"nested deeper than {MAX_METADATA_DEPTH} levels")
        size = len(json.dumps(value, ensure_ascii=False).encode())
        if size > MAX_METADATA_BYTES:
            raise ValueError(f"{size} bytes as JSON, more than {MAX_METADATA_BYTES}")
        return value


__all__ = ["BudgetSpec", "KeySpec", "RateLimitSpec"]
