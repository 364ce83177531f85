"""The ``openai`` backend: OpenAI vector-store file search.

``POST {base_url}/vector_stores/{vector_store_id}/search`` with the documented request,
``{"query", "max_num_results", "filters", "ranking_options", "rewrite_query"}``, and the documented
answer, ``{"object": "vector_store.search_results.page", "data": [{"file_id", "filename", "score",
"attributes", "content": [{"type": "text", "text"}]}], ...}``: each result (a file's matching
chunks) is one hit, its text the chunks' texts, titled by the file name, its score the service's
relevance score, in [0, 1], taken as the hit's similarity.

OpenAI embeds the query itself (the vector store's own model), so this backend embeds nothing. The
source's ``filter`` becomes comparison filters on file attributes (``eq`` per key, ``and``-ed;
OpenAI attributes are flat strings, numbers and booleans); ``min_similarity`` becomes
``ranking_options.score_threshold`` and is checked on the answer too.

As for ``external_api``: through the tenant's outbound guard, the answer read up to
``max_response_bytes`` (4 MiB by default), the whole exchange bounded by ``timeout_ms`` or what is
left of the source's deadline, whichever is shorter (``BackendTimeout``: the source reports
``timeout``). The key is sent as ``Authorization: Bearer`` and kept out of every message.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from contextplatform.core.outbound.httpx_client import fetch_json_limited, guarded_async_client
from contextplatform.core.outbound.policy import OutboundError
from sources import fetch_deadline
from sources.rag.backends import BackendError, BackendTimeout, RagBackend, RetrievalRequest
from sources.rag.external import timeout_words
from sources.rag.vector_backends import filter_items, revealed, scalar, scrubbed
from sources.rag.vector_configs import OpenAiSearchConfig
from sources.recall import RecallHit

MAX_RESULTS = 50  # the endpoint's own limit


def search_url(config: OpenAiSearchConfig) -> str:
    return f"{config.base_url.rstrip('/')}/vector_stores/{config.vector_store_id}/search"


def attribute_filters(wanted: dict[str, Any] | None) -> dict[str, Any] | None:
    comparisons = []
    for path, value in filter_items(wanted):
        where = ".".join(path)
        if len(path) > 1 or isinstance(value, list):
            raise BackendError(
                f"filter {where}: OpenAI file attributes are flat strings, numbers and booleans"
            )
        comparisons.append({"type": "eq", "key": path[0], "value": scalar(value, where)})
    if not comparisons:
        return None
    return comparisons[0] if len(comparisons) == 1 else {"type": "and", "filters": comparisons}


def request_body(
    config: OpenAiSearchConfig, query: str, top_k: int, min_similarity: float | None, wanted: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "query": query,
        "max_num_results": max(1, min(top_k, config.max_num_results or MAX_RESULTS, MAX_RESULTS)),
        "rewrite_query": config.rewrite_query,
    }
    filters = attribute_filters(wanted)
    if filters is not None:
        body["filters"] = filters
    ranking: dict[str, Any] = {}
    if config.ranker:
        ranking["ranker"] = config.ranker
    if min_similarity is not None and min_similarity > 0:
        ranking["score_threshold"] = min(float(min_similarity), 1.0)
    if ranking:
        body["ranking_options"] = ranking
    return body


def hits_of(answer: Any, collection: str) -> list[RecallHit]:
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        raise BackendError("openai: the answer has no data list of search results")
    hits = []
    for index, result in enumerate(data):
        if not isinstance(result, dict):
            continue
        content = result.get("content")
        chunks = content if isinstance(content, list) else []
        texts = [
            chunk["text"]
            for chunk in chunks
            if isinstance(chunk, dict)
            and chunk.get("type", "text") == "text"
            and isinstance(chunk.get("text"), str)
            and chunk["text"].strip()
        ]
        if not texts:
            continue
        score = result.get("score")
        similarity = (
            float(score) if isinstance(score, int | float) and not isinstance(score, bool) else 1.0
        )
        attributes = result.get("attributes")
        filename = result.get("filename")
        hits.append(
            RecallHit(
                chunk_id=None,
                document_id=str(result.get("file_id") or index),
                title=filename if isinstance(filename, str) else "",
                text="\n\n".join(texts),
                collection=collection,
                metadata=attributes if isinstance(attributes, dict) else {},
                cosine=similarity,
                score=similarity,
            )
        )
    return hits


class OpenAiSearchBackend(RagBackend):
    name = "openai"

    def __init__(self, config: OpenAiSearchConfig):
        self.config = config
        self.api_key = revealed(config.api_key)

    async def retrieve(self, request: RetrievalRequest) -> list[RecallHit]:
        recall = request.recall
        top_k = recall.top_k if recall else request.candidates
        minimum = recall.min_similarity if recall else None
        body = request_body(self.config, request.query, top_k, minimum, request.filter)
        own = self.config.timeout_ms / 1000
        seconds = fetch_deadline.shortened(own)
        said = timeout_words(self.config.timeout_ms, seconds, fetch_deadline.binds(own))
        try:
            async with asyncio.timeout(seconds):  # the whole exchange, not each read
                answer = await self.ask(request, body, seconds)
        except OutboundError as error:
            raise BackendError(self.clean(f"openai: {error}")) from None
        except (TimeoutError, httpx.TimeoutException) as error:
            raise BackendTimeout(f"openai file search {said}") from error
        except httpx.HTTPError as error:
            raise BackendError(
                self.clean(f"openai file search unreachable: {type(error).__name__}: {error}")
            ) from None
        hits = hits_of(answer, self.config.vector_store_id)
        if minimum is not None:
            hits = [hit for hit in hits if hit.score >= minimum]
        return hits[:top_k]

    async def ask(self, request: RetrievalRequest, body: dict[str, Any], seconds: float) -> Any:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        async with guarded_async_client(allowlist=request.allowlist, timeout_s=seconds) as client:
            return await fetch_json_limited(
                client,
                "POST",
                search_url(self.config),
                json=body,
                headers=headers,
                max_bytes=self.config.response_limit,
            )

    def clean(self, text: str) -> str:
        return scrubbed(text, self.api_key)
