"""The demo's stand-in model: a small HTTP server on loopback that speaks OpenAI Chat Completions
(``POST /v1/chat/completions``, ``GET /v1/models``) and Anthropic Messages (``POST /v1/messages``),
non-streaming or with ``stream: true`` as each provider's Server-Sent Events, with usage; and
minimally OpenAI Responses (``POST /v1/responses``: the body read as Chat Completions and the
answer written back, by the gateway's own pure translation), for a deployment whose protocol is
``openai_responses``.

It is not a language model. Its answer says so, then quotes the first lines of the context the
gateway injected into the system prompt and the user's question, so that the whole flow (resolve,
injection, forwarding, the session turn) can be tried on a machine with no network and no key.

Offered the retrieval tools the gateway serves itself (a lazy source's ``search_<source>``, and
``vsr_context_retrieve`` for what compression omitted), a non-streaming request first gets a call of
each not yet called in the conversation (the user's question as the query, every offered recovery
key), as a model that wants the documents would; its answer then quotes the results too. So the
demo shows lazy retrieval and recovery served by the gateway. A stream is answered at once.

It honours the request fields a client relies on: a forced tool call (OpenAI's ``tool_choice``
naming a function or ``"required"``, Anthropic's ``{"type": "tool"}`` or ``{"type": "any"}``) is
answered with that call, its arguments valid for the tool's schema (each required property a
simple value of its type); ``tool_choice: "none"`` calls nothing; ``n`` gives that many choices;
``response_format`` ``json_object`` or ``json_schema`` makes the content JSON (the schema's
required properties filled); ``max_tokens`` (``max_completion_tokens``) cuts the answer to that
many tokens, finished by ``length`` (Anthropic: ``max_tokens``).

``make run`` starts it as ``python -m contextplatform.demo.standin --parent PID`` next to
uvicorn; it exits as soon as that parent is gone (Ctrl-C included), so it never outlives the demo.
Standard library only (and the pure Responses translation), nothing from Django: it must start in
a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from contextplatform.demo.defaults import (
    STANDIN_HOST,
    STANDIN_MODEL,
    demo_provider,
    standin_port,
)
from contextplatform.protocols import openai_responses

LABEL = "[stand-in model, not a real LLM]"
OPENAI_PATHS = ("/v1/chat/completions", "/chat/completions")
ANTHROPIC_PATH = "/v1/messages"
RESPONSES_PATHS = ("/v1/responses", "/responses")
MODELS_PATH = "/v1/models"
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_QUOTED_LINES = 6
MAX_LINE_CHARS = 160
MAX_QUESTION_CHARS = 300
# A short pause between streamed words, so that a streaming client visibly receives pieces.
PIECE_DELAY_S = 0.01
PARENT_POLL_S = 0.5

_CONTEXT_TAG = re.compile(r'^<context source="([^"]*)">$')
SEARCH_PREFIX = "search_"
RETRIEVE_TOOL = "vsr_context_retrieve"


# --- what it answers -----------------------------------------------------------------------------


def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list (both providers)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def system_text(body: dict[str, Any], protocol: str) -> str:
    """The system prompt the gateway rewrote: Anthropic's ``system``, OpenAI's system messages."""
    if protocol == "anthropic":
        return text_of(body.get("system"))
    messages = body.get("messages") or []
    return "\n".join(
        text_of(message.get("content"))
        for message in messages
        if isinstance(message, dict) and message.get("role") in ("system", "developer")
    )


def served_tool(name: str) -> bool:
    """A tool whose calls the gateway serves: context exchanges and recovery (``vsr_*``) and a
    lazy source's search."""
    return name.startswith(("vsr_", SEARCH_PREFIX))


def tool_role_context(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, text) of each context exchange the gateway added in ``tool_role`` mode (an
    assistant call of a ``vsr_*`` tool naming the source, then its result) and of each served
    tool call the stand-in made (a lazy source's search, a recovery), both providers."""
    sources: dict[str, str] = {}  # call id -> source name
    found: list[tuple[str, str]] = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        for call in message.get("tool_calls") or []:  # OpenAI
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and served_tool(str(function.get("name", ""))):
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    arguments = {}
                source = arguments.get("source") if isinstance(arguments, dict) else None
                sources[str(call.get("id"))] = str(source or source_label(function["name"]))
        if message.get("role") == "tool" and str(message.get("tool_call_id")) in sources:
            found.append((sources[str(message["tool_call_id"])], text_of(message.get("content"))))
        content = message.get("content")
        for block in content if isinstance(content, list) else []:  # Anthropic
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and served_tool(str(block.get("name", ""))):
                source = (block.get("input") or {}).get("source") or source_label(block["name"])
                sources[str(block.get("id"))] = str(source)
            elif block.get("type") == "tool_result" and str(block.get("tool_use_id")) in sources:
                found.append((sources[str(block["tool_use_id"])], text_of(block.get("content"))))
    return found


def source_label(tool: str) -> str:
    """``search_manuals`` quotes as ``manuals``; other tools by their name."""
    return tool[len(SEARCH_PREFIX) :] if tool.startswith(SEARCH_PREFIX) else tool


def offered_tools(body: dict[str, Any], protocol: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, parameters schema) of each tool the request offers, in either provider's shape."""
    offered: list[tuple[str, dict[str, Any]]] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        spec = tool if protocol == "anthropic" else tool.get("function")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            continue
        schema = spec.get("input_schema" if protocol == "anthropic" else "parameters")
        offered.append((spec["name"], schema if isinstance(schema, dict) else {}))
    return offered


def called_tools(body: dict[str, Any]) -> set[str]:
    """The names of the tools the conversation has called already (both providers)."""
    names: set[str] = set()
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                names.add(str(function.get("name", "")))
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                names.add(str(block.get("name", "")))
    return names


def retrieval_calls(body: dict[str, Any], protocol: str) -> list[tuple[str, dict[str, Any]]]:
    """(tool, arguments) of the calls the stand-in makes before answering: each offered lazy
    search with the question, each offered recovery key; none in a stream, none called twice."""
    if body.get("stream"):
        return []
    done = called_tools(body)
    question = latest_question(body)
    calls: list[tuple[str, dict[str, Any]]] = []
    for name, schema in offered_tools(body, protocol):
        if name in done:
            continue
        if name.startswith(SEARCH_PREFIX) and question:
            calls.append((name, {"query": question}))
        elif name == RETRIEVE_TOOL:
            key = (schema.get("properties") or {}).get("key") or {}
            keys = key.get("enum") if isinstance(key, dict) else None
            calls.extend((name, {"key": str(value)}) for value in keys or [])
    return calls


def latest_question(body: dict[str, Any]) -> str:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    for message in reversed(messages):
        if message.get("role") == "user":
            text = " ".join(text_of(message.get("content")).split())
            if text:
                return text
    return ""


def quoted_context(system: str) -> list[str]:
    """A line per source of the injected ``# Context`` blocks (its first block's first line,
    named by the source), after the first line of the application's own system prompt; so that
    every source shows, whatever the first source's length."""
    lines: list[str] = []
    source: str | None = None
    quoted: set[str | None] = set()
    for raw in system.splitlines():
        line = raw.strip()
        tag = _CONTEXT_TAG.match(line)
        if tag:
            source = tag.group(1)
            continue
        if line == "</context>":
            source = None
            continue
        if not line or line == "# Context" or source in quoted:
            continue
        quoted.add(source)
        lines.append(f"({source}) {line}" if source else line)
        if len(lines) == MAX_QUOTED_LINES:
            break
    return [shorten(line, MAX_LINE_CHARS) for line in lines]


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def answer_text(body: dict[str, Any], protocol: str) -> str:
    context = quoted_context(system_text(body, protocol))
    for source, text in tool_role_context(body):
        lines = (line.strip() for line in text.splitlines())
        first = next(
            (x for x in lines if x and not _CONTEXT_TAG.match(x) and x != "</context>"), ""
        )
        if first and len(context) < MAX_QUOTED_LINES:
            context.append(shorten(f"({source}) {first}", MAX_LINE_CHARS))
    question = shorten(latest_question(body), MAX_QUESTION_CHARS)
    given = (
        "Based on the context I was given: " + " ".join(context)
        if context
        else "I was given no context."
    )
    asked = f' You asked: "{question}"' if question else ""
    return (
        f"{LABEL} {given}{asked} (Set OPENAI_API_KEY or ANTHROPIC_API_KEY before `make run` "
        "for a real model's answer.)"
    )


def token_count(text: str) -> int:
    """A rough count (four characters a token): the stand-in reports usage as providers do."""
    return max(1, len(text) // 4)


def word_pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [word if index == 0 else " " + word for index, word in enumerate(words)]


# --- what the request asks of the answer ---------------------------------------------------------

MAX_SCHEMA_DEPTH = 16


def example_value(schema: Any, root: dict[str, Any] | None = None, depth: int = 0) -> Any:
    """A simple value valid for the JSON schema ``schema``: its const or first enum value, else
    one of its type (an object with each required property filled, an array of its minimum
    length); ``$ref`` read from ``root``'s ``$defs`` / ``definitions``."""
    if not isinstance(schema, dict) or depth > MAX_SCHEMA_DEPTH:
        return None
    root = root if root is not None else schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        return example_value(target, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for union in ("anyOf", "oneOf", "allOf"):
        options = schema.get(union)
        if isinstance(options, list) and options:
            return example_value(options[0], root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and isinstance(schema.get("properties"), dict)):
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        return {
            str(name): example_value(properties.get(name, {}), root, depth + 1)
            for name in (required if isinstance(required, list) else [])
        }
    if kind == "array":
        count = schema.get("minItems")
        item = example_value(schema.get("items", {}), root, depth + 1)
        return [item] * (count if isinstance(count, int) and 0 < count <= 8 else 0)
    if kind == "integer":
        low = schema.get("minimum")
        return low if isinstance(low, int) else 1
    if kind == "number":
        low = schema.get("minimum")
        return low if isinstance(low, (int, float)) else 1.0
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    length = schema.get("minLength")
    text = "stand-in"
    return text.ljust(length, "x") if isinstance(length, int) else text


def forced_tool(body: dict[str, Any], protocol: str) -> str | None:
    """The offered tool ``tool_choice`` forces a call of (a named one, or the first offered for
    OpenAI's ``"required"`` and Anthropic's ``{"type": "any"}``), else None."""
    choice = body.get("tool_choice")
    offered = [name for name, _ in offered_tools(body, protocol)]
    if not offered:
        return None
    named: Any = None
    if protocol == "anthropic" and isinstance(choice, dict):
        if choice.get("type") == "any":
            return offered[0]
        if choice.get("type") == "tool":
            named = choice.get("name")
    elif protocol != "anthropic":
        if choice == "required":
            return offered[0]
        if isinstance(choice, dict) and choice.get("type") == "function":
            function = choice.get("function")
            named = function.get("name") if isinstance(function, dict) else None
    return named if isinstance(named, str) and named in offered else None


def forced_calls(body: dict[str, Any], protocol: str) -> list[tuple[str, dict[str, Any]]]:
    """The forced call with arguments valid for its tool's schema, or none."""
    name = forced_tool(body, protocol)
    if name is None:
        return []
    schema = dict(offered_tools(body, protocol))[name]
    arguments = example_value({"type": "object", **schema})
    return [(name, arguments if isinstance(arguments, dict) else {})]


def calls_nothing(body: dict[str, Any]) -> bool:
    """``tool_choice: "none"`` (either provider's spelling): no tool may be called."""
    choice = body.get("tool_choice")
    return choice == "none" or (isinstance(choice, dict) and choice.get("type") == "none")


def json_answer(body: dict[str, Any], text: str) -> str:
    """The answer as JSON when ``response_format`` asks for it (OpenAI): ``json_object`` an
    object holding the answer, ``json_schema`` a value of the schema (required properties
    filled); else the text as it is."""
    wanted = body.get("response_format")
    if not isinstance(wanted, dict):
        return text
    if wanted.get("type") == "json_object":
        return json.dumps({"answer": text})
    if wanted.get("type") == "json_schema":
        spec = wanted.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return json.dumps(example_value(schema if isinstance(schema, dict) else {"type": "object"}))
    return text


def output_limit(body: dict[str, Any]) -> int | None:
    """The answer's token limit: ``max_completion_tokens``, else ``max_tokens``."""
    for field in ("max_completion_tokens", "max_tokens"):
        value = body.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def limited(text: str, limit: int | None) -> tuple[str, bool]:
    """The text cut to at most ``limit`` tokens (as ``token_count`` counts), and whether it was."""
    if limit is None or token_count(text) <= limit:
        return text, False
    return text[: limit * 4], True


@dataclass(frozen=True)
class Answer:
    """The answer's text and whether the output limit cut it."""

    text: str
    cut: bool = False

    def openai_finish(self) -> str:
        return "length" if self.cut else "stop"

    def anthropic_stop(self) -> str:
        return "max_tokens" if self.cut else "end_turn"


def answer_for(body: dict[str, Any], protocol: str) -> Answer:
    text = answer_text(body, protocol)
    if protocol != "anthropic":
        text = json_answer(body, text)
    return Answer(*limited(text, output_limit(body)))


def choice_count(body: dict[str, Any]) -> int:
    n = body.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 128 else 1


# --- the providers' shapes -----------------------------------------------------------------------


def openai_completion(body: dict[str, Any], text: str, finish: str = "stop") -> dict[str, Any]:
    n = choice_count(body)
    prompt, completion = token_count(json.dumps(body.get("messages"))), token_count(text) * n
    return {
        "id": f"chatcmpl-standin-{time.time_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or STANDIN_MODEL,
        "choices": [
            {
                "index": index,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
            for index in range(n)
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def openai_events(body: dict[str, Any], text: str, finish: str = "stop") -> Iterator[bytes]:
    completion_id, created = f"chatcmpl-standin-{time.time_ns()}", int(time.time())
    model = body.get("model") or STANDIN_MODEL

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    frames = [chunk({"role": "assistant", "content": ""})]
    frames += [chunk({"content": piece}) for piece in word_pieces(text)]
    frames.append(chunk({}, finish))
    if (body.get("stream_options") or {}).get("include_usage"):
        prompt, completion = token_count(json.dumps(body.get("messages"))), token_count(text)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        frames.append({**chunk({}), "choices": [], "usage": usage})
    for frame in frames:
        yield f"data: {json.dumps(frame)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def anthropic_message(body: dict[str, Any], text: str, stop: str = "end_turn") -> dict[str, Any]:
    prompt = token_count(json.dumps([body.get("system"), body.get("messages")]))
    return {
        "id": f"msg_standin_{time.time_ns()}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model") or STANDIN_MODEL,
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": token_count(text)},
    }


def openai_tool_calls(
    body: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]
) -> dict[str, Any]:
    completion = openai_completion(body, "", "tool_calls")
    for choice in completion["choices"]:
        choice["message"] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_standin_{index}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                for index, (name, arguments) in enumerate(calls)
            ],
        }
    return completion


def anthropic_tool_calls(
    body: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]
) -> dict[str, Any]:
    message = anthropic_message(body, "")
    message["content"] = [
        {"type": "tool_use", "id": f"toolu_standin_{index}", "name": name, "input": arguments}
        for index, (name, arguments) in enumerate(calls)
    ]
    message["stop_reason"] = "tool_use"
    return message


def anthropic_event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


def anthropic_events(body: dict[str, Any], text: str, stop: str = "end_turn") -> Iterator[bytes]:
    event = anthropic_event
    whole = anthropic_message(body, text, stop)
    start = {**whole, "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": whole["usage"]["input_tokens"], "output_tokens": 1}
    yield event("message_start", {"message": start})
    yield event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    for piece in word_pieces(text):
        yield event(
            "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}}
        )
    yield event("content_block_stop", {"index": 0})
    yield event(
        "message_delta",
        {
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": whole["usage"]["output_tokens"]},
        },
    )
    yield event("message_stop", {})


def openai_tool_events(
    body: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]
) -> Iterator[bytes]:
    """A forced call streamed as OpenAI streams one: the call's name, then its arguments."""
    whole = openai_tool_calls(body, calls)
    model, created = whole["model"], whole["created"]

    def frame(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        return {
            "id": whole["id"],
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
        return f"data: {json.dumps(frame(delta, finish))}\n\n".encode()

    yield chunk({"role": "assistant", "content": None})
    for index, call in enumerate(whole["choices"][0]["message"]["tool_calls"]):
        function = call["function"]
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": function["name"], "arguments": ""},
                    }
                ]
            }
        )
        yield chunk(
            {"tool_calls": [{"index": index, "function": {"arguments": function["arguments"]}}]}
        )
    yield chunk({}, "tool_calls")
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {**frame(None), "usage": whole["usage"]}
        yield f"data: {json.dumps(usage)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def anthropic_tool_events(
    body: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]
) -> Iterator[bytes]:
    """A forced call streamed as Anthropic streams one: a ``tool_use`` block, its input as JSON
    deltas."""
    whole = anthropic_tool_calls(body, calls)
    start = {**whole, "content": [], "stop_reason": None}
    yield anthropic_event("message_start", {"message": start})
    for index, block in enumerate(whole["content"]):
        opened = {**block, "input": {}}
        yield anthropic_event("content_block_start", {"index": index, "content_block": opened})
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield anthropic_event("content_block_delta", {"index": index, "delta": delta})
        yield anthropic_event("content_block_stop", {"index": index})
    yield anthropic_event(
        "message_delta",
        {
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": whole["usage"]["output_tokens"]},
        },
    )
    yield anthropic_event("message_stop", {})


def error_body(protocol: str, status: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "api_error"
    if protocol == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


# --- the server ----------------------------------------------------------------------------------


def translated(
    stream: openai_responses.ResponsesStream, chunks: Iterator[bytes]
) -> Iterator[bytes]:
    """A chat completion stream as the Responses API's events."""
    for chunk in chunks:
        if out := stream.feed(chunk):
            yield out
    yield from stream.end()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "context-platform-standin"

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == MODELS_PATH:
            model = {"id": STANDIN_MODEL, "object": "model", "created": 0, "owned_by": "demo"}
            return self.send_json(200, {"object": "list", "data": [model]})
        if path in ("/", "/healthz"):
            return self.send_json(200, {"status": "ok", "model": STANDIN_MODEL})
        return self.send_json(404, error_body("openai", 404, f"no such path {path}"))

    def do_POST(self) -> None:
        self.translating = None  # a kept-alive connection's earlier request set its own
        path = self.path.split("?")[0]
        protocol = "anthropic" if path == ANTHROPIC_PATH else "openai"
        if path not in (*OPENAI_PATHS, ANTHROPIC_PATH, *RESPONSES_PATHS):
            return self.send_json(404, error_body(protocol, 404, f"no such path {path}"))
        length = self.headers.get("Content-Length") or "0"
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            return self.send_json(413, error_body(protocol, 413, "body missing or too large"))
        try:
            body = json.loads(self.rfile.read(int(length)) or b"null")
        except ValueError:
            return self.send_json(400, error_body(protocol, 400, "the body is not JSON"))
        if path in RESPONSES_PATHS:
            return self.answer_responses(body)
        self.answer(body, protocol)

    def answer_responses(self, body: Any) -> None:
        """A Responses request answered as its Chat Completions translation would be."""
        if not isinstance(body, dict):
            return self.send_json(400, error_body("openai", 400, "the body is not an object"))
        try:
            chat = openai_responses.chat_request(body)
        except openai_responses.ResponsesRequestError as error:
            return self.send_json(400, error_body("openai", 400, error.message))
        frame = openai_responses.ResponseFrame.of(body)
        self.translating = openai_responses.ResponsesStream(frame)
        self.answer(chat, "openai")

    # A Responses request's translation of what ``answer`` writes (None: written as it is).
    translating: openai_responses.ResponsesStream | None = None

    def answer(self, body: Any, protocol: str) -> None:
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return self.send_json(400, error_body(protocol, 400, "messages must be a list"))
        forced = forced_calls(body, protocol)
        if forced and body.get("stream"):
            tool_events = anthropic_tool_events if protocol == "anthropic" else openai_tool_events
            return self.send_stream(tool_events(body, forced))
        calls = forced or ([] if calls_nothing(body) else retrieval_calls(body, protocol))
        if calls:
            shape_calls = anthropic_tool_calls if protocol == "anthropic" else openai_tool_calls
            return self.send_json(200, shape_calls(body, calls))
        answer = answer_for(body, protocol)
        if protocol == "anthropic":
            if body.get("stream"):
                return self.send_stream(
                    anthropic_events(body, answer.text, answer.anthropic_stop())
                )
            return self.send_json(
                200, anthropic_message(body, answer.text, answer.anthropic_stop())
            )
        if body.get("stream"):
            return self.send_stream(openai_events(body, answer.text, answer.openai_finish()))
        return self.send_json(200, openai_completion(body, answer.text, answer.openai_finish()))

    def send_json(self, status: int, payload: Any) -> None:
        if self.translating is not None and status == 200:
            payload = openai_responses.response_object(self.translating.frame, payload)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_stream(self, events: Iterator[bytes]) -> None:
        if self.translating is not None:
            events = translated(self.translating, events)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in events:
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                self.wfile.flush()
                time.sleep(PIECE_DELAY_S)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the caller went away (a cancelled call): nothing to finish
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet beside uvicorn's output; the gateway logs its own calls


def standin_server(host: str = STANDIN_HOST, port: int = 0) -> ThreadingHTTPServer:
    """A bound, not yet serving, stand-in (``port=0``: a free port)."""
    server = ThreadingHTTPServer((host, port), _Handler)
    server.daemon_threads = True
    return server


@dataclass(frozen=True)
class RunningStandin:
    host: str
    port: int

    @property
    def openai_base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


@contextmanager
def running_standin(host: str = STANDIN_HOST, port: int = 0) -> Iterator[RunningStandin]:
    """The stand-in serving in a background thread until the block ends."""
    server = standin_server(host, port)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield RunningStandin(host=host, port=int(server.server_address[1]))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def exit_when_orphaned(parent: int) -> None:
    """End this process once ``parent`` is no longer its parent (it exited and we were
    re-parented), so the stand-in never outlives ``make run``."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="standin-parent-watch", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default=STANDIN_HOST)
    parser.add_argument("--port", type=int, default=standin_port(os.environ))
    parser.add_argument("--parent", type=int, help="exit when this process is gone")
    parser.add_argument(
        "--always", action="store_true", help="serve even when a provider key is set"
    )
    options = parser.parse_args(argv)
    provider = demo_provider(os.environ)
    if provider != "standin" and not options.always:
        print(f"stand-in model not started: the demo deployment is {provider}", file=sys.stderr)
        return 0
    if options.parent is not None:
        exit_when_orphaned(options.parent)
    try:
        server = standin_server(options.host, options.port)
    except OSError as error:
        print(
            f"stand-in model: cannot listen on {options.host}:{options.port} ({error}); "
            "set STANDIN_PORT to a free port",
            file=sys.stderr,
        )
        return 1
    port = server.server_address[1]
    print(f"stand-in model serving on http://{options.host}:{port}", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
