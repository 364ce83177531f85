"""The ``external_api`` backend: any search service with its own HTTP contract.

The request body is a JSON template; the answer is mapped by dotted paths. Each document keeps the
score the service gives (Pinecone ``score``, Weaviate ``1 - distance``, Elasticsearch ``_score``, or a
custom path); a document without one counts as similarity 1. Outbound requests go through the
tenant's SSRF guard, bounded by ``max_response_bytes`` and a timeout.

The timeout bounds the whole exchange (connection, sending, every read of a trickling answer), not
each step as httpx's own timeouts do, and it is the backend's ``timeout_ms`` or what is left of the
source's deadline, whichever is shorter: a backend cannot extend its source's deadline, and a
retrieval it cuts is a ``BackendTimeout`` (the source reports ``timeout``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from contextplatform.core.outbound.httpx_client import fetch_json_limited, guarded_async_client
from contextplatform.core.outbound.policy import OutboundError
from sources import fetch_deadline
from sources.rag.backends import BackendError, BackendTimeout, RagBackend, RetrievalRequest
from sources.rag.config import ExternalApiConfig, ResponseMapping
from sources.recall import RecallHit
from sources.secret_settings import SecretUnavailable, revealed_headers

DEFAULT_SCORE_PATHS = {
    "pinecone": "score",
    "weaviate": "_additional.distance",
    "elasticsearch": "_score",
}
MISSING = object()


def fill_template(template: Any, values: dict[str, Any]) -> Any:
    """``"{{query}}"`` alone becomes the value itself (so ``{{top_k}}`` stays a number); inside a
    longer string it is replaced as text."""
    if isinstance(template, dict):
        return {key: fill_template(value, values) for key, value in template.items()}
    if isinstance(template, list):
        return [fill_template(value, values) for value in template]
    if isinstance(template, str):
        for name, value in values.items():
            marker = "{{" + name + "}}"
            if template == marker:
                return value
            if marker in template:
                template = template.replace(
                    marker, value if isinstance(value, str) else json.dumps(value)
                )
        return template
    return template


def dig(value: Any, path: str | None) -> Any:
    if not path:
        return value
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING
    return value


def similarity(document: Any, mapping: ResponseMapping) -> float:
    if mapping.score == "none":
        return 1.0
    path = mapping.score_path or DEFAULT_SCORE_PATHS.get(mapping.score)
    raw = dig(document, path)
    if raw is MISSING or raw is None or isinstance(raw, bool) or not isinstance(raw, int | float):
        return 1.0
    return 1.0 - float(raw) if mapping.score == "weaviate" else float(raw)


def as_text(value: Any) -> str:
    if value is MISSING or value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def map_documents(body: Any, mapping: ResponseMapping) -> tuple[list[RecallHit], int]:
    """Hits in the service's order, and how many entries had no text and were skipped."""
    documents = dig(body, mapping.documents_path)
    if not isinstance(documents, list):
        where = mapping.documents_path or "the body"
        raise BackendError(f"response mapping: {where} is not a list of documents")
    hits: list[RecallHit] = []
    skipped = 0
    for index, document in enumerate(documents):
        text = as_text(dig(document, mapping.text_path))
        if not text.strip():
            skipped += 1
            continue
        score = similarity(document, mapping)
        lexical = mapping.score == "elasticsearch"
        hits.append(
            RecallHit(
                chunk_id=None,
                document_id=as_text(dig(document, mapping.id_path)) or str(index),
                title=as_text(dig(document, mapping.title_path)) if mapping.title_path else "",
                text=text,
                collection="external_api",
                cosine=None if lexical else score,
                bm25=score if lexical else None,
                score=score,
            )
        )
    return hits, skipped


class ExternalApiBackend(RagBackend):
    name = "external_api"

    def __init__(self, config: ExternalApiConfig):
        self.config = config
        self.skipped = 0

    async def retrieve(self, request: RetrievalRequest) -> list[RecallHit]:
        recall = request.recall
        top_k = recall.top_k if recall else request.candidates
        values = {"query": request.query, "top_k": top_k, "filter": request.filter or {}}
        body = fill_template(self.config.request_format, values)
        config = self.config
        own = config.timeout_ms / 1000
        seconds = fetch_deadline.shortened(own)
        said = timeout_words(config.timeout_ms, seconds, fetch_deadline.binds(own))
        try:
            async with asyncio.timeout(seconds):  # the whole exchange, not each read
                answer = await self.ask(request, body, seconds)
        except OutboundError as error:
            raise BackendError(str(error)) from error
        except (TimeoutError, httpx.TimeoutException) as error:
            raise BackendTimeout(f"external API {said}") from error
        except httpx.HTTPError as error:
            raise BackendError(
                f"external API unreachable: {type(error).__name__}: {error}"
            ) from error
        hits, self.skipped = map_documents(answer, config.response)
        if recall is not None:
            hits = [hit for hit in hits if hit.score >= recall.min_similarity]
        return hits[:top_k]

    async def ask(self, request: RetrievalRequest, body: Any, seconds: float) -> Any:
        config = self.config
        headers = sent_headers(config)
        async with guarded_async_client(allowlist=request.allowlist, timeout_s=seconds) as client:
            if config.method == "GET":
                params = {k: as_text(v) for k, v in body.items()} if isinstance(body, dict) else {}
                # Merged into the endpoint's own query (an API key, an index name), never in
                # its place; a template parameter of the same name wins.
                url = str(httpx.URL(config.endpoint).copy_merge_params(params))
                return await fetch_json_limited(
                    client, "GET", url, headers=headers, max_bytes=config.response_limit
                )
            return await fetch_json_limited(
                client,
                "POST",
                config.endpoint,
                json=body,
                headers=headers,
                max_bytes=config.response_limit,
            )


def sent_headers(config: ExternalApiConfig) -> dict[str, str]:
    """The configured headers in plain text (decrypted now: the request is being built)."""
    try:
        return revealed_headers(config.headers)
    except SecretUnavailable as error:
        raise BackendError(str(error)) from None


def timeout_words(timeout_ms: int, seconds: float, source_binds: bool) -> str:
    """How a cut retrieval is reported: after the backend's own timeout, or at the source's
    deadline when that came first."""
    if source_binds:
        return f"timed out at the source's deadline ({seconds * 1000:.0f} ms left)"
    return f"timed out after {timeout_ms} ms"
