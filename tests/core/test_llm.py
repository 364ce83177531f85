"""The kernel's LLM client against a real loopback server that plays an OpenAI-compatible model:
the request it sends, the content it returns, and every failure mapped to one ``LLMError`` whose
message says what went wrong; then the deployment registry of ``settings.LLM_DEPLOYMENTS``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import override_settings

from contextplatform.core.llm import (
    MAX_RESPONSE_BYTES,
    LLMDeployment,
    LLMError,
    complete,
    complete_sync,
    configured_deployment,
    known_deployments,
    strip_fence,
)
from tests.fake_models import PlayedModel, chat_reply, played_model
from tests.loopback import Reply, Service

MESSAGES = [
    {"role": "system", "content": "Reply with JSON only."},
    {"role": "user", "content": "Say ok."},
]
ANSWER = '{"ok": true}'

Call = Callable[[LLMDeployment], str]


def call_async(deployment: LLMDeployment) -> str:
    return asyncio.run(complete(deployment, MESSAGES, role="judge"))


def call_sync(deployment: LLMDeployment) -> str:
    return complete_sync(deployment, MESSAGES, role="judge")


# Both ways of calling share one contract: every test runs against each.
CALLS: dict[str, Call] = {"async": call_async, "sync": call_sync}


@pytest.fixture(params=sorted(CALLS))
def call(request: pytest.FixtureRequest) -> Call:
    return CALLS[request.param]


@pytest.fixture
def model() -> Iterator[PlayedModel]:
    with played_model() as played:
        yield played


def deployment(model: PlayedModel, **fields: Any) -> LLMDeployment:
    config: dict[str, Any] = {"name": "fast", "url": model.url, "model": "tiny-1"}
    config.update(api_key="sk-test", timeout_ms=2000)
    config.update(fields)
    return LLMDeployment(**config)


def reply_with(service: Service, reply: Reply) -> None:
    service.responder = lambda seen: reply


# --------------------------------------------------------------------------------------------
# A good reply.


def test_a_json_mode_reply_returns_the_assistant_content(model: PlayedModel, call: Call) -> None:
    model.reply = lambda body: chat_reply(ANSWER)
    assert call(deployment(model, max_tokens=64)) == ANSWER

    assert len(model.seen) == 1
    request = model.seen[0]
    assert request.method == "POST" and request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["content-type"] == "application/json"
    assert request.body == {
        "model": "tiny-1",
        "messages": MESSAGES,
        "temperature": 0,
        "response_format": {"type": "json_object"},
        "max_tokens": 64,
    }


def test_without_a_key_or_json_mode_the_request_says_neither(
    model: PlayedModel, call: Call
) -> None:
    model.reply = lambda body: chat_reply("plain words")
    assert call(deployment(model, api_key=None, json_mode=False, url=model.url + "/")) == (
        "plain words"
    )
    request = model.seen[0]
    assert request.path == "/v1/chat/completions"  # one slash, whatever the base URL ends with
    assert "authorization" not in request.headers
    assert "response_format" not in request.body and "max_tokens" not in request.body


def test_strip_fence_tolerates_one_code_fence() -> None:
    assert strip_fence('```json\n{"a": 1}\n```') == '{"a": 1}'
    assert strip_fence('  ```\n{"a": 1}```  ') == '{"a": 1}'
    assert strip_fence('{"a": 1}') == '{"a": 1}'
    assert strip_fence('Here: ```{"a": 1}```') == 'Here: ```{"a": 1}```'


# --------------------------------------------------------------------------------------------
# Failures: one error type, a message naming the deployment and what happened.


def test_a_model_that_hangs_times_out(model: PlayedModel, call: Call) -> None:
    model.hang = True
    started = time.perf_counter()
    with pytest.raises(LLMError, match=r"^judge 'fast' timed out after 300 ms$"):
        call(deployment(model, timeout_ms=300))
    assert time.perf_counter() - started < 3.0
    assert len(model.seen) == 1


@pytest.mark.parametrize("status", [500, 401, 429, 201])
def test_a_status_other_than_200_is_refused_with_the_answer_s_start(
    model: PlayedModel, call: Call, status: int
) -> None:
    model.reply = lambda body: (status, b'{"error": {"message": "overloaded"}}')
    expected = f'judge \'fast\' answered HTTP {status}: {{"error": {{"message": "overloaded"}}}}'
    with pytest.raises(LLMError) as raised:
        call(deployment(model))
    assert str(raised.value) == expected


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_an_oversized_body_is_refused(model: PlayedModel, call: Call, chunked: bool) -> None:
    content = "x" * MAX_RESPONSE_BYTES
    body = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
    reply_with(model.service, Reply(body=body, chunked=chunked))
    with pytest.raises(LLMError, match=rf"^response larger than {MAX_RESPONSE_BYTES} bytes$"):
        call(deployment(model))


MALFORMED: dict[str, tuple[Reply, str]] = {
    "not JSON": (Reply(body=b"<html>gateway</html>"), r"^response is not JSON: "),
    "empty body": (Reply(body=b""), r"^response is not JSON: "),
    "not UTF-8": (Reply(body=b"\xc3\x28"), r"^response is not JSON: "),
    "no choices": (
        Reply(body=b'{"id": "x", "object": "chat.completion"}'),
        "^response has no choices$",
    ),
    "empty choices": (Reply(body=b'{"choices": []}'), "^response has no choices$"),
    "a list": (Reply(body=b"[1, 2]"), "^response has no choices$"),
    "null content": (chat_reply(None), "^response has no message content$"),
    "blank content": (chat_reply("  \n"), "^response has no message content$"),
    "content not text": (chat_reply({"ok": True}), "^response has no message content$"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_body_is_refused(model: PlayedModel, call: Call, case: str) -> None:
    reply, message = MALFORMED[case]
    reply_with(model.service, reply)
    with pytest.raises(LLMError, match=message):
        call(deployment(model))
    assert len(model.seen) == 1


def test_an_unreachable_deployment_is_named(call: Call) -> None:
    gone = LLMDeployment(name="gone", url="http://127.0.0.1:9", model="m", timeout_ms=1000)
    with pytest.raises(LLMError, match=r"^judge 'gone' unreachable: ConnectError: "):
        call(gone)


def test_the_role_names_the_deployment_in_messages(model: PlayedModel) -> None:
    model.reply = lambda body: (503, b"busy")
    with pytest.raises(LLMError, match=r"^extractor 'fast' answered HTTP 503: busy$"):
        complete_sync(deployment(model), MESSAGES, role="extractor")
    with pytest.raises(LLMError, match=r"^model 'fast' answered HTTP 503: busy$"):
        asyncio.run(complete(deployment(model), MESSAGES))


# --------------------------------------------------------------------------------------------
# The registry.


def test_known_and_configured_deployments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_TEST_KEY", "sk-from-env")
    deployments = {
        "small": {"url": "http://127.0.0.1:1", "model": "m"},
        "big": {
            "url": "https://models.example/",
            "model": "large-1",
            "api_key_env": "LLM_TEST_KEY",
            "timeout_ms": 1500,
            "max_document_chars": 500,
            "json_mode": False,
            "max_tokens": 300,
        },
    }
    with override_settings(LLM_DEPLOYMENTS=deployments):
        assert known_deployments() == ["big", "small"]
        assert configured_deployment("nope") is None
        assert configured_deployment("small") == LLMDeployment(
            name="small", url="http://127.0.0.1:1", model="m"
        )
        assert configured_deployment("big") == LLMDeployment(
            name="big",
            url="https://models.example/",
            model="large-1",
            api_key="sk-from-env",
            timeout_ms=1500,
            max_document_chars=500,
            json_mode=False,
            max_tokens=300,
        )
    with override_settings(LLM_DEPLOYMENTS={}):
        assert known_deployments() == []


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("not an object", "LLM deployment 'bad' must be an object"),
        ({"url": "ftp://host", "model": "m"}, "LLM deployment 'bad' needs an http(s) url"),
        ({"url": "http://127.0.0.1:1"}, "LLM deployment 'bad' needs a model"),
        (
            {"url": "http://127.0.0.1:1", "model": "m", "api_key_env": "LLM_NO_SUCH_VAR"},
            "LLM deployment 'bad': environment variable LLM_NO_SUCH_VAR is not set",
        ),
        (
            {"url": "http://127.0.0.1:1", "model": "m", "timeout_ms": 0},
            "LLM deployment 'bad': timeout_ms must be a positive integer",
        ),
        (
            {"url": "http://127.0.0.1:1", "model": "m", "max_tokens": True},
            "LLM deployment 'bad': max_tokens must be a positive integer",
        ),
    ],
)
def test_a_broken_deployment_is_refused_clearly(config: Any, message: str) -> None:
    with override_settings(LLM_DEPLOYMENTS={"bad": config}), pytest.raises(LLMError) as raised:
        configured_deployment("bad")
    assert str(raised.value) == message


def test_deployments_must_be_a_mapping() -> None:
    with (
        override_settings(LLM_DEPLOYMENTS=["fast"]),
        pytest.raises(LLMError, match="must be a mapping of name to deployment"),
    ):
        known_deployments()
