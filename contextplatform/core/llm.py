"""The one client for the platform's language models: OpenAI-compatible chat deployments.

Everything that asks a model for an answer goes through here (the relevance judge, the memory
extractor), so they read deployments, send requests and fail the same way:

* ``LLMDeployment``: where a deployment is and how to ask it (base URL, model, key, timeout,
  output cap, JSON mode); ``chat_request`` and ``headers`` build the request.
* ``complete`` / ``complete_sync``: one chat-completions call, its answer read up to
  ``MAX_RESPONSE_BYTES`` within the deployment's timeout, the assistant message content returned.
  Whatever goes wrong (timeout, transport, a non-200 status, an oversized or malformed body) is an
  ``LLMError`` whose message names the deployment and what happened.
* ``known_deployments`` / ``configured_deployment``: the registry, ``settings.LLM_DEPLOYMENTS``.

Deployments are the operator's settings, not a tenant's configuration, so these calls do not go
through the tenant allow-list of ``contextplatform.core.outbound``. What the answer must say is the
caller's business: it parses the returned content itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

DEFAULT_TIMEOUT_MS = 10_000
DEFAULT_MAX_DOCUMENT_CHARS = 2_000
MAX_RESPONSE_BYTES = 1024 * 1024

Messages = Sequence[Mapping[str, str]]


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
    json_mode: bool = True  # send response_format json_object; the answer is validated anyway
    max_tokens: int | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.url.rstrip('/')}/v1/chat/completions"

    @property
    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def chat_request(self, messages: Messages) -> dict[str, Any]:
        """A deterministic chat-completions body for this deployment (JSON mode when it has it)."""
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(message) for message in messages],
            "temperature": 0,
        }
        if self.json_mode:
            request["response_format"] = {"type": "json_object"}
        if self.max_tokens is not None:
            request["max_tokens"] = self.max_tokens
        return request


# --------------------------------------------------------------------------------------------
# Reading the answer.


def message_content(payload: Any) -> str:
    """The first choice's assistant message content; an LLMError when there is none."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices:
        raise LLMError("response has no choices")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str) or not content.strip():
        raise LLMError("response has no message content")
    return content


def strip_fence(content: str) -> str:
    """Tolerate one Markdown code fence around the JSON, nothing else."""
    text = content.strip()
    match = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, flags=re.DOTALL)
    return match.group(1) if match else text


def answer_content(body: bytes) -> str:
    """The assistant message content of a chat-completions response body."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise LLMError(f"response is not JSON: {error}") from None
    return message_content(payload)


# --------------------------------------------------------------------------------------------
# The call.


async def complete(deployment: LLMDeployment, messages: Messages, *, role: str = "model") -> str:
    """Ask ``deployment`` once; the assistant message content. The whole exchange is abandoned
    after the deployment's ``timeout_ms``. ``role`` is how messages name the deployment ("judge
    'fast' timed out after 1500 ms")."""
    call = _Call(deployment, role)
    try:
        status, body = await asyncio.wait_for(call.post_async(messages), call.seconds)
    except (TimeoutError, httpx.TimeoutException):
        raise call.timed_out() from None
    except httpx.HTTPError as error:
        raise call.unreachable(error) from error
    return call.answer(status, body)


def complete_sync(deployment: LLMDeployment, messages: Messages, *, role: str = "model") -> str:
    """``complete`` for synchronous callers (a Celery task): each connect / read / write is bounded
    by the timeout, and the body is given up once the exchange has run that long."""
    call = _Call(deployment, role)
    try:
        status, body = call.post_sync(messages)
    except httpx.TimeoutException:
        raise call.timed_out() from None
    except httpx.HTTPError as error:
        raise call.unreachable(error) from error
    return call.answer(status, body)


class _Call:
    """One exchange with a deployment: the request, the bounded read, the errors it maps to."""

    def __init__(self, deployment: LLMDeployment, role: str) -> None:
        self.deployment = deployment
        self.label = f"{role} {deployment.name!r}"
        self.seconds = deployment.timeout_ms / 1000
        self.timeout = httpx.Timeout(self.seconds)

    async def post_async(self, messages: Messages) -> tuple[int, bytes]:
        deployment = self.deployment
        async with (
            httpx.AsyncClient(timeout=self.timeout, follow_redirects=False) as client,
            client.stream(
                "POST",
                deployment.endpoint,
                json=deployment.chat_request(messages),
                headers=deployment.headers,
            ) as response,
        ):
            _refuse_declared_size(response)
            body = await _read_async(response.aiter_bytes())
        return response.status_code, body

    def post_sync(self, messages: Messages) -> tuple[int, bytes]:
        deployment = self.deployment
        deadline = time.monotonic() + self.seconds
        with (
            httpx.Client(timeout=self.timeout, follow_redirects=False) as client,
            client.stream(
                "POST",
                deployment.endpoint,
                json=deployment.chat_request(messages),
                headers=deployment.headers,
            ) as response,
        ):
            _refuse_declared_size(response)
            body = self._read_sync(response.iter_bytes(), deadline)
        return response.status_code, body

    def _read_sync(self, chunks: Iterator[bytes], deadline: float) -> bytes:
        body = _BoundedBody()
        for chunk in chunks:
            body.add(chunk)
            if time.monotonic() > deadline:  # a trickling answer: each read is in time, not all
                raise self.timed_out()
        return body.joined()

    def answer(self, status: int, body: bytes) -> str:
        if status != 200:
            snippet = body[:200].decode("utf-8", "replace")
            raise LLMError(f"{self.label} answered HTTP {status}: {snippet}")
        return answer_content(body)

    def timed_out(self) -> LLMError:
        return LLMError(f"{self.label} timed out after {self.deployment.timeout_ms} ms")

    def unreachable(self, error: httpx.HTTPError) -> LLMError:
        return LLMError(f"{self.label} unreachable: {type(error).__name__}: {error}")


class _BoundedBody:
    """A response body that refuses to grow past ``MAX_RESPONSE_BYTES`` (counted decoded, so the
    bound holds after decompression too)."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > MAX_RESPONSE_BYTES:
            raise _too_large()
        self.chunks.append(chunk)

    def joined(self) -> bytes:
        return b"".join(self.chunks)


async def _read_async(chunks: AsyncIterator[bytes]) -> bytes:
    body = _BoundedBody()
    async for chunk in chunks:
        body.add(chunk)
    return body.joined()


def _refuse_declared_size(response: httpx.Response) -> None:
    """An answer that announces more than the bound is refused before any of it is read."""
    try:
        declared = int(response.headers["content-length"])
    except (KeyError, ValueError):
        return
    if declared > MAX_RESPONSE_BYTES:
        raise _too_large()


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
