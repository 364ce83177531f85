"""The shape every context source shares, and the registry of source kinds.

A source kind is a ``ContextSource`` subclass with a ``type`` and a pydantic ``Settings`` model
(its part of the route configuration). Later kinds (rag, memory, mcp, http) register the same way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

OnFailure = Literal["skip", "warn", "block"]
SourceStatus = Literal["ok", "empty", "failed", "timeout", "skipped"]


class SourceSettings(BaseModel):
    """Fields every source has. Kinds subclass it with their own settings."""

    model_config = ConfigDict(extra="forbid")

    type: str
    name: str = Field(default="", pattern=r"^$|^[A-Za-z][A-Za-z0-9_-]{0,47}$")
    enabled: bool = True
    priority: int = Field(default=0, ge=0, le=1000)
    timeout_ms: int | None = Field(default=None, ge=1, le=120_000)
    on_failure: OnFailure = "skip"


@dataclass
class ContextItem:
    """One piece of context a source returns."""

    source: str
    priority: int
    content: str
    tokens: int = 0
    estimator: str = ""
    score: float | None = None
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChatTurn:
    role: str
    text: str


@dataclass(frozen=True)
class ContextRequest:
    """What a source may read about the request it serves."""

    request_id: str
    tenant: str
    route: str
    user: str | None
    session: str | None
    query: str
    turns: tuple[ChatTurn, ...] = ()
    allowlist: tuple[
        str, ...
    ] = ()  # outbound hosts/IPs/CIDRs the tenant allows besides public ones
    use_cache: bool = True
    # A preview: sources read as usual but change nothing (no memory is reinforced by a recall).
    dry_run: bool = False


class ContextSource(ABC):
    type: ClassVar[str]
    Settings: ClassVar[type[SourceSettings]]
    default_priority: ClassVar[int] = 0
    previewable: ClassVar[bool] = False  # shown by POST /api/v1/plugins/context/preview

    def __init__(self, settings: SourceSettings, *, default_timeout_ms: int = 1500):
        self.settings = settings
        self.default_timeout_ms = default_timeout_ms
        # What the source considered and decided (no content): filled by fetch, read by the report.
        self.trace: list[dict[str, Any]] = []
        self.notes: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self.settings.name or self.type

    @property
    def priority(self) -> int:
        return self.settings.priority

    @property
    def timeout_seconds(self) -> float:
        return (self.settings.timeout_ms or self.default_timeout_ms) / 1000

    @property
    def on_failure(self) -> OnFailure:
        return self.settings.on_failure

    def item(self, content: str, **fields: Any) -> ContextItem:
        fields.setdefault("priority", self.priority)
        return ContextItem(source=self.name, content=content, **fields)

    @abstractmethod
    async def fetch(self, request: ContextRequest) -> list[ContextItem]:
        """Return this source's items for the request; raising means the source failed."""


SOURCE_KINDS: dict[str, type[ContextSource]] = {}


def register_source_kind(source_class: type[ContextSource]) -> type[ContextSource]:
    SOURCE_KINDS[source_class.type] = source_class
    return source_class


def source_kind(type_name: str) -> type[ContextSource] | None:
    return SOURCE_KINDS.get(type_name)
