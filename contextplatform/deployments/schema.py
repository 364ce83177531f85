"""The written form of a deployment (what POST and PUT take), validated with pydantic.

No database here: services and the admin form both validate through ``DeploymentSpec``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from contextplatform.core.http_headers import checked_headers
from contextplatform.core.http_urls import checked_http_url
from contextplatform.deployments.pricing import PriceSpec

# The same names as routes and recipes, so a route's ``model.upstream`` reads like one.
DEPLOYMENT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
PROTOCOLS = ("openai", "anthropic")
# A deployment that speaks OpenAI Responses serves what an OpenAI one does (the gateway translates
# between Chat Completions and Responses both ways), so a route may list the two as each other's
# fallbacks; Anthropic's is a provider of its own.
RESPONSES_PROTOCOL = "openai_responses"


def provider_of(protocol: str) -> str:
    """The provider whose calls a deployment of ``protocol`` serves: ``openai`` for both of
    OpenAI's protocols, else the protocol itself."""
    return "openai" if protocol == RESPONSES_PROTOCOL else protocol


MAX_URL_CHARS = 2000
MAX_KEY_CHARS = 4096
MAX_HEADERS = 32
MAX_HEADER_VALUE_CHARS = 2000
MIN_TIMEOUT_MS = 100
MAX_TIMEOUT_MS = 600_000

# The headers a provider reads its API key from: the key has its own field (api_key), which the
# gateway sends as the protocol's header (Authorization: Bearer, or x-api-key), and a header of
# these names would fight it or carry a second copy of the key. Other credentials a deployment
# needs (a proxy's or an AI gateway's own, such as Helicone-Auth) are headers like any other:
# every header value is write-only and stored encrypted.
KEY_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",  # Azure OpenAI
        "x-goog-api-key",  # Google's Gemini endpoints
        "ocp-apim-subscription-key",  # Azure API Management
        "anthropic-api-key",
        "openai-api-key",
    }
)
# The HTTP client's to set for each request.
TRANSPORT_HEADERS = frozenset(
    {"host", "content-length", "content-type", "transfer-encoding", "connection"}
)

REFUSED_HEADERS = {
    **dict.fromkeys(TRANSPORT_HEADERS, "is set by the gateway for each request"),
    **dict.fromkeys(KEY_HEADERS, "is refused: the key goes in api_key, stored encrypted"),
}

# Fields a representation carries that a write ignores (a GET body posted back is accepted).
READ_ONLY_FIELDS = (
    "api_key_set",
    "headers_set",
    "calibration",
    "calibration_samples",
    "effective_price",
    "price_source",
    "created_at",
    "updated_at",
)


class DeploymentLimits(BaseModel):
    """What the provider allows this deployment a minute: the gateway skips it for a call once it
    reached either (the next deployment of the route is tried; none left: 429 ``rate_limited``).
    ``tpm`` counts the input and output tokens the provider reported."""

    model_config = ConfigDict(extra="forbid")

    rpm: int | None = Field(default=None, ge=1, le=100_000_000, description="requests a minute")
    tpm: int | None = Field(
        default=None, ge=1, le=100_000_000_000, description="tokens (input and output) a minute"
    )

    def stored(self) -> dict[str, int]:
        return {name: value for name, value in (("rpm", self.rpm), ("tpm", self.tpm)) if value}


class DeploymentSpec(BaseModel):
    """A deployment as written. ``api_key`` and the values of ``headers`` are write-only: the
    service decides what their absence means (keep the stored key, and headers, on PUT); an object
    of headers replaces them all, ``null`` or ``{}`` removes them."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=DEPLOYMENT_NAME_PATTERN)
    protocol: Literal["openai", "openai_responses", "anthropic"]
    base_url: str = Field(min_length=1, max_length=MAX_URL_CHARS)
    model: str = Field(min_length=1, max_length=200, description="the upstream's model name")
    api_key: str | None = Field(default=None, min_length=1, max_length=MAX_KEY_CHARS)
    timeout_ms: int = Field(default=60_000, ge=MIN_TIMEOUT_MS, le=MAX_TIMEOUT_MS)
    context_window: int = Field(default=128_000, ge=256, le=10_000_000)
    max_output_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    headers: dict[str, str] | None = Field(
        default=None, max_length=MAX_HEADERS, description="write-only values: stored encrypted"
    )
    may_judge: bool = Field(
        default=True, description="whether the relevance judge may send documents to it"
    )
    price: PriceSpec | None = Field(
        default=None,
        description="USD per million tokens; null = the public price of a known model, if any",
    )
    limits: DeploymentLimits | None = Field(
        default=None,
        description="requests (rpm) and tokens (tpm) a minute the gateway sends it at most; "
        "absent or {}: no limit",
    )

    @field_validator("base_url")
    @classmethod
    def http_url(cls, value: str) -> str:
        return checked_base_url(value)

    @field_validator("headers")
    @classmethod
    def plain_headers(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return checked_headers(
            value, refused=REFUSED_HEADERS, max_value_chars=MAX_HEADER_VALUE_CHARS
        )

    @field_validator("api_key")
    @classmethod
    def one_line_key(cls, value: str | None) -> str | None:
        if value is not None and (value != value.strip() or any(c in value for c in "\r\n")):
            raise ValueError("must not contain line breaks or surrounding spaces")
        return value

    @model_validator(mode="after")
    def output_fits_window(self) -> DeploymentSpec:
        if self.max_output_tokens is not None and self.max_output_tokens >= self.context_window:
            raise ValueError("max_output_tokens must be lower than context_window")
        return self


def checked_base_url(value: str) -> str:
    """An http(s) URL with a host and nothing that belongs elsewhere (credentials, fragment)."""
    return checked_http_url(value, credentials_hint="the key has its own field, api_key")
