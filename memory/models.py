"""Per-user long-term memories, in each tenant's schema. Every query filters by user id in SQL."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from pgvector.django import HnswIndex, VectorField

KINDS = [("fact", "fact"), ("preference", "preference"), ("event", "event"), ("summary", "summary")]


class Memory(models.Model):
    user_id = models.CharField(max_length=200)
    content = models.TextField()
    kind = models.CharField(max_length=16, choices=KINDS, default="fact")
    embedding = VectorField(dimensions=getattr(settings, "EMBEDDING_DIMENSIONS", 384))
    embedder = models.CharField(max_length=300, default="")
    search_vector = SearchVectorField(null=True)
    metadata = models.JSONField(default=dict, blank=True)
    source_request_id = models.CharField(
        max_length=40, blank=True, default="", help_text="The resolve that produced it."
    )
    source_turn = models.CharField(
        max_length=80, blank=True, default="", help_text="The turn (resolve id + index)."
    )
    strength = models.FloatField(default=1.0)
    # When the user said it: the time of the turn it came from (its resolve), not of the write
    # after the response; a restatement that updates the memory moves it. Null for a memory added
    # through the API or the admin without one.
    observed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    # When a newer memory replaced this one (a new home, a new job): kept as the user's history,
    # listed and exported, under retention like any other, but never recalled or injected.
    superseded_at = models.DateTimeField(null=True, blank=True)
    # The id of the memory that replaced it. An id, not a foreign key: retention and erasure
    # delete memories in SQL, and the replacement may go before the history it replaced.
    superseded_by = models.BigIntegerField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "memories"
        ordering = ["user_id", "-created_at"]
        indexes = [
            models.Index(fields=["user_id", "-created_at", "-id"], name="memory_user_recent"),
            HnswIndex(
                name="memory_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
            GinIndex(fields=["search_vector"], name="memory_search_vector_gin"),
            models.Index(fields=["expires_at"], name="memory_expiry"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.content[:60]}"


class MemoryTurn(models.Model):
    """A turn waiting to be written to memory (and, once written, the proof that it was: writes are
    idempotent per turn). Holds the user's message only until the write has run."""

    STATUS = [
        ("pending", "pending"),
        ("written", "written"),
        ("skipped", "skipped"),
        ("failed", "failed"),
    ]

    resolve_id = models.CharField(max_length=40, unique=True)
    route = models.CharField(max_length=100)
    user_id = models.CharField(max_length=200)
    user_text = models.TextField(blank=True, default="")
    assistant_text = models.TextField(blank=True, default="")
    extractor = models.CharField(max_length=100, default="local")
    status = models.CharField(max_length=16, choices=STATUS, default="pending")
    error = models.TextField(blank=True, default="")
    added = models.PositiveIntegerField(default=0)
    updated = models.PositiveIntegerField(default=0)
    deleted = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)  # at resolve: the memories' observed_at
    # When the answer arrived and the write was sent; a turn still pending long after it was
    # handed back lost its send (the broker was down) and is sent again (memory.resend_stranded).
    handed_back_at = models.DateTimeField(null=True, blank=True)
    # The API key whose resolve started the turn: the extractor's call is charged to its budget.
    key_id = models.BigIntegerField(null=True, blank=True)
    written_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.resolve_id


class ExternalIndex(models.Model):
    """A Milvus or Qdrant collection holding the tenant's memory vectors for the routes whose
    memory source recalls there (``memory.stores.sync``). Recorded the first time such a route
    recalls, and filled then with every memory of the tenant; from then on every write, delete,
    erase and retention of memories reaches it. ``stale``: a change failed to reach it, so the
    next recall through it fills it again from these rows."""

    backend = models.CharField(max_length=16)
    written = models.CharField(
        max_length=2000, blank=True, default="", help_text="The uri/url; empty: the platform's."
    )
    stale = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    synced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["backend", "written"], name="memory_external_index")
        ]

    def __str__(self) -> str:
        return f"{self.backend}: {self.written or 'platform'}"
