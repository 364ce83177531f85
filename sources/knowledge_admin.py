"""The tenant admin's knowledge base: collections with their ingestion status and progress,
documents and ingestion jobs.

Chunks and embeddings are written by ingestion only, so documents and jobs are read-only here; a
collection is created through ``sources.ingestion`` and a document deleted through it (which bumps
the collection's version, so no cached retrieval outlives it). Documents are added by the API.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from contextplatform.core.errors import ApiError
from contextplatform.core.form_errors import error_text
from contextplatform.core.validation import parse
from sources.ingestion import create_collection, delete_document
from sources.knowledge_schema import CollectionBody
from sources.models import Collection, Document, IngestionJob
from sources.selectors import collections_with_progress
from tenants.admin import TenantOnlyAdmin

RECENT_JOBS = 10


def progress_html(job: IngestionJob) -> str:
    """``<progress>`` with processed / total and the status in words (no script, no CSS)."""
    percent = round(job.progress * 100)
    return format_html(
        '<progress value="{}" max="100" title="{}%"></progress> {} {}/{} ({}%)',
        percent,
        percent,
        job.status,
        job.processed,
        job.total,
        percent,
    )


def changelist_url(model: type[Any], **filters: Any) -> str:
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    query = "&".join(f"{key}={value}" for key, value in filters.items())
    return f"{url}?{query}" if query else url


class ReadOnlyAdmin(TenantOnlyAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class CollectionForm(forms.ModelForm):
    """Checked as the API checks a new collection."""

    class Meta:
        model = Collection
        fields = ["name", "description"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        written = {
            "name": cleaned.get("name", self.instance.name),
            "description": cleaned.get("description", ""),
        }
        try:
            parse(CollectionBody, written)
        except ApiError as error:
            field = error.param if error.param in self.fields else None
            self.add_error(field, error_text(error))
        return cleaned


@admin.register(Collection)
class CollectionAdmin(TenantOnlyAdmin):
    form = CollectionForm
    list_display = (
        "name",
        "document_count",
        "chunk_count",
        "embedder",
        "version",
        "ingestion",
        "updated_at",
    )
    search_fields = ("name", "description")
    readonly_fields = (
        "embedder",
        "version",
        "document_count",
        "chunk_count",
        "ingestion",
        "recent_jobs",
        "created_at",
        "updated_at",
    )
    fields = ("name", "description", *readonly_fields)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Collection]:
        return collections_with_progress()

    def get_readonly_fields(self, request: HttpRequest, obj: Collection | None = None) -> Any:
        """Routes name their collections: a collection keeps its name."""
        return ("name", *self.readonly_fields) if obj is not None else self.readonly_fields

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # routes would keep naming it; documents are deleted one by one instead

    def save_model(self, request: HttpRequest, obj: Collection, form: Any, change: bool) -> None:
        if change:
            obj.save(update_fields=["description", "updated_at"])
            return
        obj.pk = create_collection(name=obj.name, description=obj.description).pk

    @admin.display(description="documents", ordering="document_count")
    def document_count(self, collection: Collection) -> Any:
        count = getattr(collection, "document_count", None)
        if count is None:
            return "-"
        url = changelist_url(Document, collection__id__exact=collection.pk)
        return format_html('<a href="{}">{}</a>', url, count)

    @admin.display(description="chunks", ordering="chunk_count")
    def chunk_count(self, collection: Collection) -> Any:
        return getattr(collection, "chunk_count", "-")

    @admin.display(description="latest ingestion")
    def ingestion(self, collection: Collection) -> str:
        if getattr(collection, "latest_job_id", None) is None:
            return "no ingestion yet"
        latest = IngestionJob(
            id=collection.latest_job_id,  # type: ignore[attr-defined]
            status=collection.latest_job_status,  # type: ignore[attr-defined]
            processed=collection.latest_job_processed,  # type: ignore[attr-defined]
            total=collection.latest_job_total,  # type: ignore[attr-defined]
        )
        error = collection.latest_job_error  # type: ignore[attr-defined]
        return format_html("{}{}", progress_html(latest), f" — {error}" if error else "")

    @admin.display(description="recent ingestion jobs")
    def recent_jobs(self, collection: Collection) -> str:
        if collection.pk is None:
            return "-"
        jobs = collection.jobs.order_by("-created_at")[:RECENT_JOBS]
        rows = format_html_join(
            "",
            '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>',
            (
                (
                    reverse("admin:sources_ingestionjob_change", args=[job.pk]),
                    job.pk,
                    progress_html(job),
                    job.created_at,
                    job.error or "",
                )
                for job in jobs
            ),
        )
        return format_html(
            "<table><tr><th>job</th><th>progress</th><th>created</th><th>error</th></tr>{}</table>"
            '<p><a href="{}">All jobs of this collection</a></p>',
            rows,
            changelist_url(IngestionJob, collection__id__exact=collection.pk),
        )


@admin.register(Document)
class DocumentAdmin(ReadOnlyAdmin):
    list_display = ("external_id", "title", "collection", "status", "chunk_count", "updated_at")
    list_filter = ("collection", "status")
    list_select_related = ("collection",)
    search_fields = ("external_id", "title")
    readonly_fields = (
        "collection",
        "external_id",
        "title",
        "status",
        "error",
        "chunk_count",
        "metadata",
        "content_hash",
        "indexed_hash",
        "text",
        "created_at",
        "updated_at",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Document]:
        return super().get_queryset(request).select_related("collection")

    def delete_model(self, request: HttpRequest, obj: Document) -> None:
        delete_document(collection=obj.collection, external_id=obj.external_id)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        for document in queryset.select_related("collection"):
            self.delete_model(request, document)


@admin.register(IngestionJob)
class IngestionJobAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "collection",
        "status",
        "progress_bar",
        "chunks_written",
        "error",
        "created_at",
        "finished_at",
    )
    list_filter = ("status", "collection")
    list_select_related = ("collection",)
    search_fields = ("id",)
    readonly_fields = (
        "id",
        "collection",
        "status",
        "progress_bar",
        "total",
        "processed",
        "chunks_written",
        "error",
        "document_ids",
        "created_at",
        "started_at",
        "finished_at",
    )
    fields = readonly_fields

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="progress")
    def progress_bar(self, job: IngestionJob) -> str:
        return progress_html(job)
