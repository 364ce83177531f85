"""The kernel's LLM client speaking both protocols to the loopback upstream (``tests/upstream.py``,
a real HTTP server): Anthropic Messages (``/v1/messages``, the system prompt beside the messages,
``max_tokens`` always, ``x-api-key`` and ``anthropic-version``, JSON asked for in the prompt, the
answer read from ``content`` text blocks), a tenant deployment's OpenAI base URL as the SDK takes
it, and the outbound guard that a tenant's deployment (one with an allow-list) goes through."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from contextplatform.core.llm import (
    ANTHROPIC_JSON_INSTRUCTION,
    ANTHROPIC_VERSION,
    DEFAULT_ANTHROPIC_MAX_TOKENS,
    LLMDeployment,
    LLMError,
    complete,
    complete_sync,
)
from tests.loopback import LOOPBACK, json_reply, running_service
from tests.upstream import LoopbackUpstream, running_upstream

MESSAGES = [
    {"role": "system", "content": "You judge."},
    {"role": "user", "content": "Say ok."},
]
ANSWER = '{"ok": true}'
KEY = "sk-ant-protocol-test-key"

Call = Callable[[LLMDeployment], str]


def call_async(deployment: LLMDeployment) -> str:
    return asyncio.run(complete(deployment, MESSAGES, role="judge"))


def call_sync(deployment: LLMDeployment) -> str:
    return complete_sync(deployment, MESSAGES, role="judge")


CALLS: dict[str, Call] = {"async": call_async, "sync": call_sync}


@pytest.fixture(params=sorted(CALLS))
def call(request: pytest.FixtureRequest) -> Call:
    return CALLS[request.param]


@pytest.fixture
def upstream() -> Iterator[LoopbackUpstream]:
    with running_upstream() as running:
        running.answer_with(lambda body: ANSWER)
        yield running


def anthropic(upstream: LoopbackUpstream, **fields: Any) -> LLMDeployment:
    config: dict[str, Any] = {
        "name": "claude",
        "url": upstream.anthropic_base_url,
        "model": "claude-test",
        "api_key": KEY,
        "timeout_ms": 5000,
        "protocol": "anthropic",
        "sdk_base_url": True,
        **fields,
    }
    return LLMDeployment(**config)


def test_anthropic_messages_request_and_answer(
    upstream: LoopbackUpstream, call: Call, settings: Any
) -> None:
    assert call(anthropic(upstream, extra_headers=(("anthropic-beta", "x-1"),))) == ANSWER
    [seen] = upstream.requests
    assert (seen.method, seen.path) == ("POST", "/v1/messages")
    assert seen.headers["x-api-key"] == KEY
    assert seen.headers["anthropic-version"] == ANTHROPIC_VERSION
    assert seen.headers["anthropic-beta"] == "x-1"
    assert "authorization" not in seen.headers
    body = seen.body
    assert body["model"] == "claude-test" and body["temperature"] == 0
    assert body["max_tokens"] == DEFAULT_ANTHROPIC_MAX_TOKENS  # required by Anthropic
    assert body["system"] == f"You judge.\n\n{ANTHROPIC_JSON_INSTRUCTION}"
    assert body["messages"] == [{"role": "user", "content": "Say ok."}]
    assert "response_format" not in body  # Anthropic has no JSON mode: the prompt asks


def test_anthropic_output_cap_and_no_json_instruction(
    upstream: LoopbackUpstream, call: Call, settings: Any
) -> None:
    assert call(anthropic(upstream, max_tokens=256, json_mode=False, api_key=None)) == ANSWER
    body = upstream.last.body
    assert body["max_tokens"] == 256 and body["system"] == "You judge."
    assert "x-api-key" not in upstream.last.headers


def test_anthropic_text_blocks_are_joined_and_other_blocks_ignored(call: Call) -> None:
    content = [
        {"type": "thinking", "thinking": "scores..."},
        {"type": "text", "text": '{"ok": '},
        {"type": "text", "text": "true}"},
    ]
    with running_service() as service:
        service.answer({"type": "message", "role": "assistant", "content": content})
        deployment = LLMDeployment(
            name="claude", url=service.base, model="m", protocol="anthropic", sdk_base_url=True
        )
        assert call(deployment) == ANSWER
        assert service.paths == ["/v1/messages"]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"type": "message", "content": []}, "no text content"),
        ({"type": "message", "content": [{"type": "tool_use", "id": "t"}]}, "no text content"),
        ({"type": "message"}, "response has no content"),
        ({"choices": [{"message": {"content": ANSWER}}]}, "response has no content"),
    ],
)
def test_an_anthropic_answer_without_text_is_an_error(
    call: Call, payload: dict[str, Any], message: str
) -> None:
    with running_service() as service:
        service.responder = lambda seen: json_reply(payload)
        deployment = LLMDeployment(
            name="claude", url=service.base, model="m", protocol="anthropic", sdk_base_url=True
        )
        with pytest.raises(LLMError, match=message):
            call(deployment)


def test_anthropic_error_status_names_the_deployment(
    upstream: LoopbackUpstream, call: Call, settings: Any
) -> None:
    upstream.fail(529, {"type": "error", "error": {"type": "overloaded_error"}})
    with pytest.raises(LLMError, match=r"judge 'claude' answered HTTP 529: .*overloaded_error"):
        call(anthropic(upstream))


def test_a_tenant_openai_base_url_is_the_sdks(
    upstream: LoopbackUpstream, call: Call, settings: Any
) -> None:
    deployment = LLMDeployment(
        name="gpt",
        url=upstream.openai_base_url,  # ends in /v1, as the openai SDK takes it
        model="gpt-test",
        api_key="sk-openai",
        sdk_base_url=True,
        extra_headers=(("OpenAI-Organization", "org-1"),),
    )
    assert call(deployment) == ANSWER
    seen = upstream.last
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == "Bearer sk-openai"
    assert seen.headers["openai-organization"] == "org-1"
    assert seen.body["response_format"] == {"type": "json_object"}


# --- the outbound guard ---------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_tenant_deployment_on_loopback_is_refused_without_the_allow_list(
    upstream: LoopbackUpstream, call: Call, protocol: str, settings: Any
) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = False
    base = upstream.anthropic_base_url if protocol == "anthropic" else upstream.openai_base_url
    guarded = LLMDeployment(
        name="tenant-model",
        url=base,
        model="m",
        protocol=protocol,  # type: ignore[arg-type]
        sdk_base_url=True,
        allowlist=("10.0.0.0/8", "search.internal"),
    )
    with pytest.raises(LLMError) as refused:
        call(guarded)
    assert "judge 'tenant-model' refused by the outbound guard" in str(refused.value)
    assert "loopback" in str(refused.value)
    assert upstream.hits == 0  # refused before anything was sent

    allowed = dataclasses.replace(guarded, allowlist=(LOOPBACK,))
    assert call(allowed) == ANSWER
    assert upstream.hits == 1


def test_the_platforms_deployments_are_not_guarded(
    upstream: LoopbackUpstream, call: Call, settings: Any
) -> None:
    settings.OUTBOUND_ALLOW_PRIVATE = False
    platform = LLMDeployment(name="platform", url=upstream.base, model="m")  # allowlist None
    assert call(platform) == ANSWER


def test_complete_sync_inside_a_running_event_loop(
    upstream: LoopbackUpstream, settings: Any
) -> None:
    """A synchronous caller inside a loop (the guarded call needs one of its own) still gets its
    answer."""
    guarded = anthropic(upstream, allowlist=(LOOPBACK,))

    async def inside() -> str:
        return complete_sync(guarded, MESSAGES, role="extractor")

    assert asyncio.run(inside()) == ANSWER
