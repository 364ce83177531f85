"""Settings of the ``rag`` source kind, per backend.

The field names and defaults are those of vLLM Semantic Router's RAG sources: without a match
block, recall 20 documents with a similarity of at least 0.3 and keep the judge's best 6 scoring at
least 0.5; at most 10,000 characters of context; cached results live an hour; an external API's
answer is read up to 4 MiB. docs/configuration.md ("RAG sources") describes each field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contextplatform.core.outbound.bounded import DEFAULT_MAX_RESPONSE_BYTES
from contextplatform.core.validation import describe
from sources.base import SourceSettings
from sources.matching import MatchConfig
from sources.mcp_config import McpBackendConfig
from sources.rag.vector_configs import MilvusConfig, OpenAiSearchConfig, QdrantConfig
from sources.secret_settings import (
    Path,
    SecretHeaders,
    header_paths,
    register_secret_locator,
    secret_fields,
    secret_header_fields,
)

Backend = Literal["vectorstore", "external_api", "hybrid", "milvus", "qdrant", "openai", "mcp"]
# Backends over another vector database: they recall by embedding (theirs or the platform's).
EXTERNAL_BACKENDS = {"external_api", "milvus", "qdrant", "openai", "mcp"}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VectorstoreConfig(Strict):
    collection: str | None = Field(default=None, min_length=1, max_length=100)
    collections: list[str] | None = Field(default=None, min_length=1, max_length=20)

    @model_validator(mode="after")
    def one_target(self) -> VectorstoreConfig:
        if (self.collection is None) == (self.collections is None):
            raise ValueError("set either collection or collections")
        return self

    @property
    def names(self) -> list[str]:
        return [self.collection] if self.collection else list(self.collections or [])


class ResponseMapping(Strict):
    documents_path: str = Field(
        default="", description="dotted path to the list of hits; empty: the body"
    )
    text_path: str = "text"
    title_path: str | None = "title"
    id_path: str | None = "id"
    score: Literal["pinecone", "weaviate", "elasticsearch", "custom", "none"] = "none"
    score_path: str | None = None

    @model_validator(mode="after")
    def custom_needs_path(self) -> ResponseMapping:
        if self.score == "custom" and not self.score_path:
            raise ValueError("score: custom needs score_path")
        return self


class ExternalApiConfig(Strict):
    endpoint: str = Field(min_length=1, max_length=2000)
    method: Literal["POST", "GET"] = "POST"
    headers: SecretHeaders = Field(
        default_factory=dict, description="values write-only, stored encrypted"
    )
    request_format: Any = Field(
        default_factory=lambda: {"query": "{{query}}", "top_k": "{{top_k}}"},
        description='JSON body template; "{{query}}", "{{top_k}}" and "{{filter}}" are filled in',
    )
    response: ResponseMapping = Field(default_factory=ResponseMapping)
    timeout_ms: int = Field(default=5000, ge=1, le=120_000)
    max_response_bytes: int = Field(default=DEFAULT_MAX_RESPONSE_BYTES, ge=0, le=64 * 1024 * 1024)

    @property
    def response_limit(self) -> int:
        return self.max_response_bytes or DEFAULT_MAX_RESPONSE_BYTES


class BackendSpec(Strict):
    backend: Literal["vectorstore", "external_api", "milvus", "qdrant", "openai", "mcp"]
    backend_config: dict[str, Any]

    @model_validator(mode="after")
    def valid_config(self) -> BackendSpec:
        validate_backend_config(self.backend, self.backend_config)
        return self


class HybridConfig(Strict):
    primary: BackendSpec
    fallback: BackendSpec | None = None
    strategy: Literal["sequential", "parallel"] = "sequential"


BACKEND_CONFIGS: dict[str, type[BaseModel]] = {
    "vectorstore": VectorstoreConfig,
    "external_api": ExternalApiConfig,
    "hybrid": HybridConfig,
    "milvus": MilvusConfig,
    "qdrant": QdrantConfig,
    "openai": OpenAiSearchConfig,
    "mcp": McpBackendConfig,
}


def validate_backend_config(backend: str, config: dict[str, Any]) -> BaseModel:
    """Validate one backend's config; errors become one line naming the field inside it."""
    try:
        return BACKEND_CONFIGS[backend].model_validate(config)
    except ValidationError as error:
        message, _ = describe(error, "backend_config")
        raise ValueError(message) from None


class RagSettings(SourceSettings):
    type: Literal["rag"] = "rag"
    priority: int = Field(default=30, ge=0, le=1000)
    backend: Backend = "vectorstore"
    backend_config: dict[str, Any]
    match: MatchConfig | None = None
    filter: dict[str, Any] | None = None
    max_context_length: int = Field(default=10_000, ge=1, le=1_000_000, description="characters")
    cache_results: bool = False
    cache_ttl_seconds: int = Field(default=3600, ge=1, le=30 * 24 * 3600)
    # Not fetched before the call: the gateway offers the model a search_<name> tool instead and
    # serves its calls through this source (a resolve for an application fetches it as usual).
    lazy: bool = False

    @model_validator(mode="after")
    def valid_backend(self) -> RagSettings:
        config = validate_backend_config(self.backend, self.backend_config)
        recall = self.match.recall if self.match else None
        over_external = self.backend in EXTERNAL_BACKENDS or (
            isinstance(config, HybridConfig)
            and bool(
                EXTERNAL_BACKENDS
                & {config.primary.backend, config.fallback.backend if config.fallback else ""}
            )
        )
        if recall is not None and recall.method != "embedding" and over_external:
            raise ValueError("a source over an external vector database recalls by embedding")
        return self

    def backend_settings(self) -> BaseModel:
        return validate_backend_config(self.backend, self.backend_config)


def backend_secret_paths(backend: Any, config: Any, at: Path) -> list[Path]:
    """Where a backend's config keeps its secrets (``Secret`` fields), a hybrid's in its parts."""
    if not isinstance(config, dict) or not isinstance(backend, str):
        return []
    if backend == "hybrid":
        return [
            path
            for part in ("primary", "fallback")
            if isinstance(config.get(part), dict)
            for path in backend_secret_paths(
                config[part].get("backend"),
                config[part].get("backend_config"),
                (*at, part, "backend_config"),
            )
        ]
    model = BACKEND_CONFIGS.get(backend)
    if model is None:
        return []
    return [(*at, name) for name in secret_fields(model)] + [
        path
        for name in secret_header_fields(model)
        for path in header_paths(config.get(name), (*at, name))
    ]


register_secret_locator(
    "rag",
    lambda source: backend_secret_paths(
        source.get("backend", "vectorstore"), source.get("backend_config"), ("backend_config",)
    ),
)
