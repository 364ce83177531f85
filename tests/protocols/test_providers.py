"""Each provider's protocol object: what the rest of the platform asks it, in its own shape."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from pydantic import ValidationError

from contextplatform.protocols.anthropic_messages import AnthropicMessages
from contextplatform.protocols.base import ProtocolError, ProviderProtocol
from contextplatform.protocols.openai_chat import OpenAIChat
from contextplatform.protocols.provider_shapes import AnthropicCallRequest, OpenAIChatRequest
from contextplatform.protocols.registry import ANTHROPIC, OPENAI, PROTOCOLS, protocol_for
from contextplatform.protocols.tools import UNSERVED_TEXT, ServedCall, ToolCall
from contextplatform.protocols.usage import ProviderUsage

# ---------------------------------------------------------------------------- the registry


def test_protocol_for_names_each_provider() -> None:
    assert isinstance(protocol_for("openai"), OpenAIChat)
    assert isinstance(protocol_for("anthropic"), AnthropicMessages)
    assert set(PROTOCOLS) == {"openai", "anthropic"}
    with pytest.raises(ProtocolError, match="unknown protocol 'responses'"):
        protocol_for("responses")


def test_a_third_protocol_must_implement_the_abstract_methods() -> None:
    abstract = ProviderProtocol.__abstractmethods__
    assert {"request_shape", "tool_calls", "error_body", "stream_text", "answer_text"} <= abstract

    class Partial(ProviderProtocol):
        name = "responses"

    with pytest.raises(TypeError):
        Partial()  # type: ignore[abstract]
    for protocol in PROTOCOLS.values():
        assert not inspect.isabstract(type(protocol))


# ---------------------------------------------------------------------------- requests


def test_request_shapes_and_output_limits() -> None:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 9}
    assert OPENAI.request_shape() is OpenAIChatRequest
    assert OPENAI.max_tokens_of(OpenAIChatRequest.model_validate(body)) == 9
    assert ANTHROPIC.request_shape(for_call=True) is AnthropicCallRequest
    with pytest.raises(ValidationError):
        ANTHROPIC.request_shape(for_call=True).model_validate({"messages": body["messages"]})
    assert ANTHROPIC.max_tokens_of(ANTHROPIC.request_shape().model_validate(body)) == 9
    assert OPENAI.output_limit_field("o3-mini") == "max_completion_tokens"
    assert OPENAI.output_limit_field("gpt-4o") == "max_tokens"
    assert ANTHROPIC.output_limit_field("claude-sonnet-4") == "max_tokens"


def test_the_user_each_body_names() -> None:
    assert OPENAI.body_user({"user": "u1"}) == "u1"
    assert ANTHROPIC.body_user({"metadata": {"user_id": "u2"}}) == "u2"
    assert ANTHROPIC.body_user({"user": "u1"}) is None
    assert (OPENAI.user_field, ANTHROPIC.user_field) == ("user", "metadata.user_id")


def test_stream_usage_is_asked_of_openai_only() -> None:
    body: dict[str, Any] = {"stream": True, "messages": []}
    asked, hide = OPENAI.with_stream_usage(body)
    assert asked["stream_options"] == {"include_usage": True} and hide
    assert OPENAI.with_stream_usage(asked) == (asked, False)
    assert ANTHROPIC.with_stream_usage(body) == (body, False)


# ---------------------------------------------------------------------------- injection


def test_system_blocks() -> None:
    openai = OPENAI.inject_system({"messages": [{"role": "user", "content": "q"}]}, "ctx")
    assert openai["messages"][0] == {"role": "system", "content": "ctx"}
    joined = OPENAI.inject_system({"messages": [{"role": "developer", "content": "be"}]}, "ctx")
    assert joined["messages"][0]["content"] == "be\n\nctx"
    assert ANTHROPIC.inject_system({"messages": []}, "ctx")["system"] == "ctx"
    blocks = ANTHROPIC.inject_system({"system": [{"type": "text", "text": "s"}]}, "ctx")
    assert blocks["system"][-1] == {"type": "text", "text": "ctx"}


def test_tool_exchanges_and_declarations() -> None:
    call, result = OPENAI.tool_exchange("call_1", "t", {"source": "s"}, "r")
    assert call["tool_calls"][0]["function"] == {"name": "t", "arguments": '{"source": "s"}'}
    assert result == {"role": "tool", "tool_call_id": "call_1", "content": "r"}
    use, outcome = ANTHROPIC.tool_exchange("toolu_1", "t", {"source": "s"}, "r")
    assert use["content"][0]["input"] == {"source": "s"}
    assert outcome["content"][0]["tool_use_id"] == "toolu_1"
    assert OPENAI.injected_call_id("ab").startswith("call_")
    assert ANTHROPIC.injected_call_id("ab").startswith("toolu_")
    body: dict[str, Any] = {}
    OPENAI.declare_tools(body, ["t"], "d")
    assert body == {}
    ANTHROPIC.declare_tools(body, ["t", "t"], "d")
    assert [tool["name"] for tool in body["tools"]] == ["t"]
    assert "input_schema" in ANTHROPIC.tool_definition("t", "d", {})
    assert OPENAI.tool_definition("t", "d", {})["function"]["parameters"] == {}


# ---------------------------------------------------------------------------- tool calls


OPENAI_ANSWER: dict[str, Any] = {
    "choices": [
        {
            "finish_reason": "tool_calls",
            "message": {
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "mine", "arguments": "{}"},
                    }
                ],
            },
        }
    ]
}
ANTHROPIC_ANSWER: dict[str, Any] = {
    "stop_reason": "tool_use",
    "content": [{"type": "tool_use", "id": "t1", "name": "mine", "input": {"q": 1}}],
}


@pytest.mark.parametrize(
    ("protocol", "answer", "call_id", "arguments"),
    [(OPENAI, OPENAI_ANSWER, "c1", {}), (ANTHROPIC, ANTHROPIC_ANSWER, "t1", {"q": 1})],
)
def test_tool_calls_follow_ups_and_reserved_calls_taken_out(
    protocol: ProviderProtocol, answer: dict[str, Any], call_id: str, arguments: dict[str, Any]
) -> None:
    (call,) = protocol.tool_calls(answer)
    assert (call.id, call.name, call.arguments) == (call_id, "mine", arguments)
    turn, *results = protocol.follow_up_messages(answer, [ServedCall(call, "found")])
    assert turn["role"] == "assistant"
    assert "found" in str(results)
    cleaned = protocol.without_reserved(answer, {"mine"})
    assert UNSERVED_TEXT in str(cleaned)
    assert "tool_use" not in str(cleaned.get("stop_reason")) and "tool_calls" not in str(
        cleaned.get("choices", [{}])[0].get("finish_reason")
    )
    raw = protocol.streamed_call(call_id, "mine", '{"q": 1}')
    assert isinstance(ToolCall(call_id, "mine", None, raw).raw, dict)
    assert protocol.turn("hi", [raw]) != protocol.turn("", [])


def test_usage_summed_and_in_shape() -> None:
    summed = ANTHROPIC.summed_usage(
        [{"input_tokens": 3, "output_tokens": 1}, {"input_tokens": 4, "output_tokens": 2}]
    )
    assert summed == {"input_tokens": 7, "output_tokens": 3}
    assert OPENAI.summed_usage([None]) is None
    usage = ProviderUsage(input=5, output=2)
    assert OPENAI.usage_in_shape(usage)["total_tokens"] == 7
    assert ANTHROPIC.usage_in_shape(usage) == {"input_tokens": 5, "output_tokens": 2}


# ---------------------------------------------------------------------------- errors, streams


def test_error_bodies_and_events() -> None:
    openai = OPENAI.error_body(429, "rate_limited", "slow down", None)
    assert openai == {
        "error": {
            "message": "slow down",
            "type": "rate_limit_error",
            "param": None,
            "code": "rate_limited",
        }
    }
    anthropic = ANTHROPIC.error_body(502, "upstream_error", "broke")
    assert anthropic["type"] == "error" and anthropic["error"]["type"] == "api_error"
    assert ANTHROPIC.error_event(anthropic).startswith(b"event: error\n")
    assert OPENAI.error_event(openai).startswith(b"data: ")


def test_stream_events() -> None:
    chunk = {"choices": [{"delta": {"content": "he"}}]}
    assert OPENAI.stream_text(chunk) == "he"
    assert OPENAI.stream_text({"choices": []}) is None
    delta = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "llo"}}
    assert ANTHROPIC.stream_text(delta) == "llo"
    assert ANTHROPIC.stream_ends({"type": "message_stop"})
    assert not OPENAI.stream_ends(chunk)
    assert OPENAI.streamed_response("t")["choices"][0]["message"]["content"] == "t"
    assert ANTHROPIC.streamed_response("t")["content"] == [{"type": "text", "text": "t"}]


# ---------------------------------------------------------------------------- the kernel's client


def test_requests_headers_and_answers_of_the_kernel_client() -> None:
    messages = [{"role": "system", "content": "judge"}, {"role": "user", "content": "q"}]
    openai = OPENAI.chat_request("m", messages, json_mode=True, max_tokens=None)
    assert openai["response_format"] == {"type": "json_object"} and "max_tokens" not in openai
    anthropic = ANTHROPIC.chat_request("m", messages, json_mode=False, max_tokens=None)
    assert anthropic["system"] == "judge" and anthropic["max_tokens"] == 4096
    assert OPENAI.endpoint("http://x/", sdk_base_url=True) == "http://x/chat/completions"
    assert OPENAI.endpoint("http://x") == "http://x/v1/chat/completions"
    assert ANTHROPIC.endpoint("http://x") == "http://x/v1/messages"
    assert OPENAI.headers("k", {})["Authorization"] == "Bearer k"
    assert ANTHROPIC.headers("k", {})["x-api-key"] == "k"
    assert ANTHROPIC.credentials(None) == {} and OPENAI.credentials("k") == {
        "authorization": "Bearer k"
    }
    assert OPENAI.answer_text({"choices": [{"message": {"content": "a"}}]}) == "a"
    assert ANTHROPIC.answer_text({"content": [{"type": "text", "text": "b"}]}) == "b"
    with pytest.raises(ProtocolError, match="no choices"):
        OPENAI.answer_text({})
    with pytest.raises(ProtocolError, match="no text content"):
        ANTHROPIC.answer_text({"content": []})
