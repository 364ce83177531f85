"""What each session has spent against its route's session budget (the table of the routing app)."""

from __future__ import annotations

from django.db import models


class SessionSpend(models.Model):
    """What one session (of one user) has spent against its route's ``budget.session_max_tokens``
    and what its calls in flight have reserved. The gateway writes it only in single atomic SQL
    statements (``gateway/budgets.py``), so concurrent calls can never reserve past the limit."""

    session_key = models.CharField(max_length=200)
    user_id = models.CharField(max_length=200, blank=True, default="")
    spent = models.BigIntegerField(default=0)
    reserved = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField()

    class Meta:
        app_label = "routing"  # its table and admin pages kept their names when it moved apps
        constraints = [
            models.UniqueConstraint(
                fields=["session_key", "user_id"], name="session_spend_session_user_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(spent__gte=0, reserved__gte=0),
                name="session_spend_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_key} ({self.user_id or 'anonymous'}): {self.spent} spent"


class StoredResponse(models.Model):
    """A response of ``POST /v1/responses`` the gateway keeps (``store``, on by default), per
    tenant (its schema) and user, for ``GET /v1/responses/{id}`` and ``previous_response_id``.
    Its content (``items``: the conversation up to and with this response, as the next request's
    input takes it; ``response``: the object as answered) is kept only where the tenant captures
    content; otherwise the row says the response was not stored (``content_stored`` false)."""

    response_id = models.CharField(max_length=64, unique=True)
    user_id = models.CharField(max_length=200, blank=True, default="")
    route = models.CharField(max_length=200)
    content_stored = models.BooleanField(default=False)
    items = models.JSONField(default=list, blank=True)
    response = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        app_label = "routing"  # the gateway's tables live in the routing app, as SessionSpend's

    def __str__(self) -> str:
        return f"{self.response_id} ({self.user_id or 'anonymous'})"
