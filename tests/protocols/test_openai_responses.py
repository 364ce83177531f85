"""OpenAI Responses translated to and from Chat Completions, without a server or a database: the
request, the answer, the stream (its events as the official client parses them), and the other
way for a deployment that speaks Responses."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from contextplatform.protocols.openai_responses import (
    ChatChunks,
    ResponseFrame,
    ResponsesRequestError,
    ResponsesStream,
    chat_answer,
    chat_request,
    input_items,
    output_text,
    replayable,
    response_object,
    responses_request,
    untranslatable,
)
from contextplatform.protocols.sse import SSEReader
from contextplatform.protocols.usage import ProviderUsage, usage_from_response
from tests.upstream import openai_completion, openai_events

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)


def events_of(raw: bytes) -> list[dict[str, Any]]:
    reader = SSEReader()
    return [block.json() for block in reader.feed(raw) if block.dispatched]


def test_a_string_input_with_instructions_is_a_system_and_a_user_message() -> None:
    chat = chat_request(
        {"model": "r", "input": "hi", "instructions": "be brief", "max_output_tokens": 50}
    )
    assert chat["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert chat["max_completion_tokens"] == 50 and chat["model"] == "r"
    assert "stream" not in chat
    bare = chat_request(
        {"model": "r", "input": "hi", "tool_choice": "auto", "parallel_tool_calls": False}
    )
    assert "tool_choice" not in bare and "parallel_tool_calls" not in bare  # no tools offered


def test_items_become_messages_tool_calls_and_results() -> None:
    body = {
        "model": "r",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Let me see."}],
            },
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
        ],
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "stream": True,
    }
    chat = chat_request(body)
    user, assistant, result = chat["messages"]
    assert user == {"role": "user", "content": [{"type": "text", "text": "weather?"}]}
    assert assistant["content"] == "Let me see."
    assert [call["id"] for call in assistant["tool_calls"]] == ["c1", "c2"]
    assert result == {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather of a city",
                "parameters": WEATHER["parameters"],
            },
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}


def test_previous_items_come_before_the_input() -> None:
    prior = input_items("first") + replayable(
        [{"type": "message", "content": [{"type": "output_text", "text": "one"}]}]
    )
    chat = chat_request({"model": "r", "input": "second", "instructions": "sys"}, prior)
    assert [(m["role"], m["content"]) for m in chat["messages"]] == [
        ("system", "sys"),
        ("user", "first"),
        ("assistant", "one"),
        ("user", "second"),
    ]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "r"}, "input"),
        ({"model": "r", "input": 3}, "input"),
        ({"model": "r", "input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"model": "r", "input": "q", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"model": "r", "input": "q", "tool_choice": "sometimes"}, "tool_choice"),
        ({"model": "r", "input": "q", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "r", "input": "q", "background": True}, "background"),
        ({"model": "r", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ],
)
def test_what_cannot_be_translated_is_refused_naming_the_field(
    body: dict[str, Any], param: str
) -> None:
    with pytest.raises(ResponsesRequestError) as refused:
        chat_request(body)
    assert refused.value.param == param


def test_an_answer_is_a_response_object_the_client_parses() -> None:
    frame = ResponseFrame.of({"model": "r", "input": "q", "tools": [WEATHER], "user": "u1"})
    answer = openai_completion({"model": "m"}, "", [("c1", "get_weather", '{"city": "Oslo"}')])
    response = response_object(frame, answer)
    parsed = Response.model_validate(response)
    assert parsed.id.startswith("resp_") and parsed.status == "completed"
    kinds = [item.type for item in parsed.output]
    assert kinds == ["message", "function_call"]
    call = parsed.output[1]
    assert call.type == "function_call"
    assert (call.call_id, call.name, call.arguments) == ("c1", "get_weather", '{"city": "Oslo"}')
    assert parsed.output_text == "Looking it up."
    assert parsed.usage is not None
    usage = answer["usage"]
    assert parsed.usage.input_tokens == usage["prompt_tokens"]
    assert parsed.usage.total_tokens == usage["total_tokens"]
    assert parsed.user == "u1"


def test_a_cut_answer_is_incomplete() -> None:
    answer = openai_completion({"model": "m"}, "partial")
    answer["choices"][0]["finish_reason"] = "length"
    response = response_object(ResponseFrame.of({"input": "q"}), answer)
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_chat_stream_becomes_the_responses_events_in_order() -> None:
    body = {"model": "m", "stream": True, "stream_options": {"include_usage": True}}
    stream = ResponsesStream(ResponseFrame.of({"model": "r", "input": "q"}))
    raw = b"".join(stream.feed(chunk) for chunk in openai_events(body, ["Hello", " world"]))
    events = events_of(raw)
    kinds = [event["type"] for event in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    for event in events:
        EVENTS.validate_python(event)  # each one as the official client reads it
    completed = events[-1]["response"]
    assert output_text(completed) == "Hello world"
    assert completed["usage"]["output_tokens"] == 2
    assert stream.response == completed


def test_tool_calls_in_a_stream_are_function_call_items() -> None:
    body = {"model": "m", "stream": True}
    calls = [("c1", "get_weather", '{"city": "Oslo"}'), ("c2", "get_time", "{}")]
    stream = ResponsesStream(ResponseFrame.of({"input": "q"}))
    raw = b"".join(stream.feed(chunk) for chunk in openai_events(body, [], calls))
    events = events_of(raw)
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [(e["name"], e["arguments"]) for e in done] == [
        ("get_weather", '{"city": "Oslo"}'),
        ("get_time", "{}"),
    ]
    deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert "".join(e["delta"] for e in deltas[:2]) == '{"city": "Oslo"}'
    for event in events:
        EVENTS.validate_python(event)
    output = events[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["message", "function_call", "function_call"]
    assert [item.get("call_id") for item in output[1:]] == ["c1", "c2"]


def test_a_stream_cut_short_or_an_error_event_fails_the_response() -> None:
    stream = ResponsesStream(ResponseFrame.of({"input": "q"}))
    first = next(iter(openai_events({"model": "m", "stream": True}, ["Hi"])))
    stream.feed(first)
    failed = events_of(b"".join(stream.cut()))
    assert failed[-1]["type"] == "response.failed"
    assert failed[-1]["response"]["status"] == "failed"
    erroring = ResponsesStream(ResponseFrame.of({"input": "q"}))
    out = erroring.feed(b'data: {"error": {"message": "budget", "code": "budget_exceeded"}}\n\n')
    assert events_of(out)[-1]["response"]["error"]["code"] == "budget_exceeded"
    assert erroring.cut() == []


def test_keepalive_comments_pass_through_the_stream() -> None:
    stream = ResponsesStream(ResponseFrame.of({"input": "q"}))
    assert stream.feed(b": keep-alive\n\n") == b": keep-alive\n\n"


def test_a_responses_deployment_receives_the_chat_body_as_responses() -> None:
    client = {
        "model": "route",
        "input": "q",
        "reasoning": {"effort": "low"},
        "include": ["reasoning.encrypted_content"],
        "previous_response_id": "resp_x",
        "tools": [WEATHER],
    }
    chat = chat_request(client)
    chat["messages"][0:0] = [{"role": "system", "content": "CONTEXT"}]
    chat["model"] = "gpt-upstream"
    chat["max_tokens"] = 99
    body = responses_request(chat, client)
    assert body["instructions"] == "CONTEXT"
    assert body["input"] == [{"type": "message", "role": "user", "content": "q"}]
    assert body["tools"] == [WEATHER]
    assert body["reasoning"] == {"effort": "low"} and body["include"] == client["include"]
    assert body["store"] is False and "previous_response_id" not in body
    assert body["max_output_tokens"] == 99 and body["model"] == "gpt-upstream"
    assert chat_request(body)["messages"][1:] == chat["messages"][1:]


def test_a_chat_calls_own_fields_go_to_a_responses_deployment_as_responses_spells_them() -> None:
    schema = {"type": "object"}
    chat = {
        "model": "gpt-upstream",
        "messages": [{"role": "user", "content": "q"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
        "verbosity": "low",
        "reasoning_effort": "high",
        "user": "u1",
        "metadata": {"k": "v"},
        "max_completion_tokens": 50,
        "temperature": 0.2,
        "stream_options": {"include_usage": True},
        "n": 1,
        "logprobs": False,
        "presence_penalty": 0,
    }
    assert untranslatable(chat) is None  # what asks nothing is as absent
    function = {"type": "function", "function": {"name": "f", "parameters": {}}}
    assert untranslatable({**chat, "tools": [function]}) is None
    body = responses_request(chat, None)
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "x", "schema": schema},
        "verbosity": "low",
    }
    assert body["reasoning"] == {"effort": "high"}
    assert (body["user"], body["metadata"]) == ("u1", {"k": "v"})
    assert (body["max_output_tokens"], body["temperature"]) == (50, 0.2)
    assert not {"messages", "response_format", "reasoning_effort", "stream_options", "n"} & set(
        body
    )
    assert responses_request({**chat, "response_format": {"type": "json_object"}}, None)["text"][
        "format"
    ] == {"type": "json_object"}
    # A Responses call's own fields win: nothing of the chat spelling is added.
    assert "text" not in responses_request(chat, {"input": "q"})


@pytest.mark.parametrize(
    ("asked", "field"),
    [
        ({"stop": ["END"]}, "stop"),
        ({"seed": 7}, "seed"),
        ({"logprobs": True}, "logprobs"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"logit_bias": {"42": -100}}, "logit_bias"),
        ({"n": 2}, "n"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"audio": {"voice": "alloy", "format": "mp3"}}, "audio"),
        ({"tools": [{"type": "custom", "custom": {"name": "sql"}}]}, "tools"),
    ],
)
def test_what_responses_cannot_do_is_named(asked: dict[str, Any], field: str) -> None:
    assert untranslatable({"messages": [], **asked}) == field


def test_a_responses_answers_cached_input_reads_as_chats() -> None:
    """A Responses deployment's cached input reaches the pipeline, which prices it apart."""
    response = {
        "id": "resp_1",
        "status": "completed",
        "output": [],
        "usage": {
            "input_tokens": 1000,
            "input_tokens_details": {"cached_tokens": 800},
            "output_tokens": 50,
            "output_tokens_details": {"reasoning_tokens": 20},
        },
    }
    usage = chat_answer(response)["usage"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": 800}
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 20}
    assert usage_from_response({"usage": usage}) == ProviderUsage(
        input=1000, output=50, cached_input=800
    )


def test_a_responses_answer_and_stream_read_as_chat() -> None:
    frame = ResponseFrame.of({"input": "q"})
    calls = [("c1", "get_weather", '{"city": "Oslo"}')]
    chat = openai_completion({"model": "m"}, "", calls)
    back = chat_answer(response_object(frame, chat))
    assert (
        back["choices"][0]["message"]["tool_calls"] == chat["choices"][0]["message"]["tool_calls"]
    )
    assert back["choices"][0]["finish_reason"] == "tool_calls"
    assert back["usage"] == chat["usage"]
    body = {"model": "m", "stream": True, "stream_options": {"include_usage": True}}
    stream = ResponsesStream(frame)
    events = b"".join(stream.feed(c) for c in openai_events(body, ["Hi", " there"]))
    chunks = ChatChunks().feed(events)
    datas = [block.json() for block in SSEReader().feed(chunks) if block.dispatched]
    assert datas[-1] == "[DONE]"
    text = "".join(
        d["choices"][0]["delta"].get("content") or ""
        for d in datas[:-1]
        if isinstance(d, dict) and d.get("choices")
    )
    assert text == "Hi there"
    usage = next(d["usage"] for d in datas[:-1] if isinstance(d, dict) and d.get("usage"))
    assert usage["completion_tokens"] == 2
