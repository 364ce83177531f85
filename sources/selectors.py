"""Reads of profiles and session messages, always scoped by user in the query itself."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from sources.models import ChatMessage, Collection, Document, IngestionJob, UserProfile


def user_profile(user_id: str) -> UserProfile | None:
    return UserProfile.objects.filter(user_id=user_id).first()


def session_messages(*, session_key: str, user_id: str | None) -> QuerySet[ChatMessage]:
    return ChatMessage.objects.filter(
        session__key=session_key, session__user_id=user_id or ""
    ).order_by("seq")


def collection_by_name(name: str) -> Collection | None:
    return Collection.objects.filter(name=name).first()


def collections_with_counts() -> QuerySet[Collection]:
    return Collection.objects.annotate(
        document_count=Count("documents", distinct=True), chunk_count=Count("chunks", distinct=True)
    ).order_by("name")


def documents_page(*, collection: Collection, after: str | None, limit: int) -> list[Document]:
    documents = Document.objects.filter(collection=collection).order_by("external_id")
    if after:
        documents = documents.filter(external_id__gt=after)
    return list(documents[: limit + 1])


def ingestion_job(job_id: str) -> IngestionJob | None:
    return IngestionJob.objects.select_related("collection").filter(pk=job_id).first()
