"""The memory write after a gateway call, live: a route whose memory source has ``store.auto``
writes the turn to the user's memories with no hand-back call, and ``x-memory-store: false`` on a
request writes none (sent as ``extra_headers``). Through the official ``openai`` client (the user
from its ``user`` field) and ``anthropic`` client (from ``metadata.user_id``), streaming and not.

The write is a Celery task, so this module runs its own stack: a real worker on a queue of its own
on the shared Redis, and a uvicorn sending to it (the package's server runs without a worker). The
worker is a single solo process taking its queue in order, so once the turn of a later call is
written, whatever an earlier call had queued has been run too: the call with the switch off is made
first, and the written turn of the next one is what the test waits for."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest
from django_tenants.utils import schema_context

from memory.models import Memory, MemoryTurn
from tests.conftest import TENANT_KEYS
from tests.live import celery_worker, live_server
from tests.loopback import LOOPBACK, outbound_allowlist
from tests.upstream import running_upstream

WRITE_WAIT_S = 60  # an upper bound for the worker to write a turn, not a measured time
OFF = {"x-memory-store": "false"}
FORGOTTEN = "My name is Zebedee."  # said with the switch off: never remembered
REMEMBERED = "I prefer window seats."  # said next, with the route's default: remembered


@dataclass(frozen=True)
class Stack:
    server: str
    key: str
    routes: dict[str, str]  # protocol → a route with a memory source writing automatically
    worker: Any

    def memories(self, user: str) -> list[str]:
        with httpx.Client(base_url=self.server, timeout=30) as api:
            response = api.get(
                f"/api/v1/users/{user}/memories",
                params={"limit": 100},
                headers={"Authorization": f"Bearer {self.key}"},
            )
        assert response.status_code == 200, response.text
        return [memory["content"] for memory in response.json()["data"]]


@pytest.fixture(scope="module")
def stack(django_db_setup: Any, django_db_blocker: Any, redis_url: str) -> Iterator[Stack]:
    suffix = uuid.uuid4().hex[:8]
    env = {
        "REDIS_URL": redis_url,
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "CELERY_TASK_DEFAULT_QUEUE": f"test-memory-{suffix}",  # this run's own queue
    }
    key = TENANT_KEYS["acme"]
    with (
        running_upstream() as upstream,
        django_db_blocker.unblock(),
        outbound_allowlist("acme", [LOOPBACK]),
        celery_worker(env) as worker,
        live_server(env) as server,
        httpx.Client(
            base_url=server, timeout=30, headers={"Authorization": f"Bearer {key}"}
        ) as api,
    ):
        bases = {"openai": upstream.openai_base_url, "anthropic": upstream.anthropic_base_url}
        routes: dict[str, str] = {}
        try:
            for protocol, base_url in bases.items():
                name = f"gw-memory-{protocol}-{suffix}"
                deployment = {
                    "name": name,
                    "protocol": protocol,
                    "base_url": base_url,
                    "model": f"upstream-{protocol}",
                }
                created = api.post("/api/v1/deployments", json=deployment)
                assert created.status_code == 201, created.text
                memory = {"type": "memory", "name": "memories", "store": {"auto": True}}
                route = {
                    "name": name,
                    "model": {"upstream": name},
                    "context": {"sources": [memory]},
                }
                created = api.post("/api/v1/routes", json=route)
                assert created.status_code == 201, created.text
                routes[protocol] = name
            yield Stack(server=server, key=key, routes=routes, worker=worker)
            assert worker.poll() is None, "the worker died"
        finally:
            for name in routes.values():
                api.delete(f"/api/v1/routes/{name}")
                api.delete(f"/api/v1/deployments/{name}")


def turn_of(resolve_id: str) -> MemoryTurn | None:
    with schema_context("acme"):
        return MemoryTurn.objects.filter(resolve_id=resolve_id).first()


def written_turn(resolve_id: str) -> MemoryTurn:
    """The turn once the worker is done with it (the test fails if it never is)."""
    deadline = time.monotonic() + WRITE_WAIT_S
    while time.monotonic() < deadline:
        turn = turn_of(resolve_id)
        if turn is not None and turn.status != "pending":
            return turn
        time.sleep(0.1)
    pytest.fail(f"the turn of {resolve_id} was not written: {turn_of(resolve_id)!r}")


def memories_of_request(resolve_id: str) -> int:
    with schema_context("acme"):
        return Memory.objects.filter(source_request_id=resolve_id).count()


# --- one call each way: (stack, user, text, extra headers) → the resolve id ----------------------

Call = Callable[[Stack, str, str, dict[str, str]], str]


def openai_call(stack: Stack, user: str, text: str, headers: dict[str, str]) -> str:
    client = openai.OpenAI(base_url=f"{stack.server}/v1", api_key=stack.key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=stack.routes["openai"],
        messages=[{"role": "user", "content": text}],
        user=user,  # OpenAI's own field names the user
        extra_headers=headers,
    )
    assert raw.parse().choices[0].message.content
    return str(raw.headers["x-context-resolve-id"])


def openai_stream(stack: Stack, user: str, text: str, headers: dict[str, str]) -> str:
    # The sync client closes the connection the moment it reads ``data: [DONE]``: the gateway
    # completes the turn anyway (the model's turn was over), which this case proves.
    client = openai.OpenAI(base_url=f"{stack.server}/v1", api_key=stack.key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=stack.routes["openai"],
        messages=[{"role": "user", "content": text}],
        stream=True,
        user=user,
        extra_headers=headers,
    )
    parts = [c.choices[0].delta.content or "" for c in raw.parse() if c.choices]
    assert "".join(parts)
    return str(raw.headers["x-context-resolve-id"])


def openai_async_stream(stack: Stack, user: str, text: str, headers: dict[str, str]) -> str:
    async def scenario() -> str:
        async with openai.AsyncOpenAI(
            base_url=f"{stack.server}/v1", api_key=stack.key, max_retries=0
        ) as client:
            raw = await client.chat.completions.with_raw_response.create(
                model=stack.routes["openai"],
                messages=[{"role": "user", "content": text}],
                stream=True,
                user=user,
                extra_headers=headers,
            )
            parts = [c.choices[0].delta.content or "" async for c in raw.parse() if c.choices]
            assert "".join(parts)
            return str(raw.headers["x-context-resolve-id"])

    return asyncio.run(scenario())


def anthropic_call(stack: Stack, user: str, text: str, headers: dict[str, str]) -> str:
    client = anthropic.Anthropic(base_url=stack.server, api_key=stack.key, max_retries=0)
    raw = client.messages.with_raw_response.create(
        model=stack.routes["anthropic"],
        max_tokens=100,
        messages=[{"role": "user", "content": text}],
        metadata={"user_id": user},
        extra_headers=headers,
    )
    assert raw.parse().content
    return str(raw.headers["x-context-resolve-id"])


def anthropic_stream(stack: Stack, user: str, text: str, headers: dict[str, str]) -> str:
    client = anthropic.Anthropic(base_url=stack.server, api_key=stack.key, max_retries=0)
    with client.messages.stream(
        model=stack.routes["anthropic"],
        max_tokens=100,
        messages=[{"role": "user", "content": text}],
        metadata={"user_id": user},
        extra_headers=headers,
    ) as stream:
        assert "".join(stream.text_stream)
        return str(stream.response.headers["x-context-resolve-id"])


@pytest.mark.parametrize(
    "call",
    [openai_call, openai_stream, openai_async_stream, anthropic_call, anthropic_stream],
    ids=["openai", "openai-stream", "openai-async-stream", "anthropic", "anthropic-stream"],
)
def test_the_turn_is_remembered_without_a_hand_back_unless_the_request_says_no(
    stack: Stack, call: Call
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"

    switched_off = call(stack, user, FORGOTTEN, OFF)
    remembered = call(stack, user, REMEMBERED, {})

    turn = written_turn(remembered)  # the worker has run everything queued before it too
    assert turn.status == "written" and turn.user_id == user
    assert memories_of_request(remembered) >= 1
    assert any("window seats" in memory for memory in stack.memories(user))

    # The request that said no queued no turn and left nothing in the user's memories.
    assert turn_of(switched_off) is None
    assert memories_of_request(switched_off) == 0
    assert not any("Zebedee" in memory for memory in stack.memories(user))
