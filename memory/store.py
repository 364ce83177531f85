"""The one interface every memory store answers: recall, write, list, erase.

The ``memory`` source, the REST API and the benches reach a user's memories only through
``MemoryStore`` (``memory.stores.get_store``), so another backend (Milvus, Qdrant) is one more
implementation beside ``memory.stores.postgres`` and nothing above it changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from memory.models import Memory
    from memory.selectors import MemoryHit, MemoryPage
    from sources.embedding import Embedder

RecallMode = Literal["dense", "lexical", "hybrid"]
RECALL_MODES: tuple[str, ...] = ("dense", "lexical", "hybrid")
Fusion = Literal["weighted", "rrf"]


class MemoryStore(Protocol):
    """One user's memories. Every method names the user; none reads or writes another's."""

    name: str

    def recall(
        self,
        user_id: str,
        query: str,
        vector: Sequence[float],
        limit: int,
        *,
        mode: RecallMode = "hybrid",
        min_similarity: float = -1.0,
        fusion: Fusion | None = None,
        as_of: datetime | None = None,
    ) -> list[MemoryHit]:
        """The user's live memories most relevant to ``query`` (embedded as ``vector``), best
        first, at most ``limit``. ``dense``: by cosine, each at ``min_similarity`` or above;
        ``lexical``: by full text over any of the query's words; ``hybrid``: both fused, where
        ``min_similarity`` drops only what the text search did not find. ``fusion`` asks for the
        classic hybrid (the embedding pool with its text rank, the threshold on every candidate,
        ``weighted`` or ``rrf``) instead. ``as_of``: the memories as they were then."""
        ...

    def newest(self, user_id: str, limit: int, as_of: datetime | None = None) -> list[MemoryHit]:
        """The user's newest live memories."""
        ...

    def write(self, *, user_id: str, content: str, embedder: Embedder, **fields: Any) -> Memory:
        """Store one memory of the user (fields as ``memory.services.create_memory`` takes)."""
        ...

    def list(
        self, user_id: str, q: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> MemoryPage:
        """One page of the user's memories, newest first."""
        ...

    def erase(self, user_id: str) -> int:
        """Delete every memory of the user; the count deleted."""
        ...
