"""The local embedder batches texts by length (less padding) and gives the vectors back in the
caller's order, the same as each text embedded alone; its lock is held one batch at a time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from sources import embedding
from sources.embedding import LocalMiniLMEmbedder, by_length


def test_by_length_batches_positions_shortest_first() -> None:
    texts = ["ccc", "a", "bbbbb", "dd", "e", "ffff"]
    assert by_length(texts, 2) == [[1, 4], [3, 0], [5, 2]]
    assert by_length(texts, 10) == [[1, 4, 3, 0, 5, 2]]
    assert by_length([], 4) == []


class RecordingLock:
    """The model's lock, logging when it is taken and given back."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def __enter__(self) -> None:
        self.log.append("lock")

    def __exit__(self, *_: object) -> None:
        self.log.append("unlock")


class FakeModel:
    """Stands for fastembed's model: a text's vector is its length and its first letter."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.calls: list[tuple[list[str], int]] = []

    def embed(self, texts: Sequence[str], batch_size: int) -> Iterator[np.ndarray]:
        self.log.append("embed")
        self.calls.append((list(texts), batch_size))
        for text in texts:
            yield np.array([float(len(text)), float(ord(text[0])), *([1.0] * 382)])


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> tuple[LocalMiniLMEmbedder, FakeModel]:
    log: list[str] = []
    model = FakeModel(log)
    loaded = embedding._LoadedModel(model)
    loaded.lock = RecordingLock(log)  # type: ignore[assignment]
    embedder = LocalMiniLMEmbedder(batch_size=2)
    monkeypatch.setattr(embedder, "_loaded", lambda: loaded)
    return embedder, model


def test_texts_are_embedded_by_length_and_come_back_in_order(
    fake: tuple[LocalMiniLMEmbedder, FakeModel],
) -> None:
    embedder, model = fake
    texts = ["cccc", "a", "bbbbbbbb", "dd", "eee"]
    vectors = embedder.embed(texts)
    assert model.calls == [(["a", "dd"], 2), (["eee", "cccc"], 2), (["bbbbbbbb"], 1)]
    raw = np.array([[len(t), ord(t[0]), *([1.0] * 382)] for t in texts])
    expected = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    np.testing.assert_allclose(np.array(vectors), expected)


def test_the_lock_is_held_one_batch_at_a_time(fake: tuple[LocalMiniLMEmbedder, FakeModel]) -> None:
    """A query (another thread's embed) gets the model between two batches of a long embed."""
    embedder, model = fake
    embedder.embed(["a", "bb", "ccc", "dddd", "eeeee"])
    assert model.log == ["lock", "embed", "unlock"] * 3


def test_real_model_vectors_match_each_text_alone() -> None:
    """Texts of very different lengths batched together: each vector is the one the text gets
    alone (within float tolerance), in the caller's order."""
    texts = [
        " ".join(["Heat transfer near the leading edge of a flat plate."] * 20),
        "Wind tunnels.",
        "Shock waves interact with the boundary layer on a cone at incidence.",
        " ".join(["Buckling of thin cylindrical shells under axial compression."] * 8),
        "Flutter.",
    ]
    model = LocalMiniLMEmbedder(batch_size=2)
    together = np.array(model.embed(texts))
    alone = np.array([model.embed([text])[0] for text in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)
