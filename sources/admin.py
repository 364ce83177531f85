from __future__ import annotations

from django.contrib import admin

from sources import knowledge_admin  # noqa: F401  (collections, documents, ingestion jobs)
from sources.mcp import admin as mcp_admin  # noqa: F401  (MCP servers)
from sources.models import ChatMessage, ChatSession, UserProfile
from tenants.admin import TenantOnlyAdmin


@admin.register(UserProfile)
class UserProfileAdmin(TenantOnlyAdmin):
    list_display = ("user_id", "updated_at")
    search_fields = ("user_id",)


class ChatMessageInline(admin.TabularInline):
    model = ChatMessage
    extra = 0
    fields = ("seq", "role", "text", "created_at")
    readonly_fields = ("created_at",)


@admin.register(ChatSession)
class ChatSessionAdmin(TenantOnlyAdmin):
    list_display = ("key", "user_id", "updated_at")
    search_fields = ("key", "user_id")
    inlines = [ChatMessageInline]
