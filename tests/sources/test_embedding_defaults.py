"""Thresholds belong to the embedder: each embedder declares the defaults a route leaves unwritten
(the local model's measured constants; a remote deployment's from its settings, else the platform
fallback), and the match block's resolution says which applied and where it came from."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from sources import embedding
from sources.embedding import (
    FALLBACK_DEFAULTS,
    LOCAL_DEFAULTS,
    PLATFORM_FALLBACK,
    LocalMiniLMEmbedder,
    RemoteEmbedder,
    get_embedder,
    reset_embedder,
)
from sources.matching import RecallConfig, default_match, memory_recall, rag_recall
from tests.fake_models import FakeEmbeddings, fake_embeddings


@pytest.fixture(autouse=True)
def fresh_embedder() -> Iterator[None]:
    reset_embedder()
    yield
    reset_embedder()


@pytest.fixture
def fake() -> Iterator[FakeEmbeddings]:
    with fake_embeddings() as played:
        yield played


def remote_settings(settings: Any, fake: FakeEmbeddings) -> None:
    settings.EMBEDDING_URL = fake.url
    settings.EMBEDDING_MODEL = "fake-embed"
    settings.EMBEDDING_DIMENSIONS = fake.dimensions


def test_the_local_model_declares_its_measured_defaults() -> None:
    local = get_embedder()
    assert isinstance(local, LocalMiniLMEmbedder)
    assert local.defaults is LOCAL_DEFAULTS
    assert local.defaults.rag_min_similarity == embedding.LOCAL_RAG_MIN_SIMILARITY
    assert local.defaults.memory_similarity_threshold == embedding.LOCAL_MEMORY_MIN_SIMILARITY
    assert local.defaults.memory_retrieval_limit == embedding.LOCAL_MEMORY_TOP_K
    # measured for this model, not the seed's generic 0.7 (which recalls nothing with it)
    assert local.defaults.memory_similarity_threshold < 0.7
    origin = local.defaults.origin_of("memory_similarity_threshold")
    assert local.identity in origin and "scripts/measure_memory_defaults.py" in origin


def test_the_remote_embedder_takes_its_defaults_from_the_deployments_settings(
    settings: Any, fake: FakeEmbeddings
) -> None:
    remote_settings(settings, fake)
    settings.EMBEDDING_RAG_MIN_SIMILARITY = 0.55
    settings.EMBEDDING_MEMORY_MIN_SIMILARITY = 0.62
    settings.EMBEDDING_MEMORY_TOP_K = 8
    remote = get_embedder()
    assert isinstance(remote, RemoteEmbedder)
    defaults = remote.defaults
    assert (defaults.rag_min_similarity, defaults.memory_similarity_threshold) == (0.55, 0.62)
    assert defaults.memory_retrieval_limit == 8
    assert defaults.origin_of("rag_min_similarity") == "settings EMBEDDING_* of the remote embedder"

    applied = memory_recall(RecallConfig(), remote)
    assert (applied.min_similarity, applied.top_k) == (0.62, 8)
    assert applied.notes() == {
        "min_similarity": 0.62,
        "min_similarity_from": "embedder",
        "top_k": 8,
        "top_k_from": "embedder",
        "embedder": remote.identity,
        "embedder_defaults": "settings EMBEDDING_* of the remote embedder",
    }
    assert rag_recall(RecallConfig(), remote).min_similarity == 0.55


def test_a_remote_embedder_without_the_settings_is_on_the_platform_fallback(
    settings: Any, fake: FakeEmbeddings
) -> None:
    remote_settings(settings, fake)
    settings.EMBEDDING_MEMORY_TOP_K = 3  # only this one written
    defaults = get_embedder().defaults
    assert defaults.rag_min_similarity == FALLBACK_DEFAULTS.rag_min_similarity == 0.3
    assert defaults.memory_similarity_threshold == 0.7 and defaults.memory_retrieval_limit == 3
    assert defaults.origin_of("memory_similarity_threshold") == PLATFORM_FALLBACK
    assert defaults.origin_of("memory_retrieval_limit") != PLATFORM_FALLBACK
    notes = memory_recall(RecallConfig(), get_embedder()).notes()
    assert notes["embedder_defaults"] == (
        f"{PLATFORM_FALLBACK}; settings EMBEDDING_* of the remote embedder"
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("EMBEDDING_RAG_MIN_SIMILARITY", 1.5),
        ("EMBEDDING_MEMORY_MIN_SIMILARITY", -2.0),
        ("EMBEDDING_MEMORY_TOP_K", 0),
    ],
)
def test_remote_defaults_out_of_range_are_a_configuration_error(
    settings: Any, fake: FakeEmbeddings, name: str, value: float
) -> None:
    remote_settings(settings, fake)
    setattr(settings, name, value)
    with pytest.raises(ImproperlyConfigured, match=name):
        get_embedder()


def test_the_remote_settings_are_refused_for_the_local_model(settings: Any) -> None:
    settings.EMBEDDING_MEMORY_MIN_SIMILARITY = 0.4  # would silently do nothing
    with pytest.raises(ImproperlyConfigured, match="EMBEDDING_MEMORY_MIN_SIMILARITY"):
        get_embedder()


def test_the_settings_are_unset_by_default() -> None:
    assert django_settings.EMBEDDING_RAG_MIN_SIMILARITY is None
    assert django_settings.EMBEDDING_MEMORY_MIN_SIMILARITY is None
    assert django_settings.EMBEDDING_MEMORY_TOP_K is None


def test_a_written_value_wins_and_the_store_before_the_embedder() -> None:
    local = LocalMiniLMEmbedder()
    written = memory_recall(RecallConfig(top_k=2, min_similarity=0.9), local, store_threshold=0.1)
    assert (written.min_similarity, written.min_similarity_from) == (0.9, "route")
    assert (written.top_k, written.top_k_from) == (2, "route")
    assert "embedder_defaults" not in written.notes()  # nothing came from the embedder

    store = memory_recall(RecallConfig(), local, store_threshold=0.45, store_limit=7)
    assert (store.min_similarity, store.min_similarity_from) == (0.45, "store")
    assert (store.top_k, store.top_k_from) == (7, "store")

    half = memory_recall(RecallConfig(min_similarity=0.5), local)
    assert half.min_similarity_from == "route" and half.top_k_from == "embedder"
    assert half.top_k == LOCAL_DEFAULTS.memory_retrieval_limit


def test_a_rag_recall_follows_the_embedder_whose_cosines_it_cuts() -> None:
    local = LocalMiniLMEmbedder()
    recall = default_match().recall
    assert recall is not None and recall.min_similarity is None and recall.top_k is None
    ours = rag_recall(recall, local)
    assert (ours.min_similarity, ours.min_similarity_from) == (
        LOCAL_DEFAULTS.rag_min_similarity,
        "embedder",
    )
    assert (ours.top_k, ours.top_k_from) == (20, "platform")
    assert ours.on(recall).min_similarity == ours.min_similarity  # what the backends read
    # An external service's scores are its own model's: the platform's generic threshold.
    theirs = rag_recall(recall, None)
    assert (theirs.min_similarity, theirs.min_similarity_from) == (0.3, "platform")
    assert "embedder" not in theirs.notes()
    assert rag_recall(RecallConfig(min_similarity=-1.0), local).min_similarity_from == "route"


def test_unwritten_values_stay_unwritten_in_the_block() -> None:
    """A route's representation and export must not start writing values the user did not."""
    assert RecallConfig().model_dump(exclude_unset=True) == {}
    assert RecallConfig.model_validate({"method": "embedding"}).model_dump(exclude_unset=True) == {
        "method": "embedding"
    }
    with pytest.raises(ValueError):
        RecallConfig(min_similarity=1.5)  # written values are validated as before
    with pytest.raises(ValueError):
        RecallConfig(top_k=0)
