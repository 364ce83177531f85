"""Per-tenant data that the built-in sources read: user profiles and session messages, the
knowledge base, and the MCP servers that MCP sources name."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.core.validators import RegexValidator
from django.db import models
from pgvector.django import HnswIndex, VectorField

from sources.mcp_config import DEFAULT_TIMEOUT_MS, MCP_SERVER_NAME_PATTERN


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
    # A tool exchange's members beside role and content (sources.messages.MESSAGE_EXTRAS): an
    # assistant's OpenAI tool_calls, a tool message's tool_call_id and name.
    extra = models.JSONField(default=dict, blank=True)
    resolve_id = models.CharField(max_length=40, blank=True, default="", db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="message_session_seq_unique")
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.role}"


EMBEDDING_DIMENSIONS = getattr(settings, "EMBEDDING_DIMENSIONS", 384)


class Collection(models.Model):
    """A tenant's knowledge base: documents, split into chunks that are embedded and indexed."""

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True, default="")
    embedder = models.CharField(
        max_length=300, blank=True, default="", help_text="Identity of the embedder that filled it."
    )
    version = models.PositiveBigIntegerField(
        default=0, help_text="Bumped whenever a document changes; part of every cache key."
    )
    # What the local judge's scores mean here (sources/judge_calibration.py), measured on the
    # collection's own chunks after each ingestion job; null: the embedder's prior applies.
    judge_calibration = models.JSONField(null=True, blank=True, default=None)
    judge_calibrated_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Document(models.Model):
    STATUS_CHOICES = [("pending", "pending"), ("indexed", "indexed"), ("failed", "failed")]

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="documents")
    external_id = models.CharField(max_length=200)
    title = models.CharField(max_length=500, blank=True, default="")
    text = models.TextField()
    metadata = models.JSONField(default=dict, blank=True)
    content_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=STATUS_CHOICES, default="pending")
    error = models.TextField(blank=True, default="")
    chunk_count = models.PositiveIntegerField(default=0)
    indexed_hash = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["collection_id", "external_id"]
        constraints = [
            models.UniqueConstraint(fields=["collection", "external_id"], name="document_id_unique")
        ]

    def __str__(self) -> str:
        return self.external_id


class Chunk(models.Model):
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="chunks")
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    ordinal = models.PositiveIntegerField()
    title = models.CharField(max_length=500, blank=True, default="")
    text = models.TextField()
    metadata = models.JSONField(default=dict, blank=True)
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS)
    search_vector = SearchVectorField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["document_id", "ordinal"]
        indexes = [
            HnswIndex(
                name="chunk_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
            GinIndex(fields=["search_vector"], name="chunk_search_vector_gin"),
            GinIndex(fields=["metadata"], name="chunk_metadata_gin", opclasses=["jsonb_path_ops"]),
            models.Index(fields=["collection", "-created_at"], name="chunk_collection_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.ordinal}"


class IngestionJob(models.Model):
    STATUS_CHOICES = [
        ("queued", "queued"),
        ("running", "running"),
        ("done", "done"),
        ("failed", "failed"),
    ]

    id = models.CharField(primary_key=True, max_length=40)
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="jobs")
    status = models.CharField(max_length=16, choices=STATUS_CHOICES, default="queued")
    document_ids = models.JSONField(default=list)
    total = models.PositiveIntegerField(default=0)
    processed = models.PositiveIntegerField(default=0)
    chunks_written = models.PositiveIntegerField(default=0)
    error = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.id

    @property
    def progress(self) -> float:
        if self.total:
            return self.processed / self.total
        return 1.0 if self.status == "done" else 0.0  # a job with nothing to do


class McpServer(models.Model):
    """A tenant's MCP server (Streamable HTTP) that ``mcp_resources`` sources and ``mcp`` RAG
    backends name. Header values are write-only: Fernet tokens (``contextplatform.core.secrets``),
    never the plain values, which only the MCP client decrypts (``sources.mcp.selectors``)."""

    name = models.CharField(
        max_length=100, unique=True, validators=[RegexValidator(MCP_SERVER_NAME_PATTERN)]
    )
    url = models.CharField(max_length=2000, help_text="the server's Streamable HTTP endpoint")
    # {header name: Fernet token of its value}; the names are shown, the values never.
    headers_encrypted = models.JSONField(default=dict, blank=True, editable=False)
    timeout_ms = models.PositiveIntegerField(
        default=DEFAULT_TIMEOUT_MS, help_text="the deadline of each exchange with the server"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name",)
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name

    @property
    def header_names(self) -> list[str]:
        return sorted(self.headers_encrypted or {}, key=str.lower)
