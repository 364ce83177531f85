"""One ``POST /v1/responses`` call: the chat call's phases (``lifecycle.ChatCall``: admit,
resolve, reserve, forward, tool loop, settle, finish) run on the Responses body translated to
Chat Completions (``protocols/openai_responses.py``), and the answer, or the stream, translated
back into the Responses API's object and events.

Beside the chat call: ``previous_response_id`` expanded from the responses the gateway keeps (so
a fallback to another deployment keeps the conversation), the response kept when ``store`` (the
default) asks for it, and a deployment that speaks Responses itself sent the client's own
Responses fields (``forward``)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from django.http import HttpRequest, JsonResponse
from django.http.response import HttpResponseBase

from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway.calls import GatewayCall, call_of, parse_body, request_user
from contextplatform.gateway.connections import in_tenant
from contextplatform.gateway.lifecycle import (
    ChatCall,
    Reserved,
    authenticated_tenant,
    in_background,
)
from contextplatform.gateway.protocol import invalid_request
from contextplatform.gateway.rate_limit import check_rate
from contextplatform.gateway.response_lookup import previous_items, unknown
from contextplatform.gateway.response_store import keep_response
from contextplatform.protocols.openai_responses import (
    ResponseFrame,
    ResponsesRequestError,
    ResponsesStream,
    chat_request,
    input_items,
    replayable,
    response_object,
)
from contextplatform.resolve.use_cases import Resolution
from tenants.models import Tenant

logger = logging.getLogger("contextplatform.gateway")

# Says whether the gateway kept the response's content (``false``: the tenant does not capture
# content, or the request said ``store: false``).
STORED_HEADER = "x-context-response-stored"
MAX_RESPONSE_ID = 64


class ResponsesCall(ChatCall):
    """A chat call whose client speaks Responses."""

    responses: ClassVar[bool] = True

    def __init__(self, request: HttpRequest) -> None:
        super().__init__("openai", request)
        self.body: dict[str, Any] = {}
        self.frame: ResponseFrame | None = None
        self.items: list[dict[str, Any]] = []  # the conversation: what it followed, its input

    @property
    def store(self) -> bool:
        return self.body.get("store") is not False

    def kept(self, tenant: Tenant) -> bool:
        return self.store and tenant.capture_content

    # ------------------------------------------------------------------ admit

    async def admit(self) -> tuple[Tenant, GatewayCall]:
        self.tenant = tenant = authenticated_tenant(self.request)
        await check_rate(self.request)
        body = parse_body(self.request.body)
        headers = self.request.headers
        user = request_user(headers, body, "user")
        prior: list[dict[str, Any]] = []
        previous = body.get("previous_response_id")
        if previous is not None:
            if not isinstance(previous, str) or not previous or len(previous) > MAX_RESPONSE_ID:
                raise unknown(str(previous)[:MAX_RESPONSE_ID], "previous_response_id")
            prior = await in_tenant(tenant, lambda: previous_items(previous, user))
        try:
            chat = chat_request(body, prior)
        except ResponsesRequestError as error:
            raise invalid_request(error.message, error.param) from None
        self.body = body
        self.items = [*prior, *input_items(body.get("input"))]
        # The answer's ``store`` says whether the gateway keeps it.
        self.frame = ResponseFrame.of({**body, "store": self.kept(tenant)})
        self.call = call = call_of("openai", headers, chat)
        return tenant, call

    # ------------------------------------------------------------------ reserve

    async def reserve(
        self, tenant: Tenant, call: GatewayCall, upstream: Upstream, resolution: Resolution
    ) -> Reserved:
        reserved = await super().reserve(tenant, call, upstream, resolution)
        # What a deployment that speaks Responses receives beyond the translated conversation.
        reserved.forward["responses_fields"] = self.body
        return reserved

    # ------------------------------------------------------------------ the answer

    async def run(self) -> HttpResponseBase:
        response = await super().run()
        if not 200 <= response.status_code < 300:
            return response
        assert self.frame is not None and self.tenant is not None
        stored = "true" if self.kept(self.tenant) else "false"
        if self.streaming:
            response["Content-Type"] = "text/event-stream"
            response[STORED_HEADER] = stored
            return response
        answer = json.loads(getattr(response, "content", b"{}"))
        result = response_object(self.frame, answer)
        await self.keep(self.tenant, result)
        presented = JsonResponse(result, status=response.status_code)
        presented[STORED_HEADER] = stored
        return presented

    async def keep(self, tenant: Tenant, result: dict[str, Any]) -> None:
        """Keep the response (its content where the tenant captures it); a failed write is
        logged, the answer still goes to the client."""
        if not self.store or self.call is None:
            return
        call = self.call
        items = [*self.items, *replayable(result.get("output") or [])]
        try:
            await in_tenant(
                tenant,
                lambda: keep_response(
                    result["id"],
                    user=call.user,
                    route=call.route,
                    items=items,
                    response=result,
                    capture_content=tenant.capture_content,
                ),
            )
        except Exception:
            logger.exception("the response %s could not be stored", result.get("id"))

    # ------------------------------------------------------------------ the stream

    def client_events(self, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        assert self.frame is not None and self.tenant is not None
        return self.translated(events, ResponsesStream(self.frame), self.tenant)

    async def translated(
        self, events: AsyncIterator[bytes], stream: ResponsesStream, tenant: Tenant
    ) -> AsyncIterator[bytes]:
        """The chat stream as Responses events; the response kept when it ended."""
        try:
            async for chunk in events:
                if out := stream.feed(chunk):
                    yield out
            if rest := stream.cut():  # a stream that ended without its end failed
                yield b"".join(rest)
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
            if stream.response is not None and stream.response.get("status") != "failed":
                await asyncio.shield(in_background(self.keep(tenant, stream.response)))


__all__ = ["STORED_HEADER", "ResponsesCall"]
