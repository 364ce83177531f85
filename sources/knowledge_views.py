"""HTTP endpoints of the knowledge base: collections, documents, ingestion jobs, retrieval preview."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel, ConfigDict, Field, field_validator
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from contextplatform.core.errors import not_found
from contextplatform.core.read_back import without_read_only
from contextplatform.core.validation import parse
from contextplatform.core.views import ApiView
from sources.embedding import get_embedder
from sources.ingestion import (
    DocumentInput,
    create_collection,
    delete_document,
    ensure_embedder_matches,
    submit_documents,
)
from sources.knowledge_schema import CollectionBody
from sources.models import Collection, Document, IngestionJob
from sources.selectors import (
    collection_by_name,
    collection_document,
    collections_with_counts,
    document_statuses,
    documents_page,
    ingestion_job,
)
from sources.tasks import enqueue_ingestion

MAX_DOCUMENTS_PAGE = 1000


class DocumentBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    title: str = Field(default="", max_length=500)
    text: str = Field(min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("text")
    @classmethod
    def not_blank_nor_huge(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("must contain text")
        limit = settings.KNOWLEDGE_MAX_DOCUMENT_CHARS
        if len(text) > limit:
            raise ValueError(f"document has {len(text)} characters; the limit is {limit}")
        return text


class DocumentsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    documents: list[DocumentBody] = Field(min_length=1, max_length=1000)

    @field_validator("documents")
    @classmethod
    def unique_ids(cls, documents: list[DocumentBody]) -> list[DocumentBody]:
        seen: set[str] = set()
        for document in documents:
            if document.id in seen:
                raise ValueError(f"document id {document.id!r} appears twice")
            seen.add(document.id)
        return documents


# What a collection's representation adds to what it writes; a write ignores them
# (core/read_back.py).
COLLECTION_READ_ONLY = frozenset(
    {"embedder", "documents", "chunks", "version", "created_at", "updated_at"}
)
# A document's: ``status``, ``error`` and ``chunks`` are the indexing's.
DOCUMENT_READ_ONLY = frozenset({"status", "error", "chunks", "updated_at"})


def documents_written(data: Any) -> Any:
    """An ingest body whose documents may be GET bodies: their read-only fields left out."""
    if not isinstance(data, dict) or not isinstance(data.get("documents"), list):
        return data
    documents = [without_read_only(d, DOCUMENT_READ_ONLY) for d in data["documents"]]
    return {**data, "documents": documents}


def collection_representation(collection: Collection) -> dict[str, Any]:
    return {
        "name": collection.name,
        "description": collection.description,
        "embedder": collection.embedder or None,
        "documents": getattr(collection, "document_count", None),
        "chunks": getattr(collection, "chunk_count", None),
        "version": collection.version,
        "created_at": collection.created_at.isoformat(),
    }


def document_representation(document: Document) -> dict[str, Any]:
    return {
        "id": document.external_id,
        "title": document.title,
        "metadata": document.metadata,
        "status": document.status,
        "error": document.error or None,
        "chunks": document.chunk_count,
        "updated_at": document.updated_at.isoformat(),
    }


def ingested_document(external_id: str, document: Document | None) -> dict[str, Any]:
    if document is None:  # deleted since it was submitted
        return {"id": external_id, "status": "pending", "error": None, "chunks": 0}
    return {
        "id": external_id,
        "status": document.status,
        "error": document.error or None,
        "chunks": document.chunk_count,
    }


def job_representation(job: IngestionJob) -> dict[str, Any]:
    return {
        "job": job.id,
        "collection": job.collection.name,
        "status": job.status,
        "progress": round(job.progress, 4),
        "documents": job.total,
        "processed": job.processed,
        "chunks_written": job.chunks_written,
        "error": job.error,
        "created_at": job.created_at.isoformat(),
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }


def existing_collection(name: str) -> Collection:
    collection = collection_by_name(name)
    if collection is None:
        raise not_found(f"collection {name!r} does not exist", "collection")
    return collection


class CollectionListView(ApiView):
    required_scopes = {"GET": "ingest", "POST": "ingest"}

    @extend_schema(responses={200: dict}, summary="List collections")
    def get(self, request: Request) -> Response:
        return Response({"data": [collection_representation(c) for c in collections_with_counts()]})

    @extend_schema(request=CollectionBody, responses={201: dict}, summary="Create a collection")
    def post(self, request: Request) -> Response:
        body = self.body(request, CollectionBody, COLLECTION_READ_ONLY)
        collection = create_collection(name=body.name, description=body.description)
        # Read back with its counts as the list shows them: a new collection holds none (known,
        # not unknown), so they need no query.
        created = {**collection_representation(collection), "documents": 0, "chunks": 0}
        return Response(created, status=status.HTTP_201_CREATED)


class DocumentListView(ApiView):
    required_scopes = {"GET": "ingest", "POST": "ingest"}
    atomic_writes = False  # an eager job ingests in the request, page by page

    @extend_schema(
        parameters=[
            OpenApiParameter("cursor", str, required=False),
            OpenApiParameter("limit", int, required=False),
        ],
        responses={200: dict},
        summary="List a collection's documents",
    )
    def get(self, request: Request, name: str) -> Response:
        collection = existing_collection(name)
        limit = self.query_int(request, "limit", default=100, high=MAX_DOCUMENTS_PAGE)
        page = documents_page(
            collection=collection, after=request.query_params.get("cursor") or None, limit=limit
        )
        more = len(page) > limit
        page = page[:limit]
        return Response(
            {
                "data": [document_representation(d) for d in page],
                "next_cursor": page[-1].external_id if more and page else None,
            }
        )

    @extend_schema(
        request=DocumentsBody, responses={202: dict}, summary="Add or replace documents (a job)"
    )
    def post(self, request: Request, name: str) -> Response:
        collection = existing_collection(name)
        body = parse(DocumentsBody, documents_written(request.data))
        ensure_embedder_matches(collection, get_embedder())
        job = submit_documents(
            collection=collection,
            documents=[
                DocumentInput(id=d.id, text=d.text, title=d.title, metadata=d.metadata)
                for d in body.documents
            ],
        )
        enqueue_ingestion(job)
        job.refresh_from_db()
        # Each document as stored now: ``indexed`` once an eager job has run, ``pending`` while a
        # worker has it (the job's status says which), ``failed`` with its error.
        stored = document_statuses(
            collection=collection, external_ids=[d.id for d in body.documents]
        )
        return Response(
            {
                "job": job.id,
                "status": job.status,
                "documents": [ingested_document(d.id, stored.get(d.id)) for d in body.documents],
            },
            status=status.HTTP_202_ACCEPTED,
        )


class DocumentDetailView(ApiView):
    required_scopes = {"DELETE": "ingest", "GET": "ingest"}

    @extend_schema(responses={200: dict}, summary="One document")
    def get(self, request: Request, name: str, document_id: str) -> Response:
        collection = existing_collection(name)
        document = collection_document(collection=collection, external_id=document_id)
        if document is None:
            raise not_found(f"document {document_id!r} does not exist in {name!r}")
        # One document reads back whole, so it posts back (the list leaves the text out).
        return Response({**document_representation(document), "text": document.text})

    @extend_schema(responses={200: dict}, summary="Delete a document and its chunks")
    def delete(self, request: Request, name: str, document_id: str) -> Response:
        collection = existing_collection(name)
        if not delete_document(collection=collection, external_id=document_id):
            raise not_found(f"document {document_id!r} does not exist in {name!r}")
        return Response({"deleted": 1})


class JobView(ApiView):
    required_scopes = {"GET": "ingest"}

    @extend_schema(responses={200: dict}, summary="An ingestion job's status and progress")
    def get(self, request: Request, job_id: str) -> Response:
        job = ingestion_job(job_id)
        if job is None:
            raise not_found(f"no job {job_id!r}")
        return Response(job_representation(job))
