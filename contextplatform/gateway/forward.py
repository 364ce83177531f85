"""The call to the route's deployment: its URL and key header as the provider's own SDK sends
them, its model name in place of the client's, its timeout, and a bounded answer. An upstream 4xx
passes through as it is (``UpstreamRejected``); a 5xx, an unreadable or oversized answer is 502 and
a timeout 504 (``GatewayError``). Outbound connections go through the kernel's SSRF guard with
the tenant's allow-list, like every other outbound URL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict, Unpack

import aiohttp
from django.conf import settings
from opentelemetry.trace import SpanKind
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from contextplatform.core import safe_json, tracing
from contextplatform.core.loop_clients import LoopClients
from contextplatform.core.outbound import bounded
from contextplatform.core.outbound.aiohttp_client import (
    GuardedSession,
    checked_url,
    guarded_session,
)
from contextplatform.core.outbound.policy import OutboundBlocked, OutboundError
from contextplatform.core.outbound.urls import display_url
from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway.protocol import GatewayError, upstream_error, upstream_timeout
from contextplatform.protocols import openai_responses
from contextplatform.protocols.registry import protocol_for
from contextplatform.protocols.usage import usage_from_response

DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_STREAM_BYTES = 64 * 1024 * 1024
# Client headers that the upstream should see as the client sent them (feature switches).
PASSED_HEADERS = ("anthropic-version", "anthropic-beta")
CLIENT_CACHE_SIZE = 64
DEFAULT_CONNECT_RETRIES = 2
# The backoff between connection attempts: 50 ms, then doubling, never over half a second.
RETRY_INITIAL_S = 0.05
RETRY_MAX_S = 0.5
RETRY_JITTER_S = 0.05

logger = logging.getLogger("contextplatform.gateway")


def max_response_bytes() -> int:
    return int(getattr(settings, "GATEWAY_MAX_RESPONSE_BYTES", DEFAULT_MAX_RESPONSE_BYTES))


def max_stream_bytes() -> int:
    return int(getattr(settings, "GATEWAY_MAX_STREAM_BYTES", DEFAULT_MAX_STREAM_BYTES))


class UpstreamRejected(Exception):
    """The upstream refused the request (4xx): its status and body go back to the client."""

    def __init__(
        self,
        status: int,
        body: bytes,
        content_type: str,
        headers: Mapping[str, str] | None = None,
    ):
        super().__init__(f"upstream answered HTTP {status}")
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers: Mapping[str, str] = headers or {}


class UpstreamUnavailable(GatewayError):
    """The deployment gave no answer to pass on (a connection error, a timeout, a 5xx): the call
    may move to the route's next deployment. ``kind``: ``connection``, ``timeout`` or
    ``status``; ``retry_after``: the header the deployment sent, when it sent one."""

    def __init__(
        self,
        error: GatewayError,
        kind: str,
        upstream_status: int | None = None,
        retry_after: str | None = None,
    ) -> None:
        super().__init__(error.status, error.code, error.message, param=error.param)
        self.kind = kind
        self.upstream_status = upstream_status
        self.retry_after = retry_after


@dataclass(frozen=True)
class UpstreamAnswer:
    status: int
    body: bytes
    payload: dict[str, Any]


RESPONSES_WIRE = "openai_responses"


def upstream_url(upstream: Upstream) -> str:
    """``base_url`` plus the path the provider's SDK appends to its own base URL."""
    if upstream.wire == RESPONSES_WIRE:
        return f"{upstream.base_url.rstrip('/')}/responses"
    return protocol_for(upstream.protocol).endpoint(upstream.base_url, sdk_base_url=True)


def upstream_headers(upstream: Upstream, client_headers: Mapping[str, str]) -> dict[str, str]:
    headers = {**upstream.headers, "content-type": "application/json"}
    # Decoded bytes pass through as they arrive; a compressed stream would be held back.
    headers["accept-encoding"] = "identity"
    for name in PASSED_HEADERS:
        value = client_headers.get(name)
        if value:
            headers[name] = value
    provider = protocol_for(upstream.protocol)
    for name, value in provider.required_headers().items():
        headers.setdefault(name, value)
    headers.update(provider.credentials(upstream.api_key))
    return headers


def upstream_body(
    upstream: Upstream, body: dict[str, Any], responses_fields: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The rewritten request with the deployment's model name, whatever the client sent; for a
    deployment that speaks Responses, as a Responses body (a Responses call's own fields,
    ``responses_fields``, kept; a chat call's own fields translated)."""
    named = {**body, "model": upstream.model}
    if upstream.wire == RESPONSES_WIRE:
        return openai_responses.responses_request(named, responses_fields)
    return named


# One session (its connection pool) per event loop and allow-list: a request does not pay for a
# new TCP connection to the same upstream. Each request sets its own timeout.
_clients: LoopClients[GuardedSession] = LoopClients(CLIENT_CACHE_SIZE)


async def _client(allowlist: Sequence[str]) -> GuardedSession:
    return await _clients.get(tuple(allowlist), lambda: guarded_session(allowlist=allowlist))


class UpstreamBroke(Exception):
    """The connection broke (or went silent past the timeout) while an answer was being read."""


class UpstreamResponse:
    """An upstream answer whose headers have arrived: its status, its content type, and its body
    read a piece at a time as it arrives (``async for``); closed by the caller, which ends the
    upstream's call when the body was not read to its end."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status
        self.headers = response.headers
        self.held: bytes | None = None  # a first chunk read ahead (``first_chunk``)
        # A Responses deployment's events read as chat chunks (``open_stream``).
        self.translate: openai_responses.ChatChunks | None = None

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    def __aiter__(self) -> UpstreamResponse:
        return self

    async def __anext__(self) -> bytes:
        if self.held is not None:
            chunk, self.held = self.held, None
            return chunk
        while True:
            try:
                chunk = await self._response.content.readany()
            except aiohttp.ClientError as error:
                raise UpstreamBroke(str(error) or type(error).__name__) from error
            if not chunk:
                raise StopAsyncIteration
            if self.translate is None:
                return chunk
            if translated := self.translate.feed(chunk):
                return translated

    async def aclose(self) -> None:
        if self._response.content.at_eof():
            self._response.release()  # read to its end: the connection serves the next call
        else:
            self._response.close()  # cut short: the connection goes, and the call with it


async def read_bounded(response: UpstreamResponse, limit: int) -> bytes:
    try:
        return await bounded.read_bounded(
            response, limit, headers=response.headers, where="the upstream"
        )
    except bounded.ResponseTooLarge as error:
        raise upstream_error(str(error)) from error


async def _refusal(upstream: Upstream, response: UpstreamResponse) -> Exception:
    """What a non-2xx answer becomes: a 4xx passes through, anything else is 502."""
    try:
        body = await read_bounded(response, max_response_bytes())
    finally:
        await response.aclose()
    if 400 <= response.status_code < 500:
        content_type = response.headers.get("content-type", "application/json")
        return UpstreamRejected(response.status_code, body, content_type, dict(response.headers))
    return UpstreamUnavailable(
        upstream_error(
            f"the upstream deployment {upstream.name!r} answered HTTP {response.status_code}"
        ),
        "status",
        response.status_code,
        response.headers.get("retry-after"),
    )


def failed_to_connect(error: BaseException) -> bool:
    """The connection could not be made, for a reason that may pass (refused, reset): worth
    another attempt, as nothing was sent. A name that does not resolve is not retried."""
    return isinstance(error, aiohttp.ClientConnectorError) and not isinstance(
        error, aiohttp.ClientConnectorDNSError
    )


def connection_failure(error: BaseException) -> str:
    """What went wrong reaching a deployment, in words a caller can act on (completing "deployment
    'name' ..."): the kind of failure, never the URL or the client library's message."""
    if isinstance(error, OutboundBlocked):
        return f"is refused by the tenant's outbound allow-list ({error})"
    if isinstance(error, OutboundError):  # the guard's own words: the host, never the URL
        return f"could not be reached: {error}"
    if isinstance(error, aiohttp.ClientConnectorDNSError):
        return "could not be reached: its host name does not resolve"
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        return "could not be reached: its TLS certificate was not accepted"
    if isinstance(error, aiohttp.ClientSSLError):
        return "could not be reached: the TLS handshake failed"
    if isinstance(error, aiohttp.ClientConnectorError):
        if isinstance(error.os_error, ConnectionRefusedError):
            return "refused the connection"
        return "could not be reached: the connection could not be made"
    if isinstance(error, aiohttp.ServerDisconnectedError):
        return "closed the connection before answering"
    if isinstance(error, aiohttp.ClientOSError):
        return "could not be reached: the connection broke"
    return "could not be reached"


# Whether a deployment that cannot be connected to is tried again before the call gives up on it:
# not while another deployment of the call's fallbacks is left, which answers sooner than a
# backoff does; the last one is (a single deployment's blip is retried, as before).
_RETRY_CONNECT: ContextVar[bool] = ContextVar("retry_connect", default=True)


@contextlib.contextmanager
def connect_retries(allowed: bool) -> Iterator[None]:
    token = _RETRY_CONNECT.set(allowed)
    try:
        yield
    finally:
        _RETRY_CONNECT.reset(token)


def connect_attempts() -> int:
    if not _RETRY_CONNECT.get():
        return 1
    retries = int(getattr(settings, "GATEWAY_CONNECT_RETRIES", DEFAULT_CONNECT_RETRIES))
    return 1 + max(retries, 0)


async def _send_retrying(
    client: GuardedSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    upstream: Upstream,
    where: str,
) -> aiohttp.ClientResponse:
    """Send, trying again (bounded, with exponential backoff) only when the connection could not
    be made: then no byte of the request reached the upstream, so the call cannot run twice. A
    timeout, a refused destination or a connection broken after sending is never retried. The
    first attempt goes out plainly, since almost every call ends with it: the retrying machinery
    is built only for a connection that failed."""
    timeout_s = upstream.timeout_ms / 1000
    attempts = connect_attempts()
    try:
        return await client.post(url, body=body, headers=headers, timeout_s=timeout_s)
    except Exception as error:
        # A connect timeout is a TimeoutError, not a connector error: never retried either.
        if attempts <= 1 or not failed_to_connect(error):
            raise
        first_failure = error

    def noted(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome else None
        wait_s = state.next_action.sleep if state.next_action else 0.0
        logger.warning(
            "connecting to the upstream deployment %r (%s) failed (%s); attempt %d of %d in %.2f s",
            upstream.name,
            where,
            failure,
            state.attempt_number + 2,
            attempts,
            wait_s,
        )

    logger.warning(
        "connecting to the upstream deployment %r (%s) failed (%s); attempt 2 of %d",
        upstream.name,
        where,
        first_failure,
        attempts,
    )
    await asyncio.sleep(RETRY_INITIAL_S)
    retrying = AsyncRetrying(
        retry=retry_if_exception(failed_to_connect),
        stop=stop_after_attempt(attempts - 1),
        wait=wait_exponential_jitter(
            multiplier=RETRY_INITIAL_S, max=RETRY_MAX_S, jitter=RETRY_JITTER_S
        ),
        before_sleep=noted,
        reraise=True,
    )
    response: aiohttp.ClientResponse = await retrying(
        client.post, url, body=body, headers=headers, timeout_s=timeout_s
    )
    return response


class Forwarding(TypedDict):
    """How a call reaches its deployment: the tenant's outbound allowlist, and the client's
    headers (those the upstream is to see are picked by ``upstream_headers``)."""

    allowlist: Sequence[str]
    client_headers: Mapping[str, str]
    # A Responses call's own body: what a deployment that speaks Responses receives of it beyond
    # the translated conversation.
    responses_fields: NotRequired[Mapping[str, Any]]


async def open_stream(
    upstream: Upstream, body: dict[str, Any], **forwarding: Unpack[Forwarding]
) -> UpstreamResponse:
    """The upstream's response, its status checked; the caller reads and closes it. Errors
    before the first byte are the same for a streaming call as for a non-streaming one."""
    client = await _client(forwarding["allowlist"])
    url = upstream_url(upstream)
    try:
        where = display_url(checked_url(url)[0])
    except OutboundBlocked as error:  # stored before such URLs were refused at the write
        raise upstream_error(
            f"the upstream deployment {upstream.name!r} has a base_url that is not a valid URL "
            f"({error}); correct it with PUT /api/v1/deployments/{upstream.name}"
        ) from error
    sent_body = upstream_body(upstream, body, forwarding.get("responses_fields"))
    content = safe_json.dumps(sent_body)  # history read back from jsonb
    headers = upstream_headers(upstream, forwarding["client_headers"])
    try:
        sent = await _send_retrying(client, url, content, headers, upstream, where)
    except TimeoutError as error:  # aiohttp's connect and read timeouts are TimeoutErrors
        logger.warning("the upstream deployment %r (%s) timed out", upstream.name, where)
        raise timed_out(upstream) from error
    except (aiohttp.ClientError, OutboundError) as error:
        # The caller learns which deployment failed and how; the URL and the client library's
        # own words (its connector's "ssl:default", the socket's errno) go to the log only.
        logger.warning("the upstream deployment %r (%s) failed: %s", upstream.name, where, error)
        raise UpstreamUnavailable(
            upstream_error(f"deployment {upstream.name!r} {connection_failure(error)}"),
            "connection",
        ) from error
    response = UpstreamResponse(sent)
    if not response.is_success:
        raise await _refusal(upstream, response)
    if upstream.wire == RESPONSES_WIRE and body.get("stream") is True:
        response.translate = openai_responses.ChatChunks()
    return response


def timed_out(upstream: Upstream) -> UpstreamUnavailable:
    return UpstreamUnavailable(
        upstream_timeout(
            f"the upstream deployment {upstream.name!r} did not answer within "
            f"{upstream.timeout_ms} ms"
        ),
        "timeout",
    )


async def first_chunk(response: UpstreamResponse, upstream: Upstream) -> None:
    """Wait for a stream's first byte (held back for its reader): until then the call may still
    move to another deployment. A stream that breaks, ends or goes silent before it is a failed
    deployment; the response is closed then."""
    try:
        async with asyncio.timeout(upstream.timeout_ms / 1000):
            chunk = await anext(response)
    except TimeoutError as error:
        await response.aclose()
        raise timed_out(upstream) from error
    except (UpstreamBroke, StopAsyncIteration) as error:
        await response.aclose()
        raise UpstreamUnavailable(
            upstream_error(f"deployment {upstream.name!r} closed the stream before answering"),
            "connection",
        ) from error
    except BaseException:  # cancelled: the upstream's call ends with it
        await response.aclose()
        raise
    response.held = chunk


def model_call_span(upstream: Upstream) -> tracing.Attributes:
    """The call's span attributes (the GenAI conventions'): the provider and the model asked."""
    return tracing.model_call_attributes(upstream.protocol, upstream.model)


async def call_upstream(
    upstream: Upstream, body: dict[str, Any], **forwarding: Unpack[Forwarding]
) -> UpstreamAnswer:
    """One non-streaming call, bounded in time as a whole and in size; in its span when tracing
    is on, with the model that answered and the usage it reports."""
    attributes = model_call_span(upstream)
    with tracing.span(f"chat {upstream.model}", attributes, kind=SpanKind.CLIENT) as span:
        answer = await answer_of(upstream, body, **forwarding)
        usage = usage_from_response(answer.payload)
        tracing.model_answered(
            span,
            response_model=answer.payload.get("model"),
            input_tokens=usage.input if usage is not None else None,
            output_tokens=usage.output if usage is not None else None,
        )
        return answer


async def answer_of(
    upstream: Upstream, body: dict[str, Any], **forwarding: Unpack[Forwarding]
) -> UpstreamAnswer:
    try:
        async with asyncio.timeout(upstream.timeout_ms / 1000):
            response = await open_stream(upstream, body, **forwarding)
            try:
                raw = await read_bounded(response, max_response_bytes())
            finally:
                await response.aclose()
    except TimeoutError as error:
        raise timed_out(upstream) from error
    except UpstreamBroke as error:
        raise upstream_error(
            f"the upstream deployment {upstream.name!r} broke off its answer: {error}"
        ) from error
    try:
        payload = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise upstream_error(
            f"the upstream deployment {upstream.name!r} answered something other than JSON"
        ) from error
    if not isinstance(payload, dict):
        raise upstream_error(f"the upstream deployment {upstream.name!r} answered a non-object")
    if upstream.wire == RESPONSES_WIRE:  # the pipeline reads a chat answer
        payload = openai_responses.chat_answer(payload)
        raw = json.dumps(payload).encode()
    return UpstreamAnswer(status=response.status_code, body=raw, payload=payload)


__all__ = [
    "Forwarding",
    "GatewayError",
    "UpstreamAnswer",
    "UpstreamBroke",
    "UpstreamRejected",
    "UpstreamResponse",
    "UpstreamUnavailable",
    "call_upstream",
    "first_chunk",
    "model_call_span",
    "open_stream",
    "upstream_body",
    "upstream_headers",
    "upstream_url",
]
