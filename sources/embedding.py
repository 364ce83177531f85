"""Embedders behind one interface: the local MiniLM (default) or a remote OpenAI-compatible API.

INTERFACE ONLY — being implemented. A collection records ``Embedder.identity`` and refuses to be
queried or filled by an embedder with another identity.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence


class EmbeddingError(Exception):
    """The embedder could not embed (model missing, remote error, timeout, bad answer)."""


class Embedder(ABC):
    identity: str  # e.g. "local:all-MiniLM-L6-v2:int8" or "remote:<model>@<url>"
    dimensions: int

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-length vectors, one per text, in order."""

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0]


def get_embedder() -> Embedder:
    """The process's embedder, chosen by settings (EMBEDDING_URL unset → local), loaded once."""
    raise NotImplementedError
