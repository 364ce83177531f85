"""Per-tenant data that the built-in sources read: user profiles and session messages."""

from __future__ import annotations

from django.db import models


class UserProfile(models.Model):
    user_id = models.CharField(max_length=200, unique=True)
    attributes = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.user_id


class ChatSession(models.Model):
    key = models.CharField(max_length=200)
    user_id = models.CharField(max_length=200, default="", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key", "user_id"], name="session_key_user_unique")
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.user_id or 'anonymous'})"


class ChatMessage(models.Model):
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=20)
    content = models.JSONField()
    text = models.TextField(help_text="Plain text of the content, for sources and search.")
    resolve_id = models.CharField(max_length=40, blank=True, default="", db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="message_session_seq_unique")
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.role}"
