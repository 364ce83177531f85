"""OpenAI Responses (``POST /v1/responses``) in terms of Chat Completions, both ways.

The gateway's pipeline (resolve, budgets, fallbacks, its own tools) speaks Chat Completions; a
Responses call joins it translated:

* ``chat_request``: a Responses body as a Chat Completions body (``instructions`` the system
  message, ``input`` items the messages, function tools the chat tools);
* ``response_object``: a chat answer as a Responses object (``output`` items: a ``message`` with
  ``output_text``, one ``function_call`` per tool call; ``usage`` in input/output tokens);
* ``ResponsesStream``: a chat completion stream as the Responses API's own events
  (``response.created`` ... ``response.completed``, each with ``type`` and ``sequence_number``).

And for a deployment that speaks Responses itself (``openai_responses``), the other way:
``responses_request`` (a chat body as a Responses body, the client's own Responses fields kept),
``chat_answer`` (a Responses object as a chat answer) and ``ChatChunks`` (Responses events as chat
chunks), so that the pipeline in between stays the one it is. A Chat Completions call goes to
such a deployment the same way (its own fields translated by ``chat_fields``), unless it asks what
Responses cannot do (``untranslatable``).

Pure: no I/O, no Django. A body the gateway cannot translate is a ``ResponsesRequestError`` naming
the field.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextplatform.protocols.sse import DONE, SSEReader, sse

RESPONSE_ID_PREFIX = "resp_"
# What a Responses body may name that Chat Completions has no field for: it shapes the stored
# response and the answer (``store``, ``metadata``, ``previous_response_id``) or is the gateway's
# to ignore for a chat deployment (``include``, ``truncation``...); a responses deployment receives
# it as the client sent it.
NOT_TRANSLATED = frozenset(
    {
        "store",
        "metadata",
        "previous_response_id",
        "include",
        "truncation",
        "service_tier",
        "prompt_cache_key",
        "safety_identifier",
        "top_logprobs",
        "stream_options",
        "max_tool_calls",
        "prompt",
    }
)
# What a chat body carries that a Responses body spells its own way (``responses_request``).
CHAT_ONLY = frozenset(
    {
        "messages",
        "tools",
        "tool_choice",
        "max_tokens",
        "max_completion_tokens",
        "stream_options",
        "response_format",
        "reasoning_effort",
        "user",
        "n",
    }
)
REFUSED = {
    "background": "background responses are not supported by the gateway",
    "conversation": "conversations are not supported by the gateway: use previous_response_id",
}
TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})
MAX_ITEMS = 10_000


class ResponsesRequestError(ValueError):
    """A Responses body the gateway cannot translate: the message and the field (``param``)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def _dict(value: Any) -> dict[str, Any]:
    """``value`` when it is an object, else an empty one (an answer's missing parts)."""
    return value if isinstance(value, dict) else {}


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(16)}"


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ResponsesRequestError(f"{where}: expected an object", where)
    return value


def _string(value: Any, where: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ResponsesRequestError(f"{where}: expected a string", where)
    return value


# ---------------------------------------------------------------------- input items → messages


def _text_of_parts(parts: Sequence[Any], where: str) -> str:
    texts: list[str] = []
    for index, part in enumerate(parts):
        part = _object(part, f"{where}[{index}]")
        if part.get("type") not in TEXT_PARTS:
            raise ResponsesRequestError(
                f"{where}[{index}].type: expected one of input_text, output_text",
                f"{where}[{index}].type",
            )
        text = part.get("text") if part.get("type") != "refusal" else part.get("refusal")
        texts.append(_string(text, f"{where}[{index}].text") or "")
    return "".join(texts)


def _chat_part(part: Any, where: str) -> dict[str, Any]:
    part = _object(part, where)
    kind = part.get("type")
    if kind in TEXT_PARTS:
        text = part.get("refusal") if kind == "refusal" else part.get("text")
        return {"type": "text", "text": _string(text, f"{where}.text")}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise ResponsesRequestError(
                f"{where}.image_url: expected a URL (a file_id is not supported by the gateway)",
                f"{where}.image_url",
            )
        image: dict[str, Any] = {"url": url}
        if isinstance(part.get("detail"), str):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    raise ResponsesRequestError(
        f"{where}.type: {kind!r} is not supported by the gateway", f"{where}.type"
    )


def _message(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise ResponsesRequestError(
            f"{where}.role: expected user, assistant, system or developer", f"{where}.role"
        )
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise ResponsesRequestError(
            f"{where}.content: expected a string or a list", f"{where}.content"
        )
    if role != "user":  # the chat roles but user's take text
        return {"role": role, "content": _text_of_parts(content, f"{where}.content")}
    parts = [_chat_part(part, f"{where}.content[{i}]") for i, part in enumerate(content)]
    return {"role": role, "content": parts}


def _output_text(output: Any, where: str) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return _text_of_parts(output, where)
    raise ResponsesRequestError(f"{where}: expected a string or a list of text parts", where)


def input_messages(items: Any, where: str = "input") -> list[dict[str, Any]]:
    """``input`` (a string or a list of items) as chat messages: consecutive function calls are
    one assistant message's tool calls, a call's output is a ``tool`` message."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise ResponsesRequestError(f"{where}: expected a string or a list of items", where)
    if len(items) > MAX_ITEMS:
        raise ResponsesRequestError(f"{where}: at most {MAX_ITEMS} items", where)
    messages: list[dict[str, Any]] = []
    for index, raw in enumerate(items):
        at = f"{where}[{index}]"
        item = _object(raw, at)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, at))
        elif kind == "function_call":
            call = {
                "id": _string(item.get("call_id"), f"{at}.call_id"),
                "type": "function",
                "function": {
                    "name": _string(item.get("name"), f"{at}.name"),
                    "arguments": _string(item.get("arguments"), f"{at}.arguments"),
                },
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
                if last.get("content") == "":
                    last["content"] = None
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": _string(item.get("call_id"), f"{at}.call_id"),
                    "content": _output_text(item.get("output"), f"{at}.output"),
                }
            )
        elif kind == "reasoning":
            continue  # a model's reasoning summary: nothing a chat model reads
        else:
            raise ResponsesRequestError(
                f"{at}.type: {kind!r} is not supported by the gateway "
                "(message, function_call and function_call_output are)",
                f"{at}.type",
            )
    return messages


# ---------------------------------------------------------------------- tools


def chat_tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise ResponsesRequestError("tools: expected a list", "tools")
    out: list[dict[str, Any]] = []
    for index, raw in enumerate(tools):
        at = f"tools[{index}]"
        tool = _object(raw, at)
        if tool.get("type") != "function":
            raise ResponsesRequestError(
                f"{at}.type: {tool.get('type')!r} is not supported by the gateway "
                "(function tools are)",
                f"{at}.type",
            )
        function: dict[str, Any] = {"name": _string(tool.get("name"), f"{at}.name")}
        if tool.get("description") is not None:
            function["description"] = _string(tool.get("description"), f"{at}.description")
        if tool.get("parameters") is not None:
            function["parameters"] = _object(tool.get("parameters"), f"{at}.parameters")
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
        out.append({"type": "function", "function": function})
    return out


def responses_tools(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """Chat tools as Responses function tools."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            continue
        out.append({"type": "function", **function})
    return out


def chat_tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {
            "type": "function",
            "function": {"name": _string(choice.get("name"), "tool_choice.name")},
        }
    raise ResponsesRequestError(
        'tool_choice: expected "auto", "none", "required" or {"type": "function", "name": ...}',
        "tool_choice",
    )


def responses_tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "function", "name": choice["function"].get("name")}
    return choice


def _response_format(text: Any) -> dict[str, Any] | None:
    fmt = _object(text, "text").get("format")
    if fmt is None:
        return None
    fmt = _object(fmt, "text.format")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {k: v for k, v in fmt.items() if k != "type"}
        return {"type": "json_schema", "json_schema": schema}
    raise ResponsesRequestError(f"text.format.type: {kind!r} is not supported", "text.format.type")


# ---------------------------------------------------------------------- the request


def chat_request(body: Mapping[str, Any], prior: Sequence[Any] = ()) -> dict[str, Any]:
    """A Responses body (with ``prior``: the input and output items of the responses it follows)
    as a Chat Completions body."""
    for name, reason in REFUSED.items():
        if body.get(name) not in (None, False):
            raise ResponsesRequestError(f"{name}: {reason}", name)
    if "input" not in body:
        raise ResponsesRequestError("input: required", "input")
    messages: list[dict[str, Any]] = []
    instructions = _string(body.get("instructions"), "instructions", optional=True)
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if prior:
        messages += input_messages(list(prior), "previous_response_id")
    messages += input_messages(body["input"])
    if not messages:
        raise ResponsesRequestError("input: expected at least one item", "input")
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if body.get("tools"):
        chat["tools"] = chat_tools(body["tools"])
    # Chat Completions refuses a tool choice, or parallel calls, without tools.
    if body.get("tool_choice") is not None:
        choice = chat_tool_choice(body["tool_choice"])
        if chat.get("tools"):
            chat["tool_choice"] = choice
    if body.get("parallel_tool_calls") is not None and chat.get("tools"):
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    for name in ("temperature", "top_p", "user"):
        if body.get(name) is not None:
            chat[name] = body[name]
    limit = body.get("max_output_tokens")
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ResponsesRequestError(
                "max_output_tokens: expected a positive integer", "max_output_tokens"
            )
        chat["max_completion_tokens"] = limit
    if body.get("text") is not None and (fmt := _response_format(body["text"])) is not None:
        chat["response_format"] = fmt
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and isinstance(reasoning.get("effort"), str):
        chat["reasoning_effort"] = reasoning["effort"]
    if body.get("stream") is True:
        # The usage is the completed response's: asked for whatever the client says.
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def stream_asked(body: Mapping[str, Any]) -> bool:
    return body.get("stream") is True


def input_items(value: Any) -> list[dict[str, Any]]:
    """``input`` as the list of items a stored response keeps (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def replayable(output: Sequence[Any]) -> list[dict[str, Any]]:
    """A response's output items as the next request's input takes them."""
    items: list[dict[str, Any]] = []
    for item in output:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            items.append(
                {"type": "message", "role": "assistant", "content": item.get("content") or []}
            )
        elif item.get("type") == "function_call":
            items.append(
                {
                    "type": "function_call",
                    "call_id": item.get("call_id"),
                    "name": item.get("name"),
                    "arguments": item.get("arguments"),
                }
            )
    return items


# ---------------------------------------------------------------------- the answer


@dataclass(frozen=True)
class ResponseFrame:
    """What a Responses object says beside its output: its id, when, and the request's fields
    it echoes."""

    id: str
    created_at: int
    body: Mapping[str, Any]

    @classmethod
    def of(cls, body: Mapping[str, Any], response_id: str | None = None) -> ResponseFrame:
        return cls(response_id or new_id(RESPONSE_ID_PREFIX), int(time.time()), body)

    def shell(self, model: Any, status: str) -> dict[str, Any]:
        body = self.body
        text = body.get("text") if isinstance(body.get("text"), dict) else None
        reasoning = body.get("reasoning") if isinstance(body.get("reasoning"), dict) else None
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": model if isinstance(model, str) else str(body.get("model") or ""),
            "output": [],
            "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": reasoning or {"effort": None, "summary": None},
            "store": body.get("store", True) is not False,
            "temperature": body.get("temperature", 1.0),
            "text": text or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "usage": None,
            "user": body.get("user"),
            "metadata": body.get("metadata") or {},
        }


def response_usage(usage: Any) -> dict[str, Any] | None:
    """Chat usage (prompt/completion tokens) as Responses usage (input/output tokens)."""
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    input_tokens = prompt if isinstance(prompt, int) else 0
    output_tokens = completion if isinstance(completion, int) else 0
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None
    written = prompt_details.get("cache_write_tokens") if isinstance(prompt_details, dict) else None
    reasoning = (
        completion_details.get("reasoning_tokens") if isinstance(completion_details, dict) else None
    )
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": cached if isinstance(cached, int) else 0,
            "cache_write_tokens": written if isinstance(written, int) else 0,
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {
            "reasoning_tokens": reasoning if isinstance(reasoning, int) else 0
        },
        "total_tokens": input_tokens + output_tokens,
    }


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str = "completed"
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def _status(finish_reason: Any) -> tuple[str, dict[str, Any] | None]:
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def response_object(frame: ResponseFrame, answer: Mapping[str, Any]) -> dict[str, Any]:
    """A chat answer (``choices[0].message``) as the Responses object of ``frame``."""
    choices = answer.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    choice = choice if isinstance(choice, dict) else {}
    message = _dict(choice.get("message"))
    status, incomplete = _status(choice.get("finish_reason"))
    response = frame.shell(answer.get("model"), status)
    output: list[dict[str, Any]] = []
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    if isinstance(content, list):
        text = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    if text or not message.get("tool_calls"):
        output.append(message_item(new_id("msg_"), text))
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        output.append(
            call_item(
                new_id("fc_"),
                str(call.get("id") or new_id("call_")),
                str(function.get("name") or ""),
                str(function.get("arguments") or ""),
            )
        )
    response["output"] = output
    response["incomplete_details"] = incomplete
    response["usage"] = response_usage(answer.get("usage"))
    return response


def output_text(response: Mapping[str, Any]) -> str:
    """The text of a response's message items (what the SDKs call ``output_text``)."""
    texts: list[str] = []
    for item in response.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    texts.append(str(part.get("text", "")))
    return "".join(texts)


# ---------------------------------------------------------------------- the stream


@dataclass
class _OpenCall:
    item_id: str
    call_id: str
    name: str
    output_index: int
    arguments: list[str] = field(default_factory=list)


class ResponsesStream:
    """A chat completion stream (its bytes, in whatever chunks) as the Responses API's events:
    ``feed`` returns the events each chunk completes, ``end`` the closing ones. Comments (the
    gateway's keep-alive) pass as they are; an error event ends the response as ``failed``."""

    def __init__(self, frame: ResponseFrame) -> None:
        self.frame = frame
        self._reader = SSEReader()
        self._sequence = 0
        self._started = False
        self._ended = False
        self._model: Any = None
        self._output: list[dict[str, Any]] = []
        self._text_item: str | None = None
        self._text: list[str] = []
        self._calls: dict[int, _OpenCall] = {}
        self._finish: Any = None
        self._usage: Any = None
        self._error: dict[str, Any] | None = None
        self.response: dict[str, Any] | None = None  # the last state, completed or failed

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return f"event: {kind}\ndata: {json.dumps(event)}\n\n".encode()

    def _snapshot(self, status: str) -> dict[str, Any]:
        response = self.frame.shell(self._model, status)
        response["output"] = [dict(item) for item in self._output]
        return response

    def _start(self) -> Iterator[bytes]:
        if self._started:
            return
        self._started = True
        yield self._event("response.created", response=self._snapshot("in_progress"))
        yield self._event("response.in_progress", response=self._snapshot("in_progress"))

    def feed(self, chunk: bytes) -> bytes:
        out = bytearray()
        for block in self._reader.feed(chunk):
            if not block.dispatched:
                if block.raw.lstrip().startswith(b":"):
                    out += block.raw  # a keep-alive comment: the client's idle timer resets
                continue
            data = block.json()
            if data == DONE:
                out += b"".join(self.end())
            elif isinstance(data, dict):
                out += b"".join(self._chunk(data))
        return bytes(out)

    def _chunk(self, data: dict[str, Any]) -> Iterator[bytes]:
        if self._ended:
            return
        yield from self._start()
        if isinstance(data.get("error"), dict):
            self._error = data["error"]
            yield from self.end()
            return
        if data.get("model") is not None:
            self._model = data["model"]
        if isinstance(data.get("usage"), dict):
            self._usage = data["usage"]
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        delta = _dict(choice.get("delta"))
        content = delta.get("content")
        if isinstance(content, str) and content:
            yield from self._text_delta(content)
        for part in delta.get("tool_calls") or []:
            if isinstance(part, dict):
                yield from self._call_part(part)
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]

    def _text_delta(self, content: str) -> Iterator[bytes]:
        if self._text_item is None:
            yield from self._close_calls()
            self._text_item = new_id("msg_")
            self._text = []
            index = len(self._output)
            item = {
                "type": "message",
                "id": self._text_item,
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            self._output.append(item)
            yield self._event("response.output_item.added", output_index=index, item=item)
            yield self._event(
                "response.content_part.added",
                item_id=self._text_item,
                output_index=index,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
            )
        self._text.append(content)
        yield self._event(
            "response.output_text.delta",
            item_id=self._text_item,
            output_index=len(self._output) - 1,
            content_index=0,
            delta=content,
            logprobs=[],
        )

    def _close_text(self) -> Iterator[bytes]:
        if self._text_item is None:
            return
        item_id, self._text_item = self._text_item, None
        index = next(i for i, item in enumerate(self._output) if item.get("id") == item_id)
        text = "".join(self._text)
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        yield self._event(
            "response.output_text.done",
            item_id=item_id,
            output_index=index,
            content_index=0,
            text=text,
            logprobs=[],
        )
        yield self._event(
            "response.content_part.done",
            item_id=item_id,
            output_index=index,
            content_index=0,
            part=part,
        )
        self._output[index] = message_item(item_id, text)
        yield self._event("response.output_item.done", output_index=index, item=self._output[index])

    def _call_part(self, part: dict[str, Any]) -> Iterator[bytes]:
        given = part.get("index")
        key = given if isinstance(given, int) else len(self._calls)
        function = _dict(part.get("function"))
        call = self._calls.get(key)
        if call is None:
            yield from self._close_text()
            yield from self._close_calls()
            call = _OpenCall(
                item_id=new_id("fc_"),
                call_id=str(part.get("id") or new_id("call_")),
                name=str(function.get("name") or ""),
                output_index=len(self._output),
            )
            self._calls[key] = call
            item = call_item(call.item_id, call.call_id, call.name, "", "in_progress")
            self._output.append(item)
            yield self._event(
                "response.output_item.added", output_index=call.output_index, item=item
            )
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            call.arguments.append(arguments)
            yield self._event(
                "response.function_call_arguments.delta",
                item_id=call.item_id,
                output_index=call.output_index,
                delta=arguments,
            )

    def _close_calls(self) -> Iterator[bytes]:
        for key in list(self._calls):
            call = self._calls.pop(key)
            arguments = "".join(call.arguments)
            yield self._event(
                "response.function_call_arguments.done",
                item_id=call.item_id,
                output_index=call.output_index,
                name=call.name,
                arguments=arguments,
            )
            item = call_item(call.item_id, call.call_id, call.name, arguments)
            self._output[call.output_index] = item
            yield self._event(
                "response.output_item.done", output_index=call.output_index, item=item
            )

    def end(self) -> list[bytes]:
        """The closing events: the open items done, then ``response.completed`` (or
        ``incomplete``, or ``failed`` after an error or a stream cut short); once."""
        if self._ended:
            return []
        events = list(self._start())
        events += list(self._close_text())
        events += list(self._close_calls())
        self._ended = True
        if self._error is not None:
            response = self._snapshot("failed")
            code = self._error.get("code")
            response["error"] = {
                "code": code if isinstance(code, str) else "server_error",
                "message": str(self._error.get("message") or "the model call failed"),
            }
            response["usage"] = response_usage(self._usage)
            self.response = response
            events.append(self._event("response.failed", response=response))
            return events
        status, incomplete = _status(self._finish)
        response = self._snapshot(status)
        response["incomplete_details"] = incomplete
        response["usage"] = response_usage(self._usage)
        self.response = response
        kind = "response.completed" if status == "completed" else "response.incomplete"
        events.append(self._event(kind, response=response))
        return events

    def cut(self) -> list[bytes]:
        """The stream ended without its end: the response failed."""
        if self._ended:
            return []
        if self._finish is None and self._error is None:
            self._error = {"code": "server_error", "message": "the model's stream broke off"}
        return self.end()

    @property
    def ended(self) -> bool:
        return self._ended


# ---------------------------------------------------------------------- a Responses deployment


def _message_input(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    role = message.get("role")
    content = message.get("content")
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.get("tool_call_id"),
                "output": content if isinstance(content, str) else _chat_text(content),
            }
        ]
    items: list[dict[str, Any]] = []
    if role == "assistant":
        text = content if isinstance(content, str) else _chat_text(content)
        if text:
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text}],
                }
            )
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": function.get("arguments") or "",
                    }
                )
        return items
    if isinstance(content, list):
        parts: list[dict[str, Any]] = []
        for part in content:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text":
                parts.append({"type": "input_text", "text": part.get("text", "")})
            elif part.get("type") == "image_url" and isinstance(part.get("image_url"), dict):
                image = part["image_url"]
                parts.append(
                    {
                        "type": "input_image",
                        "image_url": image.get("url"),
                        "detail": image.get("detail", "auto"),
                    }
                )
        return [{"type": "message", "role": role, "content": parts}]
    return [
        {"type": "message", "role": role, "content": content if isinstance(content, str) else ""}
    ]


def _chat_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


# What a Chat Completions body may ask that the Responses API has no field for: a chat call that
# asks one cannot be served by a deployment that speaks Responses (``untranslatable``). A value
# that asks nothing (null, false, 0, empty) is as absent.
NO_RESPONSES_FIELD = (
    "stop",
    "seed",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "frequency_penalty",
    "presence_penalty",
    "audio",
    "prediction",
    "web_search_options",
    "functions",
    "function_call",
)
# What a chat body carries that a Responses body takes under the same name.
SAME_NAMED = ("metadata", "service_tier", "prompt_cache_key", "safety_identifier", "user")


def untranslatable(chat: Mapping[str, Any]) -> str | None:
    """The first field of a Chat Completions body a Responses deployment could not honour (more
    than one choice, audio out, a tool other than a function, a field in
    ``NO_RESPONSES_FIELD``); None when it can serve it."""
    for name in NO_RESPONSES_FIELD:
        if chat.get(name) not in (None, False, 0, "", [], {}):
            return name
    if chat.get("n") not in (None, 1):
        return "n"
    if chat.get("modalities") not in (None, [], ["text"]):
        return "modalities"
    tools = chat.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        # A custom tool (free-form input) has no Responses function spelling here.
        if not isinstance(tool, dict) or not isinstance(tool.get("function"), dict):
            return "tools"
    return None


def _text_format(response_format: Any) -> dict[str, Any] | None:
    """A chat ``response_format`` as a Responses ``text.format``."""
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind in ("text", "json_object"):
        return {"type": kind}
    schema = response_format.get("json_schema")
    if kind == "json_schema" and isinstance(schema, dict):
        return {"type": "json_schema", **schema}
    return None


def chat_fields(chat: Mapping[str, Any]) -> dict[str, Any]:
    """A chat client's own fields as a Responses body spells them (``response_format`` and
    ``verbosity`` in ``text``, ``reasoning_effort`` in ``reasoning``; the same-named ones as
    they are): what a chat call sends a deployment that speaks Responses beyond the
    conversation."""
    fields = {name: chat[name] for name in SAME_NAMED if chat.get(name) is not None}
    text: dict[str, Any] = {}
    if (fmt := _text_format(chat.get("response_format"))) is not None:
        text["format"] = fmt
    if isinstance(chat.get("verbosity"), str):
        text["verbosity"] = chat["verbosity"]
    if text:
        fields["text"] = text
    if isinstance(chat.get("reasoning_effort"), str):
        fields["reasoning"] = {"effort": chat["reasoning_effort"]}
    return fields


def responses_request(
    chat: Mapping[str, Any], client_fields: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A chat body (the gateway's, its context injected) as a Responses body for a deployment
    that speaks Responses: the client's own Responses fields that have no chat spelling kept
    (``client_fields``; None for a chat call, whose own fields are translated: ``chat_fields``),
    the conversation the chat body's, never stored upstream (the gateway keeps the
    responses)."""
    body: dict[str, Any] = (
        {
            name: value
            for name, value in client_fields.items()
            if name not in ("input", "instructions", "previous_response_id", "store", "tools")
            and name not in CHAT_ONLY
        }
        if client_fields is not None
        else chat_fields(chat)
    )
    items: list[dict[str, Any]] = []
    system: list[str] = []
    for message in chat.get("messages") or []:
        if not isinstance(message, dict):
            continue
        if message.get("role") in ("system", "developer") and not items:
            system.append(_chat_text(message.get("content")))
            continue
        items += _message_input(message)
    body["model"] = chat.get("model")
    if system:
        body["instructions"] = "\n\n".join(system)
    body["input"] = items
    body["store"] = False
    if chat.get("tools"):
        body["tools"] = responses_tools(chat["tools"])
    if chat.get("tool_choice") is not None:
        body["tool_choice"] = responses_tool_choice(chat["tool_choice"])
    limits = [chat.get(n) for n in ("max_completion_tokens", "max_tokens")]
    numbers = [n for n in limits if isinstance(n, int) and not isinstance(n, bool)]
    if numbers:
        body["max_output_tokens"] = min(numbers)
    for name in ("temperature", "top_p", "parallel_tool_calls", "stream"):
        if chat.get(name) is not None:
            body[name] = chat[name]
    return body


def _chat_usage(usage: Any) -> dict[str, Any] | None:
    """Responses usage as chat usage, its details kept (the cached input is priced apart)."""
    if not isinstance(usage, dict):
        return None
    given = usage.get("input_tokens"), usage.get("output_tokens")
    prompt, completion = (n if isinstance(n, int) else 0 for n in given)
    chat: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    inputs, outputs = usage.get("input_tokens_details"), usage.get("output_tokens_details")
    cached = inputs.get("cached_tokens") if isinstance(inputs, dict) else None
    reasoning = outputs.get("reasoning_tokens") if isinstance(outputs, dict) else None
    if isinstance(cached, int) and cached > 0:
        chat["prompt_tokens_details"] = {"cached_tokens": cached}
    if isinstance(reasoning, int) and reasoning > 0:
        chat["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return chat


def chat_answer(response: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses object as a chat completion (its message text, its function calls, usage)."""
    calls = [
        {
            "id": item.get("call_id"),
            "type": "function",
            "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""},
        }
        for item in response.get("output") or []
        if isinstance(item, dict) and item.get("type") == "function_call"
    ]
    text = output_text(response)
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        message["tool_calls"] = calls
    finish = "tool_calls" if calls else "stop"
    details = response.get("incomplete_details")
    if response.get("status") == "incomplete" and isinstance(details, dict):
        finish = "length" if details.get("reason") == "max_output_tokens" else "content_filter"
    answer: dict[str, Any] = {
        "id": response.get("id"),
        "object": "chat.completion",
        "created": response.get("created_at"),
        "model": response.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    if (usage := _chat_usage(response.get("usage"))) is not None:
        answer["usage"] = usage
    return answer


class ChatChunks:
    """A Responses deployment's stream (its events) as a chat completion stream: text deltas,
    function calls by output index, the finish and the usage chunk, ``[DONE]``."""

    def __init__(self) -> None:
        self._reader = SSEReader()
        self._calls: dict[int, int] = {}  # output index → chat tool call index
        self._started = False
        self._template: dict[str, Any] = {"object": "chat.completion.chunk", "choices": []}

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return sse({**self._template, "choices": [choice]})

    def feed(self, chunk: bytes) -> bytes:
        out = bytearray()
        for block in self._reader.feed(chunk):
            data = block.json()
            if isinstance(data, dict):
                out += self._event(data)
        return bytes(out)

    def _event(self, event: dict[str, Any]) -> bytes:
        kind = event.get("type")
        response = event.get("response") if isinstance(event.get("response"), dict) else None
        if kind == "response.created" and response is not None:
            self._template = {
                "id": response.get("id"),
                "object": "chat.completion.chunk",
                "created": response.get("created_at"),
                "model": response.get("model"),
            }
            self._started = True
            return self._chunk({"role": "assistant", "content": ""})
        if kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
            return self._chunk({"content": event["delta"]})
        if kind == "response.output_item.added":
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                index = len(self._calls)
                self._calls[int(event.get("output_index") or 0)] = index
                head = {
                    "index": index,
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {"name": item.get("name"), "arguments": ""},
                }
                return self._chunk({"tool_calls": [head]})
            return b""
        if kind == "response.function_call_arguments.delta":
            index = self._calls.get(int(event.get("output_index") or 0), 0)
            part = {"index": index, "function": {"arguments": event.get("delta") or ""}}
            return self._chunk({"tool_calls": [part]})
        if kind in ("response.completed", "response.incomplete") and response is not None:
            answer = chat_answer(response)
            finish = answer["choices"][0]["finish_reason"]
            out = self._chunk({}, finish)
            if "usage" in answer:
                out += sse({**self._template, "choices": [], "usage": answer["usage"]})
            return out + b"data: [DONE]\n\n"
        if kind in ("response.failed", "error"):
            error = (response or {}).get("error") if response is not None else event
            message = error.get("message") if isinstance(error, dict) else None
            return sse({"error": {"message": str(message or "the model call failed")}})
        return b""


__all__ = [
    "NOT_TRANSLATED",
    "RESPONSE_ID_PREFIX",
    "ChatChunks",
    "ResponseFrame",
    "ResponsesRequestError",
    "ResponsesStream",
    "chat_answer",
    "chat_fields",
    "chat_request",
    "input_items",
    "input_messages",
    "new_id",
    "output_text",
    "replayable",
    "response_object",
    "response_usage",
    "responses_request",
    "stream_asked",
    "untranslatable",
]
