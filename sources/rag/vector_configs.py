"""Settings of the rag backends over vector databases the platform does not own: ``milvus``,
``qdrant`` and ``openai`` (OpenAI vector-store file search), in vLLM Semantic Router's field names.

No engine is imported here (``sources.rag.config`` validates every route with these): the engines
load when a backend is built for a fetch (``milvus.py``, ``qdrant.py``, ``openai_search.py``).

Where a backend connects:
- a URL (``http://``, ``https://``; for Milvus also ``tcp://``): the tenant's own server, reached
  through the outbound guard (its host checked against the tenant's allow-list before connecting);
- a bare name (``docs.db`` for Milvus Lite, ``docs`` for Qdrant's local mode): a file or directory
  of the tenant's own under ``VECTOR_LOCAL_ROOT/<tenant schema>/``, never a path of the tenant's
  choosing on the platform's disk;
- nothing (or ``reuse_cache_connection: true``): the platform's server (``VECTOR_MILVUS_URI``,
  ``VECTOR_QDRANT_URL``), where each tenant's collections are named ``<tenant schema>__<name>``,
  so that no tenant can name another's.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contextplatform.core.outbound.bounded import DEFAULT_MAX_RESPONSE_BYTES
from contextplatform.deployments.schema import checked_base_url
from sources.secret_settings import Secret

FIELD_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,254}$"  # a Milvus field name
PAYLOAD_KEY = r"^[A-Za-z_][A-Za-z0-9_.-]{0,254}$"  # a Qdrant payload key (dots: nested)
COLLECTION_NAME = r"^[A-Za-z_][A-Za-z0-9_-]{0,200}$"
LITE_FILE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,120}\.db$")
LOCAL_DIRECTORY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,120}$")
REMOTE_SCHEMES = ("http://", "https://")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def server_or_local_name(
    value: str | None, schemes: tuple[str, ...], local: re.Pattern[str], refusal: str
) -> str | None:
    """A ``uri``/``url``: none, a server URL in one of ``schemes`` (its form checked as an http(s)
    base URL), or a bare local name matching ``local``, never a path (refused with ``refusal``)."""
    if value is None:
        return None
    if value.lower().startswith(schemes):
        # Milvus' tcp:// is its gRPC address; its form is an http URL's.
        checked_base_url("http://" + value[6:] if value.startswith("tcp://") else value)
        return value
    if local.fullmatch(value) is None or ".." in value:
        raise ValueError(refusal)
    return value


class MilvusConfig(Strict):
    collection: str = Field(pattern=COLLECTION_NAME)
    uri: str | None = Field(
        default=None,
        max_length=2000,
        description="a Milvus server (http://, https://, tcp://) or a Milvus Lite file name "
        "(docs.db); none: the platform's Milvus",
    )
    token: Secret = None
    content_field: str = Field(default="content", pattern=FIELD_NAME)
    metadata_field: str | None = Field(
        default=None,
        pattern=FIELD_NAME,
        description="a JSON field holding each entity's metadata; none: the filter names the "
        "collection's own fields",
    )
    vector_field: str | None = Field(
        default=None, pattern=FIELD_NAME, description="default: the collection's vector field"
    )
    filter_expression: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        description="a Milvus boolean expression, and-ed with the source's filter",
    )
    reuse_cache_connection: bool = Field(
        default=False, description="use the platform's Milvus (VECTOR_MILVUS_URI)"
    )

    @field_validator("uri")
    @classmethod
    def server_or_lite_file(cls, value: str | None) -> str | None:
        return server_or_local_name(
            value,
            (*REMOTE_SCHEMES, "tcp://"),
            LITE_FILE,
            "a Milvus server URL (http://, https://, tcp://) or the name of a Milvus Lite "
            "file such as docs.db (no directory: the platform keeps each tenant's files)",
        )


class QdrantConfig(Strict):
    collection: str = Field(pattern=COLLECTION_NAME)
    url: str | None = Field(
        default=None,
        max_length=2000,
        description="a Qdrant server (http://, https://) or the name of a local-mode directory; "
        "none: the platform's Qdrant",
    )
    api_key: Secret = None
    content_field: str = Field(default="content", pattern=PAYLOAD_KEY)
    metadata_field: str | None = Field(
        default=None,
        pattern=PAYLOAD_KEY,
        description="the payload key holding each point's metadata; none: the filter names "
        "top-level payload keys",
    )
    vector_name: str | None = Field(
        default=None, max_length=255, description="default: the collection's only vector"
    )
    reuse_cache_connection: bool = Field(
        default=False, description="use the platform's Qdrant (VECTOR_QDRANT_URL)"
    )

    @field_validator("url")
    @classmethod
    def server_or_local_directory(cls, value: str | None) -> str | None:
        return server_or_local_name(
            value,
            REMOTE_SCHEMES,
            LOCAL_DIRECTORY,
            "a Qdrant server URL (http://, https://) or the name of a local-mode directory "
            "such as docs (no path: the platform keeps each tenant's directories)",
        )


class OpenAiSearchConfig(Strict):
    vector_store_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,200}$")
    api_key: Secret = None
    base_url: str = Field(default="https://api.openai.com/v1", min_length=1, max_length=2000)
    max_num_results: int | None = Field(
        default=None, ge=1, le=50, description="default: the recall's top_k (at most 50)"
    )
    rewrite_query: bool = False
    ranker: Literal["auto", "default-2024-11-15"] | None = None
    timeout_ms: int = Field(default=5000, ge=1, le=120_000)
    max_response_bytes: int = Field(default=DEFAULT_MAX_RESPONSE_BYTES, ge=0, le=64 * 1024 * 1024)

    @field_validator("base_url")
    @classmethod
    def http_url(cls, value: str) -> str:
        return checked_base_url(value)

    @property
    def response_limit(self) -> int:
        return self.max_response_bytes or DEFAULT_MAX_RESPONSE_BYTES
