"""The ``rag`` source kind: recall from a backend, judge, keep, cache."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from sources.base import (
    ContextItem,
    ContextRequest,
    ContextSource,
    SourceFailed,
    SourceResult,
    register_source_kind,
)
from sources.matching import (
    RAG_TOP_K,
    MatchConfig,
    MatchResult,
    cap_characters,
    default_match,
    judge_and_keep,
)
from sources.mcp_config import McpBackendConfig
from sources.rag import cache
from sources.rag.backends import RagBackend, RetrievalRequest, VectorstoreBackend
from sources.rag.config import ExternalApiConfig, HybridConfig, RagSettings, VectorstoreConfig
from sources.rag.vector_configs import MilvusConfig, OpenAiSearchConfig, QdrantConfig
from sources.recall import RecallHit


def build_backend(config: BaseModel) -> RagBackend:
    """The backend of a validated backend config. The one place that knows every backend: each
    module is imported on first use (an engine's client loads only where a route uses it), and
    ``hybrid`` is handed this function for its two sides rather than importing it back."""
    if isinstance(config, VectorstoreConfig):
        return VectorstoreBackend(config)
    if isinstance(config, ExternalApiConfig):
        from sources.rag.external import ExternalApiBackend

        return ExternalApiBackend(config)
    if isinstance(config, HybridConfig):
        from sources.rag.hybrid import HybridBackend

        return HybridBackend(config, build_backend)
    if isinstance(config, MilvusConfig):
        from sources.rag.milvus import MilvusBackend

        return MilvusBackend(config)
    if isinstance(config, QdrantConfig):
        from sources.rag.qdrant import QdrantBackend

        return QdrantBackend(config)
    if isinstance(config, OpenAiSearchConfig):
        from sources.rag.openai_search import OpenAiSearchBackend

        return OpenAiSearchBackend(config)
    if isinstance(config, McpBackendConfig):
        from sources.rag.mcp_tool import McpBackend

        return McpBackend(config)
    raise TypeError(f"no backend for {type(config).__name__}")


def recall_notes(backend: RagBackend, notes: dict[str, Any]) -> None:
    """What the recall ran with, and where each value came from (``AppliedRecall.notes``)."""
    if backend.applied is not None:
        notes.update(backend.applied.notes())


def render(hit: RecallHit) -> str:
    return f"[Document: {hit.title}] {hit.text}" if hit.title else hit.text


def trace_entry(decision: Any) -> dict[str, Any]:
    hit = decision.hit
    return {
        "document_id": hit.document_id,
        "chunk_id": hit.chunk_id,
        "title": hit.title,
        "recall_rank": decision.recall_rank,
        "recall_score": round(hit.score, 6),
        "cosine": None if hit.cosine is None else round(hit.cosine, 6),
        "bm25": None if hit.bm25 is None else round(hit.bm25, 6),
        "judge_score": None if decision.judge_score is None else round(decision.judge_score, 6),
        **decision.judge_trace(),
        "kept": decision.kept,
        "reason": decision.reason,
    }


@register_source_kind
class RagSource(ContextSource):
    type = "rag"
    Settings = RagSettings
    previewable = True

    @property
    def rag(self) -> RagSettings:
        return self.settings  # type: ignore[return-value]

    @property
    def match(self) -> MatchConfig:
        return self.rag.match or default_match()

    def retrieval_request(self, request: ContextRequest) -> RetrievalRequest:
        match = self.match
        judge = match.judge
        return RetrievalRequest(
            schema=request.tenant,
            query=request.query,
            recall=match.recall,
            candidates=judge.max_candidates
            if judge
            else ((match.recall.top_k or RAG_TOP_K) if match.recall else RAG_TOP_K),
            filter=self.rag.filter,
            lexical_features=judge is not None and judge.deployment in (None, "local"),
            allowlist=request.allowlist,
            timeout_seconds=self.timeout_seconds,
        )

    async def fetch(self, request: ContextRequest) -> SourceResult:
        if not request.query.strip():
            return SourceResult(notes={"skipped": "no user query"})
        notes: dict[str, Any] = {}
        try:
            return await self.retrieve(request, notes)
        except Exception as error:  # what the fetch learned before failing stays in the report
            raise SourceFailed(error, notes) from error

    def fetch_at_once(self, request: ContextRequest) -> SourceResult | None:
        """A retrieval cached for this query, under the documents' change token, both read on the
        request's thread (where a cache read from the loop would have gone); ``None`` on a miss,
        to retrieve it on the loop, which asks the cache once more (a lookup, against the
        embedding and the recall a miss costs)."""
        if not request.query.strip():
            return SourceResult(notes={"skipped": "no user query"})
        if not (self.rag.cache_results and request.use_cache):
            return None
        notes: dict[str, Any] = {}
        try:
            backend = build_backend(self.rag.backend_settings())
            retrieval = backend.resolved(self.retrieval_request(request))
            recall_notes(backend, notes)
            token = backend.cache_token_on_thread(retrieval)
            cached = cache.get_on_thread(self.cache_key(request, backend, token))
        except Exception as error:  # as the fetch on the loop reports it
            raise SourceFailed(error, notes) from error
        return None if cached is None else self.from_cache(cached, notes)

    async def retrieve(self, request: ContextRequest, notes: dict[str, Any]) -> SourceResult:
        backend = build_backend(self.rag.backend_settings())
        # The recall's unwritten values are the backend's embedder's (a hybrid's: the side's).
        retrieval = backend.resolved(self.retrieval_request(request))
        recall_notes(backend, notes)
        key = None
        if self.rag.cache_results and request.use_cache:
            key = self.cache_key(request, backend, await backend.cache_token(retrieval))
            cached = await cache.get(key)
            if cached is not None:
                return self.from_cache(cached, notes)
            notes["cache"] = "miss"
        try:
            hits = await backend.retrieve(retrieval)
        finally:  # also when the fallback fails too: the primary's error must not be lost
            for attribute in ("served_by", "primary_error"):
                if getattr(backend, attribute, None):
                    notes[attribute] = getattr(backend, attribute)
            recall_notes(backend, notes)
        result = await judge_and_keep(
            request.query,
            hits,
            self.match.judge,
            request,
            backend.judge_calibrations(),
            ranked_recall=self.match.recall is not None,
        )
        cap_characters(result, self.rag.max_context_length)
        notes.update({"backend": self.rag.backend, "judged": result.judged})
        notes.update(result.judge_notes())
        items = self.items_of(result)
        if key is not None and result.cacheable:
            await cache.put(
                key,
                [
                    {"item": self.item_fields(d), "trace": trace_entry(d)}
                    for d in result.decisions
                    if d.kept
                ],
                self.rag.cache_ttl_seconds,
            )
        return SourceResult(items, [trace_entry(d) for d in result.decisions], notes)

    def cache_key(self, request: ContextRequest, backend: RagBackend, token: str | None) -> str:
        return cache.cache_key(
            schema=request.tenant,
            route=request.route,
            source=self.name,
            parts={
                "match": self.match.model_dump(mode="json"),
                # what the unwritten values came to (the embedder's defaults); a hybrid's sides
                # resolve theirs as they run
                "recall": None if backend.applied is None else backend.applied.notes(),
                "filter": self.rag.filter,
                "backend": self.rag.backend,
                "backend_config": self.rag.backend_config,
                "max_context_length": self.rag.max_context_length,
                "judge_default": request.judge_deployment,  # who judges a block naming none
            },
            query=request.query,
            user=None,  # a rag source reads tenant-wide documents; memory sources pass the user
            token=token or "ttl-only",  # external services: cached until the TTL ends
        )

    def from_cache(self, cached: list[dict[str, Any]], notes: dict[str, Any]) -> SourceResult:
        notes["cache"] = "hit"
        return SourceResult(
            items=[self.item(**entry["item"]) for entry in cached],
            trace=[entry["trace"] for entry in cached],
            notes=notes,
        )

    def item_fields(self, decision: Any) -> dict[str, Any]:
        hit = decision.hit
        score = decision.judge_score if decision.judge_score is not None else hit.score
        return {
            "content": render(hit),
            "score": round(score, 6),
            "title": hit.title or None,
            "metadata": {
                "document_id": hit.document_id,
                "collection": hit.collection,
                "chunk_id": hit.chunk_id,
                "recall_score": round(hit.score, 6),
                "judge_score": decision.judge_score,
            },
        }

    def items_of(self, result: MatchResult) -> list[ContextItem]:
        return [self.item(**self.item_fields(d)) for d in result.kept]
