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
