"""The shape every context source shares, and the registry of source kinds.

A source kind is a ``ContextSource`` subclass with a ``type`` and a pydantic ``Settings`` model
(its part of the route configuration), registered with ``register_source_kind``. ``fetch`` returns
a ``SourceResult`` (items, trace, notes) and leaves the source object as it was; a kind that acts
once the model has answered (memory writes the turn) overrides ``after_resolve`` and
``after_response``, so the pipeline never needs to know which kinds do.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime
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
    # The route's upstream deployment (``model.upstream``): what a judge block that names no
    # deployment asks, when that deployment may judge (checked when the judge is chosen).
    judge_deployment: str | None = None
    # False: a judge block scores with the local judge whatever deployment it names, so the fetch
    # asks no model (a token count's resolve).
    judge_calls: bool = True
    # Read the tenant's data as it stood then (a rerun of a recorded request): the kinds that read
    # history or memories see only what existed at this time. None: now.
    as_of: datetime | None = None
    # Count this fetch in the per-source metrics (a rerun is no observation of the sources now).
    observed: bool = True


@dataclass
class SourceResult:
    """What one fetch found: the items, and what it considered and decided, without content."""

    items: list[ContextItem] = field(default_factory=list)
    # One entry per candidate the source weighed (ids, scores, kept, reason): the report's
    # ``candidates``.
    trace: list[dict[str, Any]] = field(default_factory=list)
    # How the fetch went (cache hit or miss, backend, judge error…): the report's ``notes``.
    notes: dict[str, Any] = field(default_factory=dict)


class PrewarmSkipped(Exception):
    """A source that cannot read ahead for this session (its reason is the pre-warm report's)."""


class SourceFailed(Exception):
    """A fetch failed after learning something worth reporting (a hybrid backend's primary error,
    the memory store's status): the outcome names ``error`` and keeps ``notes``."""

    def __init__(self, error: BaseException, notes: dict[str, Any]):
        super().__init__(str(error))
        self.error = error
        self.notes = notes


@dataclass(frozen=True)
class ResolvedTurn:
    """A resolve the caller accepted (not refused): what a source may act on after the response."""

    resolve_id: str
    route: str
    user: str | None
    session: str | None
    user_text: str
    # The request's own say on storing the turn: True asks for it, False opts out, None is silent.
    store_requested: bool | None = None
    key_id: int | None = None  # the API key that asked: what the turn's later calls are charged to


class ContextSource(ABC):
    type: ClassVar[str]
    # builtins.type: in this class body the name ``type`` is the kind's name above.
    Settings: ClassVar[builtins.type[SourceSettings]]
    default_priority: ClassVar[int] = 0
    previewable: ClassVar[bool] = False  # shown by POST /api/v1/plugins/context/preview
    # Read ahead when a session opens (POST /api/v1/sessions/{session}/prewarm): a kind whose
    # fetch reads what the user or the session holds, not what the turn asks, sets it; ``prewarm``
    # then runs at the session's opening and the next resolve serves ``fetch_prewarmed``.
    prewarmable: ClassVar[bool] = False

    def __init__(self, settings: SourceSettings, *, default_timeout_ms: int = 1500):
        self.settings = settings
        self.default_timeout_ms = default_timeout_ms

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
    async def fetch(self, request: ContextRequest) -> SourceResult:
        """This source's items for the request; raising means the source failed (raise
        ``SourceFailed`` to keep notes)."""

    async def prewarm(self, request: ContextRequest) -> Any:
        """What this source reads before the turn is known (``request.query`` is empty, no
        turns): kept, pickled, in the session's pre-warm cache for ``fetch_prewarmed``. By default
        the whole fetch's result; a kind whose fetch also reads the turn keeps less. Raise
        ``PrewarmSkipped`` when there is nothing to read ahead."""
        return await self.fetch(request)

    async def fetch_prewarmed(self, request: ContextRequest, warm: Any) -> SourceResult:
        """The fetch, from what ``prewarm`` read instead of from the store."""
        if not isinstance(warm, SourceResult):
            raise TypeError(f"{self.type}: pre-warmed {type(warm).__name__}, not a SourceResult")
        return warm

    def fetch_at_once(self, request: ContextRequest) -> SourceResult | None:
        """The fetch, done synchronously on the request's thread (where the tenant's database
        connection is), when this source has its result at hand: a fixed text, one read of the
        tenant's database, a retrieval this process keeps in memory. ``None``, having waited on
        nothing, when it must be fetched on the event loop instead.

        A source answered here costs no trip from the event loop to that thread and back, which
        under load cost more CPU than a cached source's whole fetch. It cannot be cut at its
        deadline (nothing here waits on a peer), so a kind does here only what it would do on
        that thread anyway."""
        return None

    def notes_on_timeout(self) -> dict[str, Any]:
        """The report's notes when the fetch ran out of time (it was cancelled, so it could not
        say)."""
        return {}

    def after_resolve(self, turn: ResolvedTurn) -> bool:
        """Called once the resolve this source served is accepted: queue what the kind does after
        the model's answer. True if it queued something."""
        return False

    @classmethod
    def after_response(cls, resolve_id: str, answer: str) -> bool:
        """Called when the model's answer to a resolve that used this kind is handed back. True if
        the kind acted on it."""
        return False


SOURCE_KINDS: dict[str, type[ContextSource]] = {}


def register_source_kind(source_class: type[ContextSource]) -> type[ContextSource]:
    SOURCE_KINDS[source_class.type] = source_class
    return source_class


def source_kind(type_name: str) -> type[ContextSource] | None:
    return SOURCE_KINDS.get(type_name)


def registered_kinds() -> list[type[ContextSource]]:
    return list(SOURCE_KINDS.values())
