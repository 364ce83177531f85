"""The one client for the platform's language models: chat deployments speaking OpenAI Chat
Completions or Anthropic Messages.

Everything that asks a model for an answer goes through here (the relevance judge, the memory
extractor), so they read deployments, send requests and fail the same way:

* ``LLMDeployment``: where a deployment is and how to ask it (protocol, base URL, model, key,
  timeout, output cap, JSON mode); ``chat_request`` and ``headers`` build the request in the
  deployment's protocol.
* ``complete`` / ``complete_sync``: one call, its answer read up to ``MAX_RESPONSE_BYTES`` within
  the deployment's timeout, the answer's text returned (OpenAI: the first choice's message
  content; Anthropic: the text blocks of ``content``). Whatever goes wrong (timeout, transport, a
  refused address, a non-200 status, an oversized or malformed body) is an ``LLMError`` whose
  message names the deployment and what happened.
* ``known_deployments`` / ``configured_deployment``: the platform's registry,
  ``settings.LLM_DEPLOYMENTS`` (OpenAI-compatible; a tenant's own deployments are read by
  ``contextplatform.deployments.llm``, which builds an ``LLMDeployment`` of each).

The platform's deployments are the operator's settings, not a tenant's configuration, so their
calls do not go through the tenant allow-list of ``contextplatform.core.outbound``. A tenant's
deployment is tenant configuration: its ``allowlist`` is set, and its calls go through the guarded
client with that allow-list. What the answer must say is the caller's business: it parses the
returned text itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import json
import os
import re
import time
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from contextplatform.core.outbound.bounded import (
    ByteBudget,
    ResponseTooLarge,
    declared_length,
    read_bounded,
)
from contextplatform.core.outbound.httpx_client import guarded_async_client, shared_ssl_context
from contextplatform.core.outbound.policy import OutboundError

# Re-exported for the kernel's callers and tests that name them here.
from contextplatform.protocols.anthropic_messages import (
    DEFAULT_MAX_TOKENS as DEFAULT_ANTHROPIC_MAX_TOKENS,
)
from contextplatform.protocols.anthropic_messages import (
    JSON_INSTRUCTION as ANTHROPIC_JSON_INSTRUCTION,
)
from contextplatform.protocols.anthropic_messages import VERSION as ANTHROPIC_VERSION
from contextplatform.protocols.base import ProtocolError, ProtocolName, ProviderProtocol
from contextplatform.protocols.registry import ANTHROPIC, OPENAI, protocol_for
from contextplatform.protocols.usage import ProviderUsage, usage_from_response

DEFAULT_TIMEOUT_MS = 10_000
DEFAULT_MAX_DOCUMENT_CHARS = 2_000
MAX_RESPONSE_BYTES = 1024 * 1024

Messages = Sequence[Mapping[str, str]]
LLMProtocol = ProtocolName
__all__ = [
    "ANTHROPIC_JSON_INSTRUCTION",
    "ANTHROPIC_VERSION",
    "DEFAULT_ANTHROPIC_MAX_TOKENS",
    "LLMDeployment",
    "LLMError",
    "answer_content",
    "complete",
    "complete_sync",
    "configured_deployment",
    "deployment_from_settings",
    "known_deployments",
    "message_content",
    "messages_text",
    "strip_fence",
]
T = TypeVar("T")


class LLMError(Exception):
    """A model gave no usable answer, or its deployment is not configured properly."""


@dataclass(frozen=True)
class LLMDeployment:
    name: str
    url: str
    model: str
    api_key: str | None = None
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS  # how much of each document a judge shows
    json_mode: bool = True  # ask for JSON (OpenAI: response_format); the answer is validated anyway
    max_tokens: int | None = None
    protocol: LLMProtocol = "openai"
    # ``url`` is what the provider's SDK takes as its base URL (a tenant deployment's base_url:
    # OpenAI's already ends in /v1); otherwise it is the server's root (the platform's settings).
    sdk_base_url: bool = False
    extra_headers: tuple[tuple[str, str], ...] = ()
    # Set for a tenant's deployment: its calls go through the outbound guard with this allow-list.
    # None for the platform's own deployments (settings), which are not tenant configuration.
    allowlist: tuple[str, ...] | None = None

    @property
    def wire(self) -> ProviderProtocol:
        """The deployment's protocol (``contextplatform.protocols``)."""
        return protocol_for(self.protocol)

    @property
    def endpoint(self) -> str:
        return self.wire.endpoint(self.url, sdk_base_url=self.sdk_base_url)

    @property
    def headers(self) -> dict[str, str]:
        return self.wire.headers(self.api_key, dict(self.extra_headers))

    def chat_request(self, messages: Messages) -> dict[str, Any]:
        """A deterministic request body for this deployment's protocol (JSON mode when it has
        it)."""
        return self.wire.chat_request(
            self.model, messages, json_mode=self.json_mode, max_tokens=self.max_tokens
        )


# --------------------------------------------------------------------------------------------
# Reading the answer.


def _text(wire: ProviderProtocol, payload: Any) -> str:
    try:
        return wire.answer_text(payload)
    except ProtocolError as error:
        raise LLMError(str(error)) from None


def message_content(payload: Any) -> str:
    """The first choice's assistant message content; an LLMError when there is none."""
    return _text(OPENAI, payload)


def strip_fence(content: str) -> str:
    """Tolerate one Markdown code fence around the JSON, nothing else."""
    text = content.strip()
    match = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, flags=re.DOTALL)
    return match.group(1) if match else text


def messages_text(payload: Any) -> str:
    """An Anthropic message's text: its ``content`` text blocks, joined; an LLMError when there
    is none."""
    return _text(ANTHROPIC, payload)


def answer_content(body: bytes, protocol: LLMProtocol = "openai") -> str:
    """The answer's text of a response body in ``protocol``'s shape."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise LLMError(f"response is not JSON: {error}") from None
    return _text(protocol_for(protocol), payload)


# --------------------------------------------------------------------------------------------
# The call.


@dataclass
class LLMUsage:
    """What the calls made under ``metered`` cost: how many were sent, and the tokens their
    answers reported (a call that failed counts, with no tokens). ``input_tokens`` counts every
    prompt token, cached reads and cache writes included, as the gateway's usage does; those two
    are counted apart too, each having its own price."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0

    def add_answer(self, body: bytes, protocol: LLMProtocol) -> None:
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return
        # Either provider's usage shape is read, whichever ``protocol`` the deployment speaks.
        usage = usage_from_response(payload)
        if usage is None:
            return
        self.input_tokens += usage.input
        self.output_tokens += usage.output
        self.cached_input_tokens += usage.cached_input
        self.cache_write_tokens += usage.cache_write

    def add(self, other: LLMUsage) -> None:
        """Count ``other``'s calls and tokens in these."""
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_input_tokens += other.cached_input_tokens
        self.cache_write_tokens += other.cache_write_tokens

    def provider_usage(self) -> ProviderUsage:
        """The tokens as a provider's usage, for pricing (``pricing.usage_cost``)."""
        return ProviderUsage(
            input=self.input_tokens,
            output=self.output_tokens,
            cached_input=self.cached_input_tokens,
            cache_write=self.cache_write_tokens,
        )


_METER: ContextVar[LLMUsage | None] = ContextVar("llm_usage_meter", default=None)


@contextmanager
def metered() -> Iterator[LLMUsage]:
    """Count the calls this context (this task, or this thread) makes through ``complete`` and
    ``complete_sync``, and their reported tokens."""
    usage = LLMUsage()
    token = _METER.set(usage)
    try:
        yield usage
    finally:
        _METER.reset(token)


async def complete(deployment: LLMDeployment, messages: Messages, *, role: str = "model") -> str:
    """Ask ``deployment`` once; the answer's text. The whole exchange is abandoned after the
    deployment's ``timeout_ms``. ``role`` is how messages name the deployment ("judge 'fast' timed
    out after 1500 ms")."""
    call = _Call(deployment, role)
    call.count()
    try:
        status, body = await asyncio.wait_for(call.post_async(messages), call.seconds)
    except (TimeoutError, httpx.TimeoutException):
        raise call.timed_out() from None
    except httpx.HTTPError as error:
        raise call.unreachable(error) from error
    except OutboundError as error:
        raise call.refused(error) from error
    return call.answer(status, body)


def complete_sync(deployment: LLMDeployment, messages: Messages, *, role: str = "model") -> str:
    """``complete`` for synchronous callers (a Celery task): each connect / read / write is bounded
    by the timeout, and the body is given up once the exchange has run that long. A tenant's
    deployment is asked through the guarded client, which is asynchronous: the call runs on an
    event loop of its own, whole exchange bounded as in ``complete``."""
    if deployment.allowlist is not None:
        return _run_blocking(complete(deployment, messages, role=role))
    call = _Call(deployment, role)
    call.count()
    try:
        status, body = call.post_sync(messages)
    except httpx.TimeoutException:
        raise call.timed_out() from None
    except httpx.HTTPError as error:
        raise call.unreachable(error) from error
    return call.answer(status, body)


def _run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end from synchronous code: on this thread when it runs no event
    loop (a Celery worker), else on a thread of its own (a caller inside a loop must not block
    it re-entrantly)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # The caller's context goes along, so the call still counts in its ``metered`` usage.
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(context.run, asyncio.run, coroutine).result()


class _Call:
    """One exchange with a deployment: the request, the bounded read, the errors it maps to."""

    def __init__(self, deployment: LLMDeployment, role: str) -> None:
        self.deployment = deployment
        self.label = f"{role} {deployment.name!r}"
        self.seconds = deployment.timeout_ms / 1000
        self.timeout = httpx.Timeout(self.seconds)

    def _async_client(self) -> httpx.AsyncClient:
        allowlist = self.deployment.allowlist
        if allowlist is None:
            return httpx.AsyncClient(
                timeout=self.timeout, follow_redirects=False, verify=shared_ssl_context()
            )
        # A tenant's deployment: refused, before sending and at connect time, unless its address
        # is public or in the tenant's allow-list (redirects are not followed, as above).
        return guarded_async_client(allowlist=allowlist, timeout_s=self.seconds, max_redirects=0)

    async def post_async(self, messages: Messages) -> tuple[int, bytes]:
        deployment = self.deployment
        async with (
            self._async_client() as client,
            client.stream(
                "POST",
                deployment.endpoint,
                json=deployment.chat_request(messages),
                headers=deployment.headers,
            ) as response,
        ):
            body = await _read_async(response)
        return response.status_code, body

    def post_sync(self, messages: Messages) -> tuple[int, bytes]:
        deployment = self.deployment
        deadline = time.monotonic() + self.seconds
        with (
            httpx.Client(
                timeout=self.timeout, follow_redirects=False, verify=shared_ssl_context()
            ) as client,
            client.stream(
                "POST",
                deployment.endpoint,
                json=deployment.chat_request(messages),
                headers=deployment.headers,
            ) as response,
        ):
            body = self._read_sync(response, deadline)
        return response.status_code, body

    def _read_sync(self, response: httpx.Response, deadline: float) -> bytes:
        """The body, bounded as ``_read_async``'s (the synchronous client has no async chunks)."""
        budget = ByteBudget(MAX_RESPONSE_BYTES)
        chunks: list[bytes] = []
        try:
            budget.check_declared(declared_length(response.headers))
            for chunk in response.iter_bytes():
                budget.spend(len(chunk))
                chunks.append(chunk)
                if time.monotonic() > deadline:  # a trickling answer: each read is in time, not all
                    raise self.timed_out()
        except ResponseTooLarge as error:
            raise _too_large() from error
        return b"".join(chunks)

    def count(self) -> None:
        meter = _METER.get()
        if meter is not None:
            meter.calls += 1

    def answer(self, status: int, body: bytes) -> str:
        meter = _METER.get()
        if meter is not None:
            meter.add_answer(body, self.deployment.protocol)
        if status != 200:
            snippet = body[:200].decode("utf-8", "replace")
            raise LLMError(f"{self.label} answered HTTP {status}: {snippet}")
        return answer_content(body, self.deployment.protocol)

    def timed_out(self) -> LLMError:
        return LLMError(f"{self.label} timed out after {self.deployment.timeout_ms} ms")

    def unreachable(self, error: httpx.HTTPError) -> LLMError:
        return LLMError(f"{self.label} unreachable: {type(error).__name__}: {error}")

    def refused(self, error: OutboundError) -> LLMError:
        return LLMError(f"{self.label} refused by the outbound guard: {error}")


async def _read_async(response: httpx.Response) -> bytes:
    """The body, refused past ``MAX_RESPONSE_BYTES`` (announced, or counted decoded, so the bound
    holds after decompression too)."""
    try:
        return await read_bounded(
            response.aiter_bytes(), MAX_RESPONSE_BYTES, headers=response.headers
        )
    except ResponseTooLarge as error:
        raise _too_large() from error


def _too_large() -> LLMError:
    return LLMError(f"response larger than {MAX_RESPONSE_BYTES} bytes")


# --------------------------------------------------------------------------------------------
# The registry: settings.LLM_DEPLOYMENTS.


def _configured() -> Mapping[str, Any]:
    from django.conf import settings

    deployments = getattr(settings, "LLM_DEPLOYMENTS", None) or {}
    if not isinstance(deployments, Mapping):
        raise LLMError("settings.LLM_DEPLOYMENTS must be a mapping of name to deployment")
    return deployments


def known_deployments() -> list[str]:
    """The configured deployment names, sorted."""
    return sorted(_configured())


def configured_deployment(name: str) -> LLMDeployment | None:
    """The deployment called ``name`` (None when there is none); LLMError when its entry is
    broken, so every user of a deployment refuses the same mistakes with the same words."""
    deployments = _configured()
    return deployment_from_settings(name, deployments[name]) if name in deployments else None


def deployment_from_settings(name: str, config: Any) -> LLMDeployment:
    if not isinstance(config, Mapping):
        raise LLMError(f"LLM deployment {name!r} must be an object")
    url, model = config.get("url"), config.get("model")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise LLMError(f"LLM deployment {name!r} needs an http(s) url")
    if not isinstance(model, str) or not model:
        raise LLMError(f"LLM deployment {name!r} needs a model")
    return LLMDeployment(
        name=name,
        url=url,
        model=model,
        api_key=_api_key(name, config),
        timeout_ms=_positive_int(name, config, "timeout_ms", DEFAULT_TIMEOUT_MS),
        max_document_chars=_positive_int(
            name, config, "max_document_chars", DEFAULT_MAX_DOCUMENT_CHARS
        ),
        json_mode=bool(config.get("json_mode", True)),
        max_tokens=_optional_positive_int(name, config, "max_tokens"),
    )


def _api_key(name: str, config: Mapping[str, Any]) -> str | None:
    if config.get("api_key"):
        return str(config["api_key"])
    variable = config.get("api_key_env")
    if not variable:
        return None
    key = os.environ.get(str(variable))
    if not key:
        raise LLMError(f"LLM deployment {name!r}: environment variable {variable} is not set")
    return key


def _positive_int(name: str, config: Mapping[str, Any], field: str, default: int) -> int:
    value = _optional_positive_int(name, config, field)
    return default if value is None else value


def _optional_positive_int(name: str, config: Mapping[str, Any], field: str) -> int | None:
    value = config.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise LLMError(f"LLM deployment {name!r}: {field} must be a positive integer")
    return value
