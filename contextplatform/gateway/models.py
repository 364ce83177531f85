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
