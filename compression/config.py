"""The ``compress`` block of a route's context configuration (defaults as in vLLM Semantic
Router's context compression)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

TargetKind = Literal["tool_outputs", "history", "rag", "memory", "current_user"]
TARGET_KINDS: tuple[TargetKind, ...] = ("tool_outputs", "history", "rag", "memory", "current_user")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CompressTarget(Strict):
    mode: Literal["preserve", "extractive", "truncate", "recoverable"] = "preserve"
    min_tokens: int = Field(default=2000, ge=1, le=10_000_000)
    target_tokens: int | None = Field(
        default=None, ge=1, le=10_000_000, description="default: min_tokens / 2"
    )

    @model_validator(mode="after")
    def target_below_min(self) -> CompressTarget:
        if self.target_tokens is not None and self.target_tokens >= self.min_tokens:
            raise ValueError("target_tokens must be lower than min_tokens")
        return self

    @property
    def effective_target(self) -> int:
        return (
            self.target_tokens if self.target_tokens is not None else max(1, self.min_tokens // 2)
        )


class CompressTargets(Strict):
    tool_outputs: CompressTarget = Field(
        default_factory=lambda: CompressTarget(
            mode="extractive", min_tokens=2000, target_tokens=1000
        )
    )
    history: CompressTarget = Field(default_factory=CompressTarget)
    rag: CompressTarget = Field(default_factory=CompressTarget)
    memory: CompressTarget = Field(default_factory=CompressTarget)
    current_user: CompressTarget = Field(default_factory=CompressTarget)

    @model_validator(mode="after")
    def modes_fit_their_targets(self) -> CompressTargets:
        if self.current_user.mode not in {"preserve", "truncate"}:
            raise ValueError("current_user.mode must be preserve or truncate")
        for kind in ("tool_outputs", "history", "rag", "memory"):
            if getattr(self, kind).mode == "truncate":
                raise ValueError(f"{kind}.mode: truncate is only for current_user")
        return self

    def of(self, kind: TargetKind) -> CompressTarget:
        target: CompressTarget = getattr(self, kind)
        return target


class CompressRecall(Strict):
    method: Literal["bm25"] = "bm25"


class CompressJudge(Strict):
    preset: Literal["relevance"] = "relevance"
    max_candidates: int = Field(default=64, ge=1, le=256)
    deployment: str | None = None


class CompressMatch(Strict):
    """By default BM25 ranks the segments and one judge call scores the best 64; ``{recall:
    {method: bm25}}`` alone ranks lexically, with no call."""

    recall: CompressRecall | None = None
    judge: CompressJudge | None = None


class RecoveryConfig(Strict):
    ttl_seconds: int = Field(default=900, ge=1, le=7 * 24 * 3600)
    max_bytes_per_request: int = Field(default=10 * 1024 * 1024, ge=1)
    max_total_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    max_retrievals: int = Field(default=8, ge=1, le=1000)


class RequestControls(Strict):
    enabled: bool = False
    header: str = "x-vsr-compression-control"
    allowed: list[Literal["bypass", "target"]] = Field(default_factory=list)
    max_target_tokens: int = Field(default=16_000, ge=0)


Profile = Literal["default", "coding", "medical", "security", "multi_turn"]


class SignalsConfig(Strict):
    enabled: bool = True
    max_tokens: int = Field(default=4096, ge=1)
    min_length: int = Field(
        default=512, ge=0, description="characters; this long or shorter is kept whole"
    )
    profile: Profile = "default"
    skip_signals: list[str] = Field(default_factory=lambda: ["jailbreak", "pii"])
    textrank_weight: float | None = Field(default=None, ge=0)
    position_weight: float | None = Field(default=None, ge=0)
    tfidf_weight: float | None = Field(default=None, ge=0)
    novelty_weight: float | None = Field(default=None, ge=0)
    position_depth: float | None = Field(default=None, ge=0, le=1)
    preserve_first_n: int | None = Field(default=None, ge=0)
    preserve_last_n: int | None = Field(default=None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def normalise_profile(cls, data: object) -> object:
        if isinstance(data, dict) and isinstance(data.get("profile"), str):
            data = {**data, "profile": data["profile"].strip().lower().replace("-", "_")}
        return data


class CompressConfig(Strict):
    mode: Literal["auto", "always"] = "auto"
    targets: CompressTargets = Field(default_factory=CompressTargets)
    match: CompressMatch | None = None
    failure_mode: Literal["fail_open", "fail_closed"] = "fail_open"
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig)
    request_controls: RequestControls = Field(default_factory=RequestControls)
    signals: SignalsConfig | None = None

    @property
    def compresses_request(self) -> bool:
        """A block with only ``signals`` leaves the request whole."""
        return (
            "targets" in self.model_fields_set
            or "mode" in self.model_fields_set
            or ("signals" not in self.model_fields_set)
        )
