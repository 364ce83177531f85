"""A tenant's deployment: an upstream model the gateway forwards to and a judge may ask."""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models

from contextplatform.deployments.pricing import Price, price_of
from contextplatform.deployments.schema import DEPLOYMENT_NAME_PATTERN


class Deployment(models.Model):
    class Protocol(models.TextChoices):
        OPENAI = "openai", "OpenAI Chat Completions"
        ANTHROPIC = "anthropic", "Anthropic Messages"
        OPENAI_RESPONSES = "openai_responses", "OpenAI Responses"

    name = models.CharField(
        max_length=100, unique=True, validators=[RegexValidator(DEPLOYMENT_NAME_PATTERN)]
    )
    protocol = models.CharField(max_length=16, choices=Protocol.choices)
    base_url = models.CharField(max_length=2000, help_text="what the provider's SDK takes")
    model = models.CharField(max_length=200, help_text="the model name sent upstream")
    # A Fernet token (contextplatform.core.secrets), never the plain key; blank = no key.
    api_key_encrypted = models.TextField(blank=True, default="", editable=False)
    timeout_ms = models.PositiveIntegerField(default=60_000)
    context_window = models.PositiveIntegerField(default=128_000)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    # Extra request headers, {name: Fernet token of its value}: the names are shown, the values
    # never (write-only, like the key).
    headers_encrypted = models.JSONField(default=dict, blank=True, editable=False)
    # USD per million tokens ({"input_per_mtok", "output_per_mtok", "cached_input_per_mtok",
    # "cache_write_per_mtok"}); null = the public price of a known model, if any (pricing.py).
    price = models.JSONField(null=True, blank=True, default=None)
    may_judge = models.BooleanField(
        default=True, help_text="whether the relevance judge may send documents to it"
    )
    # {"rpm": n, "tpm": n}, either absent: what the gateway sends it a minute at most
    # (schema.DeploymentLimits; counted by gateway/deployment_limits.py).
    limits = models.JSONField(default=dict, blank=True)
    # provider input tokens / estimated input tokens, an exponentially weighted average kept by the
    # gateway after each answer (deployments.calibration); null until the first answer.
    calibration = models.FloatField(
        null=True, blank=True, editable=False, help_text="provider tokens per estimated token"
    )
    calibration_samples = models.PositiveIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name

    @property
    def api_key_set(self) -> bool:
        return bool(self.api_key_encrypted)

    @property
    def effective_price(self) -> Price | None:
        return price_of(self.price, self.model)

    @property
    def header_names(self) -> list[str]:
        return sorted(self.headers_encrypted or {}, key=str.lower)
