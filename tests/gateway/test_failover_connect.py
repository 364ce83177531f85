"""A deployment that cannot be connected to: left at once while a fallback remains, tried again
(bounded) when it is the call's last. Real sockets: the first address refuses connections."""

from __future__ import annotations

import asyncio
import socket
import uuid

import pytest

from contextplatform.deployments.selectors import Upstream
from contextplatform.gateway.fallback import Attempts, first_answer
from contextplatform.gateway.forward import UpstreamUnavailable, connect_attempts, open_stream

SCHEMA = "failover_connect_test"


def refused_port() -> int:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def dead(name: str) -> Upstream:
    return Upstream(
        protocol="openai",
        base_url=f"http://127.0.0.1:{refused_port()}/v1",
        model="m",
        api_key=None,
        timeout_ms=2000,
        context_window=8000,
        max_output_tokens=None,
        headers={},
        may_judge=False,
        name=f"{name}-{uuid.uuid4().hex[:8]}",
    )


def test_connect_retries_only_on_the_last_deployment() -> None:
    seen: list[tuple[str, int]] = []
    first, second = dead("first"), dead("second")

    async def send(upstream: Upstream) -> str:
        seen.append((upstream.name, connect_attempts()))
        if upstream is first:
            await open_stream(
                upstream, {"model": "m", "messages": []}, allowlist=["127.0.0.1"], client_headers={}
            )
        return "answer"

    answer, answered = asyncio.run(first_answer(SCHEMA, [first, second], send, Attempts()))
    assert (answer, answered) == ("answer", second)
    assert seen == [(first.name, 1), (second.name, connect_attempts())]
    assert connect_attempts() == 3  # outside a call: the configured retries


@pytest.mark.parametrize("retries", [0, 2])
def test_a_lone_deployment_is_tried_as_often_as_configured(settings, retries: int) -> None:  # type: ignore[no-untyped-def]
    settings.GATEWAY_CONNECT_RETRIES = retries
    lone = dead("lone")
    counted: list[int] = []

    async def send(upstream: Upstream) -> str:
        counted.append(connect_attempts())
        await open_stream(
            upstream, {"model": "m", "messages": []}, allowlist=["127.0.0.1"], client_headers={}
        )
        return "never"

    with pytest.raises(UpstreamUnavailable):
        asyncio.run(first_answer(SCHEMA, [lone], send, Attempts()))
    assert counted == [retries + 1]
