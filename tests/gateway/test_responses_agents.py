"""The ``openai-agents`` SDK with its default model (OpenAI Responses) against the live gateway,
unchanged but for its client's base URL: an agent whose one function tool the loopback upstream
calls, run to its final output, non-streaming and streamed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from agents import (
    Agent,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from tests.gateway.conftest import Gateway
from tests.upstream import LoopbackUpstream

FORECAST = "cold and clear"


@pytest.fixture
def agent(gateway: Gateway, upstream: LoopbackUpstream) -> Iterator[tuple[Agent, list[str]]]:
    set_tracing_disabled(True)
    set_default_openai_client(
        AsyncOpenAI(base_url=gateway.openai_base_url, api_key=gateway.key, max_retries=0),
        use_for_tracing=False,
    )
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather of a city."""
        asked.append(city)
        return f"{city}: {FORECAST}"

    upstream.call_tool("get_weather", {"city": "Oslo"})
    yield (
        Agent(
            name="forecaster",
            instructions="Answer with the weather.",
            model=gateway.openai_route,
            tools=[get_weather],
        ),
        asked,
    )


def test_runner_run_calls_the_tool_and_finishes(
    agent: tuple[Agent, list[str]], upstream: LoopbackUpstream
) -> None:
    forecaster, asked = agent
    result = asyncio.run(Runner.run(forecaster, "What is the weather in Oslo?"))
    assert asked == ["Oslo"]
    assert f"Oslo: {FORECAST}" in str(result.final_output)
    assert upstream.last.path.endswith("/chat/completions")  # translated for the deployment


def test_runner_run_streamed_calls_the_tool_and_finishes(
    agent: tuple[Agent, list[str]],
) -> None:
    forecaster, asked = agent

    async def run() -> tuple[str, list[str]]:
        streamed = Runner.run_streamed(forecaster, "What is the weather in Oslo?")
        kinds = [event.type async for event in streamed.stream_events()]
        return str(streamed.final_output), kinds

    final, kinds = asyncio.run(run())
    assert asked == ["Oslo"]
    assert f"Oslo: {FORECAST}" in final
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
