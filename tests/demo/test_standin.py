"""The demo's stand-in model (``contextplatform/demo/standin.py``) on loopback, driven by the
official ``openai`` and ``anthropic`` clients, sync and streaming; and the process ``make run``
starts, which exits when its parent is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam

from contextplatform.demo.standin import (
    LABEL,
    RunningStandin,
    answer_text,
    main,
    retrieval_calls,
    running_standin,
)
from contextplatform.resolve.injection import SourceBlock, inject, render_context_section

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "Can I get a refund for my headphones?"
BLOCKS = [
    SourceBlock("guardrails", "skill_guardrails", ("Never promise a refund outside the window.",)),
    SourceBlock("docs", "rag", ("Customers can return any product within 30 days.\nMore.",)),
]
CONTEXT = render_context_section(BLOCKS)
EXIT_WAIT_S = 30  # an upper bound for the orphaned process to notice, not a measured time


@pytest.fixture(scope="module")
def standin() -> Iterator[RunningStandin]:
    with running_standin() as running:
        yield running


def assert_quotes_context(text: str) -> None:
    assert text.startswith(LABEL)
    assert "(guardrails) Never promise a refund outside the window." in text
    assert "(docs) Customers can return any product within 30 days." in text
    assert QUESTION in text
    assert "# Context" not in text and "<context" not in text


def test_the_answer_quotes_the_injected_context_and_the_question() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "You are helpful.\n\n" + CONTEXT},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi"},
            {"role": "user", "content": [{"type": "text", "text": QUESTION}]},
        ]
    }
    text = answer_text(body, "openai")
    assert_quotes_context(text)
    assert "You are helpful." in text  # the application's own system prompt comes first

    anthropic_body = {"system": [{"type": "text", "text": CONTEXT}], "messages": body["messages"]}
    assert_quotes_context(answer_text(anthropic_body, "anthropic"))

    bare = answer_text({"messages": [{"role": "user", "content": QUESTION}]}, "openai")
    assert bare.startswith(LABEL) and "I was given no context." in bare and QUESTION in bare


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_context_injected_as_tool_calls_is_quoted_too(protocol: str) -> None:
    body = {"messages": [{"role": "user", "content": QUESTION}]}
    injected = inject(body, protocol, BLOCKS, "tool_role", "rsv_1")  # type: ignore[arg-type]
    assert_quotes_context(answer_text(injected, protocol))


def openai_messages() -> list[ChatCompletionMessageParam]:
    return [{"role": "system", "content": CONTEXT}, {"role": "user", "content": QUESTION}]


def test_the_openai_client_gets_an_answer_streamed_or_not(standin: RunningStandin) -> None:
    client = openai.OpenAI(base_url=standin.openai_base_url, api_key="unused", max_retries=0)
    completion = client.chat.completions.create(model="stand-in", messages=openai_messages())
    assert_quotes_context(completion.choices[0].message.content or "")
    assert completion.usage is not None and completion.usage.completion_tokens > 0

    stream = client.chat.completions.create(
        model="stand-in",
        messages=openai_messages(),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert len([piece for piece in pieces if piece]) > 3  # word by word, not one block
    assert_quotes_context("".join(pieces))
    assert chunks[-1].usage is not None

    assert [model.id for model in client.models.list()] == ["stand-in"]


def test_the_openai_client_gets_a_response_streamed_or_not(standin: RunningStandin) -> None:
    """``POST /v1/responses``, as a deployment whose protocol is ``openai_responses`` calls it."""
    client = openai.OpenAI(base_url=standin.openai_base_url, api_key="unused", max_retries=0)
    response = client.responses.create(model="stand-in", instructions=CONTEXT, input=QUESTION)
    assert response.object == "response" and response.status == "completed"
    assert_quotes_context(response.output_text)
    assert response.usage is not None and response.usage.output_tokens > 0
    with client.responses.stream(model="stand-in", instructions=CONTEXT, input=QUESTION) as stream:
        pieces = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert len(pieces) > 3 and final.output_text == "".join(pieces)
    assert_quotes_context(final.output_text)
    forced = client.responses.create(
        model="stand-in",
        input=QUESTION,
        tools=[{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
        tool_choice={"type": "function", "name": "lookup"},
    )
    assert [item.type for item in forced.output][-1] == "function_call"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="stand-in", input=QUESTION, tools=[{"type": "web_search"}])


def test_the_anthropic_client_gets_an_answer_streamed_or_not(standin: RunningStandin) -> None:
    client = anthropic.Anthropic(
        base_url=standin.anthropic_base_url, api_key="unused", max_retries=0
    )
    messages: list[MessageParam] = [{"role": "user", "content": QUESTION}]
    message = client.messages.create(
        model="stand-in", max_tokens=100, system=CONTEXT, messages=messages
    )
    block = message.content[0]
    assert block.type == "text"
    assert_quotes_context(block.text)
    assert message.usage.output_tokens > 0

    with client.messages.stream(
        model="stand-in", max_tokens=100, system=CONTEXT, messages=messages
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert_quotes_context(streamed)
    assert final.stop_reason == "end_turn"


SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_manuals",
        "description": "Search the manuals.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}
RETRIEVE_TOOL = {
    "type": "function",
    "function": {
        "name": "vsr_context_retrieve",
        "description": "Retrieve original context omitted by route compression.",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string", "enum": ["k1", "k2"]}},
            "required": ["key"],
        },
    },
}


def test_offered_retrieval_tools_are_called_once_before_the_answer(
    standin: RunningStandin,
) -> None:
    """A lazy source's search and the recovery tool: called (the question as the query, each
    offered key) before answering, never twice, never in a stream; the results are quoted."""
    client = openai.OpenAI(base_url=standin.openai_base_url, api_key="unused", max_retries=0)
    tools: Any = [SEARCH_TOOL, RETRIEVE_TOOL, {"type": "function", "function": {"name": "other"}}]
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    first = client.chat.completions.create(model="stand-in", messages=messages, tools=tools)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls or []
    asked = [(c.function.name, json.loads(c.function.arguments)) for c in calls]  # type: ignore[union-attr]
    assert asked == [
        ("search_manuals", {"query": QUESTION}),
        ("vsr_context_retrieve", {"key": "k1"}),
        ("vsr_context_retrieve", {"key": "k2"}),
    ]
    results = ["[Document: Pairing] Hold the power button.", "order 4041: refund pending", "x"]
    messages.append(choice.message.model_dump(exclude_none=True))
    messages += [
        {"role": "tool", "tool_call_id": call.id, "content": f'<context source="manuals">\n{text}'}
        for call, text in zip(calls, results, strict=True)
    ]
    second = client.chat.completions.create(model="stand-in", messages=messages, tools=tools)
    answer = second.choices[0].message.content or ""
    assert second.choices[0].finish_reason == "stop" and answer.startswith(LABEL)
    assert "(manuals) [Document: Pairing] Hold the power button." in answer
    assert "(vsr_context_retrieve) order 4041: refund pending" in answer

    streamed = client.chat.completions.create(
        model="stand-in", messages=[{"role": "user", "content": QUESTION}], tools=tools, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices).startswith(
        LABEL
    )

    anthropic_body = {
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": [
            {"name": "search_manuals", "input_schema": {"type": "object"}},
            {"name": "lookup", "input_schema": {"type": "object"}},
        ],
    }
    assert retrieval_calls(anthropic_body, "anthropic") == [("search_manuals", {"query": QUESTION})]
    message = anthropic.Anthropic(
        base_url=standin.anthropic_base_url, api_key="unused", max_retries=0
    ).messages.create(model="stand-in", max_tokens=100, **anthropic_body)
    assert message.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == [
        ("search_manuals", {"query": QUESTION})
    ]


# --- tools, choices, JSON and the output limit ---------------------------------------------------

ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "minLength": 12},
        "quantity": {"type": "integer", "minimum": 2},
        "express": {"type": "boolean"},
        "reason": {"type": "string", "enum": ["damaged", "late"]},
        "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 1},
        "note": {"type": "string"},
    },
    "required": ["order_id", "quantity", "express", "reason", "items"],
    "$defs": {
        "Item": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "price": {"type": ["number", "null"]}},
            "required": ["sku", "price"],
        }
    },
}


def assert_valid_order(arguments: Any) -> None:
    """Valid for ORDER_SCHEMA: every required property, of its type."""
    assert set(arguments) == {"order_id", "quantity", "express", "reason", "items"}
    assert isinstance(arguments["order_id"], str) and len(arguments["order_id"]) >= 12
    assert isinstance(arguments["quantity"], int) and arguments["quantity"] >= 2
    assert arguments["express"] is True and arguments["reason"] == "damaged"
    [item] = arguments["items"]
    assert isinstance(item["sku"], str) and isinstance(item["price"], float)


def openai_tools() -> list[Any]:
    weather = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    return [
        {"type": "function", "function": {"name": "get_weather", "parameters": weather}},
        {"type": "function", "function": {"name": "refund_order", "parameters": ORDER_SCHEMA}},
    ]


def anthropic_tools() -> list[Any]:
    return [
        {"name": tool["function"]["name"], "input_schema": tool["function"]["parameters"]}
        for tool in openai_tools()
    ]


def openai_standin(standin: RunningStandin) -> openai.OpenAI:
    return openai.OpenAI(base_url=standin.openai_base_url, api_key="unused", max_retries=0)


def anthropic_standin(standin: RunningStandin) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=standin.anthropic_base_url, api_key="unused", max_retries=0)


def test_openai_forced_tool_calls_carry_arguments_valid_for_the_schema(
    standin: RunningStandin,
) -> None:
    client = openai_standin(standin)
    named = client.chat.completions.create(
        model="stand-in",
        messages=[{"role": "user", "content": QUESTION}],
        tools=openai_tools(),
        tool_choice={"type": "function", "function": {"name": "refund_order"}},
    )
    choice = named.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "refund_order"
    assert_valid_order(json.loads(call.function.arguments))

    required = client.chat.completions.create(
        model="stand-in",
        messages=[{"role": "user", "content": QUESTION}],
        tools=openai_tools(),
        tool_choice="required",
    )
    [first] = required.choices[0].message.tool_calls or []
    assert first.type == "function" and first.function.name == "get_weather"
    assert json.loads(first.function.arguments) == {"city": "stand-in"}

    streamed = client.chat.completions.create(
        model="stand-in",
        messages=[{"role": "user", "content": QUESTION}],
        tools=openai_tools(),
        tool_choice={"type": "function", "function": {"name": "refund_order"}},
        stream=True,
    )
    chunks = [chunk for chunk in streamed if chunk.choices]
    pieces = [call for c in chunks for call in c.choices[0].delta.tool_calls or []]
    assert pieces[0].function is not None and pieces[0].function.name == "refund_order"
    arguments = "".join(p.function.arguments or "" for p in pieces if p.function is not None)
    assert_valid_order(json.loads(arguments))
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    unforced = client.chat.completions.create(
        model="stand-in",
        messages=[{"role": "user", "content": QUESTION}],
        tools=openai_tools(),
        tool_choice="auto",
    )
    assert unforced.choices[0].finish_reason == "stop"  # not forced: it answers


def test_anthropic_forced_tool_calls_carry_arguments_valid_for_the_schema(
    standin: RunningStandin,
) -> None:
    client = anthropic_standin(standin)
    messages: list[MessageParam] = [{"role": "user", "content": QUESTION}]
    named = client.messages.create(
        model="stand-in",
        max_tokens=200,
        messages=messages,
        tools=anthropic_tools(),
        tool_choice={"type": "tool", "name": "refund_order"},
    )
    assert named.stop_reason == "tool_use"
    [block] = named.content
    assert block.type == "tool_use" and block.name == "refund_order"
    assert_valid_order(block.input)

    any_tool = client.messages.create(
        model="stand-in",
        max_tokens=200,
        messages=messages,
        tools=anthropic_tools(),
        tool_choice={"type": "any"},
    )
    [first] = any_tool.content
    assert first.type == "tool_use" and first.name == "get_weather"
    assert first.input == {"city": "stand-in"}

    with client.messages.stream(
        model="stand-in",
        max_tokens=200,
        messages=messages,
        tools=anthropic_tools(),
        tool_choice={"type": "tool", "name": "refund_order"},
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    [streamed] = final.content
    assert streamed.type == "tool_use"
    assert_valid_order(streamed.input)


def test_tool_choice_none_calls_no_retrieval_tool(standin: RunningStandin) -> None:
    search = {
        "type": "function",
        "function": {
            "name": "search_docs",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
    completion = openai_standin(standin).chat.completions.create(
        model="stand-in",
        messages=[{"role": "user", "content": QUESTION}],
        tools=[search],  # type: ignore[list-item]
        tool_choice="none",
    )
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.tool_calls is None


def test_n_gives_that_many_choices(standin: RunningStandin) -> None:
    completion = openai_standin(standin).chat.completions.create(
        model="stand-in", messages=openai_messages(), n=3
    )
    assert [choice.index for choice in completion.choices] == [0, 1, 2]
    for choice in completion.choices:
        assert_quotes_context(choice.message.content or "")


def test_response_format_makes_the_content_json(standin: RunningStandin) -> None:
    client = openai_standin(standin)
    as_object = client.chat.completions.create(
        model="stand-in", messages=openai_messages(), response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(as_object.choices[0].message.content or ""), dict)

    as_schema = client.chat.completions.create(
        model="stand-in",
        messages=openai_messages(),
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "order", "schema": ORDER_SCHEMA, "strict": True},
        },
    )
    assert_valid_order(json.loads(as_schema.choices[0].message.content or ""))


def test_max_tokens_cuts_the_answer(standin: RunningStandin) -> None:
    client = openai_standin(standin)
    whole = client.chat.completions.create(model="stand-in", messages=openai_messages())
    assert whole.usage is not None and whole.usage.completion_tokens > 5
    cut = client.chat.completions.create(
        model="stand-in", messages=openai_messages(), max_completion_tokens=5
    )
    assert cut.choices[0].finish_reason == "length"
    assert cut.usage is not None and cut.usage.completion_tokens <= 5
    assert (whole.choices[0].message.content or "").startswith(
        cut.choices[0].message.content or "-"
    )
    streamed = list(
        client.chat.completions.create(
            model="stand-in", messages=openai_messages(), max_tokens=5, stream=True
        )
    )
    assert streamed[-1].choices[0].finish_reason == "length"

    short = anthropic_standin(standin).messages.create(
        model="stand-in",
        max_tokens=5,
        system=CONTEXT,
        messages=[{"role": "user", "content": QUESTION}],
    )
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens <= 5
    roomy = anthropic_standin(standin).messages.create(
        model="stand-in",
        max_tokens=4000,
        system=CONTEXT,
        messages=[{"role": "user", "content": QUESTION}],
    )
    assert roomy.stop_reason == "end_turn"


def test_a_malformed_request_is_refused_in_the_providers_shape(standin: RunningStandin) -> None:
    client = openai.OpenAI(base_url=standin.openai_base_url, api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="messages must be a list"):
        client.chat.completions.create(model="stand-in", messages=None)  # type: ignore[arg-type]
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="stand-in", input="text")


def test_it_is_not_started_when_a_provider_key_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-demo")
    # Returns at once instead of serving (a serving main would never return here).
    assert main(["--port", "0"]) == 0


def process_gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody has reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state in ("Z", "X")


def test_the_process_exits_when_its_parent_is_gone() -> None:
    # As ``make run`` does: a shell starts it in the background with its own pid as --parent,
    # then goes away (make run's shell becomes uvicorn, which exits on Ctrl-C).
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    script = (
        f'"{sys.executable}" -m contextplatform.demo.standin --port 0 --parent $$ '
        "</dev/null >/dev/null 2>&1 & echo $!"
    )
    parent = subprocess.run(
        ["sh", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    pid = int(parent.stdout.strip())
    deadline = time.monotonic() + EXIT_WAIT_S
    while not process_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not process_gone(pid):
        os.kill(pid, 9)
        pytest.fail("the stand-in outlived its parent")
