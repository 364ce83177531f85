"""The compression engine: segments → rank → shrink the least relevant first → rewrite.

INTERFACE — being implemented. Pure (no Django); persistence of recovery originals goes through the
``RecoveryWriter`` the caller passes in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from compression.config import CompressConfig
from compression.estimation import TokenEstimator

RETRIEVE_TOOL_NAME = "vsr_context_retrieve"


class ContextLengthExceeded(Exception):
    """Protected content cannot fit the budget; the request must be refused with 400 and nothing
    rewritten. ``tokens`` and ``budget`` say by how much."""

    def __init__(self, message: str, *, tokens: int, budget: int):
        super().__init__(message)
        self.tokens = tokens
        self.budget = budget


class CompressionFailed(Exception):
    """A rewrite failed (recovery store refused, tool name clash, …): fail_open sends the request
    uncompressed, fail_closed refuses it."""


class RecoveryWriter(Protocol):
    def store(self, originals: Sequence[tuple[str, str]]) -> None:
        """Persist (key, original text) pairs for this request; raise CompressionFailed on limits."""


# Scores blocks for the judge stage: (query, texts) -> one score in [0, 1] per text. Raises on failure.
BlockJudge = Callable[[str, list[str]], list[float]]


@dataclass
class Provenance:
    """Tool-call ids of the exchanges the platform injected, so their results are rag/memory blocks."""

    rag_call_ids: frozenset[str] = frozenset()
    memory_call_ids: frozenset[str] = frozenset()


@dataclass
class BlockReport:
    message_index: int
    block_index: int
    kind: Literal["tool_output", "history", "rag", "memory", "current_user"]
    mode: str
    original_tokens: int
    target_tokens: int
    final_tokens: int
    score: float | None
    omitted_chunks: int
    format: str


@dataclass
class CompressionResult:
    body: dict[str, Any]  # the rewritten body (a copy), or the input when not applied
    applied: bool
    tokens_before: int
    tokens_after: int
    target_request_tokens: int
    skip_reason: str | None  # no_targets, below_trigger, budget_not_reduced, bypassed, ...
    quality: str  # budget_met | budget_partial | rejected_non_reducing | not_applied
    trigger: str | None  # always | context_window | item_threshold
    blocks: list[BlockReport] = field(default_factory=list)
    omitted_chunks: int = 0
    recovery_keys: list[str] = field(default_factory=list)  # never reported outward, only counted
    warnings: list[str] = field(default_factory=list)


def compress_request(
    body: dict[str, Any],
    chat_format: Literal["openai", "anthropic"],
    config: CompressConfig,
    *,
    max_input_tokens: int,
    estimator: TokenEstimator,
    provenance: Provenance | None = None,
    judge: BlockJudge | None = None,
    recovery: RecoveryWriter | None = None,
    recovery_scope: str = "",
    request_target_tokens: int | None = None,
) -> CompressionResult:
    """Fit ``body`` into ``max_input_tokens`` (or ``request_target_tokens`` if smaller, from a
    request control). Raises ContextLengthExceeded (nothing rewritten) or CompressionFailed."""
    raise NotImplementedError
