"""Embedders: the real local MiniLM, and the remote one against a real HTTP server on loopback."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from sources import embedding
from sources.embedding import (
    EmbeddingError,
    LocalMiniLMEmbedder,
    RemoteEmbedder,
    assemble_model_dir,
    get_embedder,
    reset_embedder,
)
from tests.fake_models import FakeEmbeddings, fake_embeddings

ROOT = Path(__file__).resolve().parents[2]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


@pytest.fixture(autouse=True)
def fresh_embedder() -> Iterator[None]:
    reset_embedder()
    yield
    reset_embedder()


# --- local model -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local() -> LocalMiniLMEmbedder:
    embedder = LocalMiniLMEmbedder()
    embedder.load()
    return embedder


def test_local_model_embeds_unit_vectors_of_384_dimensions(local: LocalMiniLMEmbedder) -> None:
    vectors = local.embed(["The cat sits on the mat.", "Quarterly tax filing deadlines."])
    assert local.identity == "local:all-MiniLM-L6-v2:int8"
    assert local.dimensions == 384
    assert [len(v) for v in vectors] == [384, 384]
    assert all(type(x) is float for x in vectors[0])
    assert all(norm(v) == pytest.approx(1.0, abs=1e-6) for v in vectors)


def test_similar_sentences_are_closer_than_unrelated_ones(local: LocalMiniLMEmbedder) -> None:
    cat, kitten, tax = local.embed(
        [
            "The cat sits on the mat.",
            "A kitten is sitting on a rug.",
            "Quarterly tax filing deadlines for small businesses.",
        ]
    )
    assert cosine(cat, kitten) > 0.5
    assert cosine(cat, kitten) > cosine(cat, tax) + 0.3
    assert cosine(kitten, tax) < 0.3


def test_local_model_is_deterministic_and_batch_size_does_not_matter(
    local: LocalMiniLMEmbedder,
) -> None:
    texts = [f"Document number {i} is about wind tunnels and boundary layers." for i in range(5)]
    first = local.embed(texts)
    again = LocalMiniLMEmbedder(batch_size=2).embed(texts)
    for a, b in zip(first, again, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
    assert local.embed_query(texts[3]) == pytest.approx(first[3], abs=1e-5)
    assert local.embed([]) == []


def test_local_model_refuses_non_text(local: LocalMiniLMEmbedder) -> None:
    with pytest.raises(TypeError):
        local.embed("one string, not a list")
    with pytest.raises(TypeError):
        local.embed([b"bytes"])  # type: ignore[list-item]


def test_get_embedder_defaults_to_the_local_model_once_per_process(settings: Any) -> None:
    settings.EMBEDDING_URL = None
    first = get_embedder()
    assert isinstance(first, LocalMiniLMEmbedder)
    assert get_embedder() is first
    reset_embedder()
    assert get_embedder() is not first


def test_local_model_with_other_dimensions_is_a_configuration_error(settings: Any) -> None:
    settings.EMBEDDING_URL = None
    settings.EMBEDDING_DIMENSIONS = 768
    with pytest.raises(ImproperlyConfigured):
        get_embedder()


def test_offline_flag_is_set_for_the_hub(local: LocalMiniLMEmbedder) -> None:
    import os

    assert os.environ.get("HF_HUB_OFFLINE") == "1"


# --- assembling the model folder ---------------------------------------------------------------


def test_model_folder_is_assembled_with_the_checked_onnx_file(tmp_path: Path) -> None:
    folder = assemble_model_dir(tmp_path / "minilm")
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted([*embedding.TOKENIZER_FILES, "model.onnx", "MANIFEST.json"])
    digest = hashlib.sha256((folder / "model.onnx").read_bytes()).hexdigest()
    assert digest == embedding.LOCAL_MODEL_SHA256
    stamp = (folder / "model.onnx").stat().st_mtime_ns
    assert assemble_model_dir(folder) == folder  # idempotent: nothing rebuilt
    assert (folder / "model.onnx").stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == ["minilm"]  # no staging left behind


def test_a_stale_model_folder_is_replaced(tmp_path: Path) -> None:
    folder = tmp_path / "minilm"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"not a model")
    (folder / "MANIFEST.json").write_text("{}")
    assemble_model_dir(folder)
    digest = hashlib.sha256((folder / "model.onnx").read_bytes()).hexdigest()
    assert digest == embedding.LOCAL_MODEL_SHA256
    assert [p.name for p in tmp_path.iterdir()] == ["minilm"]


def test_concurrent_assembly_by_threads_and_processes(tmp_path: Path) -> None:
    folder = tmp_path / "minilm"
    script = f"from pathlib import Path; from sources.embedding import assemble_model_dir as a; a(Path({str(folder)!r}))"
    processes = [
        subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    errors: list[BaseException] = []

    def build() -> None:
        try:
            assemble_model_dir(folder)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for process in processes:
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr.decode()
    assert errors == []
    assert embedding._is_complete(folder, json.loads((folder / "MANIFEST.json").read_text()))
    assert [p.name for p in tmp_path.iterdir()] == ["minilm"]


# --- remote embedder against a loopback server -------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeEmbeddings]:
    with fake_embeddings() as played:
        yield played


def remote(fake: FakeEmbeddings, **kwargs: Any) -> RemoteEmbedder:
    options: dict[str, Any] = {
        "api_key": "sk-test",
        "dimensions": fake.dimensions,
        "timeout_s": 2.0,
    }
    options.update(kwargs)
    url = options.pop("url", fake.url)
    return RemoteEmbedder(url, "fake-embed", **options)


def test_remote_embeds_normalises_and_sends_the_key(fake: FakeEmbeddings) -> None:
    embedder = remote(fake)
    vectors = embedder.embed(["alpha", "beta"])
    assert len(vectors) == 2
    assert all(norm(v) == pytest.approx(1.0, abs=1e-9) for v in vectors)
    expected = fake.vector("alpha")
    assert vectors[0] == pytest.approx([x / norm(expected) for x in expected])
    (request,) = fake.requests
    assert request.path == "/v1/embeddings"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body == {"model": "fake-embed", "input": ["alpha", "beta"]}
    port = fake.url.rsplit(":", 1)[1]
    assert embedder.identity == f"remote:fake-embed@127.0.0.1:{port}"
    assert "sk-test" not in repr(embedder)


@pytest.mark.parametrize("suffix", ["/v1", "/v1/", "/"])
def test_remote_accepts_the_url_with_or_without_v1(fake: FakeEmbeddings, suffix: str) -> None:
    embedder = remote(fake, url=fake.url + suffix)
    embedder.embed_query("alpha")
    assert fake.requests[-1].path == "/v1/embeddings"
    assert embedder.identity == remote(fake).identity


def test_remote_batches_and_keeps_the_order(fake: FakeEmbeddings) -> None:
    texts = [f"text {i}" for i in range(5)]
    vectors = remote(fake, batch_size=2).embed(texts)
    assert [len(r.body["input"]) for r in fake.requests] == [2, 2, 1]
    assert vectors == remote(fake).embed(texts)
    assert remote(fake).embed([]) == []


def test_remote_follows_the_index_field(fake: FakeEmbeddings) -> None:
    expected = remote(fake).embed(["a", "b", "c"])
    fake.mode = "shuffled"
    assert remote(fake).embed(["a", "b", "c"]) == expected


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("wrong_count", "2 embeddings for 3 inputs"),
        ("wrong_dims", "7 dimensions, expected 8"),
        ("strings", "not a list of floats"),
        ("non_json", "non-JSON"),
        ("error", "HTTP 500"),
    ],
)
def test_remote_refuses_bad_answers(fake: FakeEmbeddings, mode: str, message: str) -> None:
    fake.mode = mode
    with pytest.raises(EmbeddingError, match=message):
        remote(fake).embed(["a", "b", "c"])


def test_remote_times_out(fake: FakeEmbeddings) -> None:
    fake.mode = "slow"
    started = time.perf_counter()
    with pytest.raises(EmbeddingError, match="timed out after 200 ms"):
        remote(fake, timeout_s=0.2).embed(["a"])
    assert time.perf_counter() - started < 0.9


def test_a_query_asked_for_at_once_is_embedded_once(fake: FakeEmbeddings) -> None:
    fake.mode = "delayed"  # the first answer takes a while: the others ask while it is pending
    embedder = remote(fake)
    query = "Where is my parcel?"
    answers: list[list[float]] = []
    threads = [
        threading.Thread(target=lambda: answers.append(embedder.embed_query(query)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(fake.requests) == 1 and len(answers) == 4
    assert all(answer == answers[0] for answer in answers)
    answers[0][0] = 99.0  # each caller has its own list: the remembered vector is unchanged
    assert embedder.embed_query(query) == answers[1] and len(fake.requests) == 1
    remote(fake).embed_query(query)  # another embedder remembers on its own
    assert len(fake.requests) == 2
    fake.mode = "error"
    with pytest.raises(EmbeddingError):
        embedder.embed_query("Refund?")
    fake.mode = "ok"  # a failure is not remembered
    assert len(embedder.embed_query("Refund?")) == fake.dimensions and len(fake.requests) == 4


def test_remote_unreachable_is_an_embedding_error(fake: FakeEmbeddings) -> None:
    url = fake.url
    fake.stop()
    with pytest.raises(EmbeddingError, match="unreachable"):
        remote(fake, url=url).embed(["a"])


def test_get_embedder_uses_the_remote_settings(settings: Any, fake: FakeEmbeddings) -> None:
    settings.EMBEDDING_URL = fake.url + "/v1"
    settings.EMBEDDING_MODEL = "fake-embed"
    settings.EMBEDDING_API_KEY = "sk-settings"
    settings.EMBEDDING_DIMENSIONS = fake.dimensions
    settings.EMBEDDING_TIMEOUT_MS = 1500
    embedder = get_embedder()
    assert isinstance(embedder, RemoteEmbedder)
    assert embedder.timeout_s == 1.5
    assert len(embedder.embed_query("hello")) == fake.dimensions
    assert fake.requests[-1].headers["authorization"] == "Bearer sk-settings"


def test_remote_without_a_model_is_a_configuration_error(settings: Any) -> None:
    settings.EMBEDDING_URL = "http://127.0.0.1:9/v1"
    settings.EMBEDDING_MODEL = ""
    with pytest.raises(ImproperlyConfigured):
        get_embedder()


def test_settings_defaults() -> None:
    assert django_settings.EMBEDDING_DIMENSIONS == 384
    assert django_settings.EMBEDDING_TIMEOUT_MS == 10000
    assert django_settings.EMBEDDING_BATCH_SIZE == 32
