"""The tenant admin's view of memories: list, search, filter, and edit through the services (an
edited content is embedded again)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from memory.models import Memory
from memory.services import content_problem, create_memory, update_memory
from sources.embedding import get_embedder
from tenants.admin import TenantOnlyAdmin
from tenants.admin_filters import (
    CreatedFromFilter,
    CreatedToFilter,
    UserIdFilter,
)


class MemoryForm(forms.ModelForm):
    class Meta:
        model = Memory
        fields = ("user_id", "kind", "content", "metadata", "expires_at")

    def clean_content(self) -> str:
        content = self.cleaned_data["content"]
        problem = content_problem(content)
        if problem:
            raise forms.ValidationError(problem)
        return content


@admin.register(Memory)
class MemoryAdmin(TenantOnlyAdmin):
    form = MemoryForm
    list_display = (
        "id",
        "user_id",
        "kind",
        "short_content",
        "strength",
        "created_at",
        "last_used_at",
        "expires_at",
        "superseded_at",
    )
    list_display_links = ("id", "short_content")
    # Operators and memory managers look one user's memories up: an exact user id, a time range
    # of creation, and words of the content (the search box).
    search_fields = ("content",)
    search_help_text = "Words of the memory's content."
    list_filter = ("kind", UserIdFilter, CreatedFromFilter, CreatedToFilter)
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    list_per_page = 50
    readonly_fields = (
        "strength",
        "embedder",
        "source_request_id",
        "source_turn",
        "observed_at",
        "superseded_at",
        "superseded_by",
        "created_at",
        "updated_at",
        "last_used_at",
    )
    fields = (*MemoryForm.Meta.fields, *readonly_fields)

    def get_readonly_fields(self, request: HttpRequest, obj: Memory | None = None) -> Any:
        """A memory stays with the user it belongs to."""
        if obj is not None:
            return ("user_id", *self.readonly_fields)
        return self.readonly_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Memory]:
        return super().get_queryset(request).defer("embedding", "search_vector")

    class Media:
        # The content column takes the room the list has; dates stay on one line.
        css = {"all": ("memory/memory_admin.css",)}

    @admin.display(description="content")
    def short_content(self, memory: Memory) -> str:
        return memory.content if len(memory.content) <= 240 else memory.content[:239] + "…"

    def save_model(self, request: HttpRequest, obj: Memory, form: Any, change: bool) -> None:
        if not change:
            created = create_memory(
                user_id=obj.user_id,
                content=obj.content,
                kind=obj.kind,
                metadata=obj.metadata,
                expires_at=obj.expires_at,
                embedder=get_embedder(),
            )
            obj.pk = created.pk
            return
        changed = set(form.changed_data)
        stored = Memory.objects.get(pk=obj.pk, user_id=obj.user_id)
        update_memory(
            memory=stored,
            content=obj.content if "content" in changed else None,
            metadata=obj.metadata if "metadata" in changed else None,
            kind=obj.kind if "kind" in changed else None,
            embedder=get_embedder(),
            **({"expires_at": obj.expires_at} if "expires_at" in changed else {}),
        )
