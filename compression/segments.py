"""Read a chat request (OpenAI Chat Completions or Anthropic Messages) as compressible blocks.

A block is one piece of text the engine may shorten, with where it lives in the body (``path``),
what it is (``kind``), and what it is about (``query``: for a tool output its call's name and
arguments followed by the latest user text, for the others the latest user text). Everything
that is not a block is never changed: system and developer messages, tool calls and their ids,
tool definitions, media, citations, thinking blocks, and every key besides the text itself.

Kinds (those of vLLM Semantic Router's context compression):

* ``tool_output`` — the result of a tool call: OpenAI ``role: tool`` / ``function`` string content
  or its text parts; Anthropic ``tool_result`` string content or its nested ``text`` items
  (``block_index = outer * 1000 + inner``). Compressible wherever it is, even in the latest
  exchange: protection only gates history.
* ``rag`` / ``memory`` — tool results of the exchanges the platform injected (ids in
  ``Provenance``, or calls named ``vsr_rag_context`` / ``vsr_memory_context``).
* ``history`` — text of user and assistant messages that are not protected.
* ``current_user`` — the plain text of the latest turn-starting user message.

Results of other injected context exchanges (``vsr_<source>_context``: guardrails, profiles, …)
are never blocks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

BlockKind = Literal["tool_output", "history", "rag", "memory", "current_user"]
Path = tuple[str | int, ...]

RAG_TOOL_NAME = "vsr_rag_context"
MEMORY_TOOL_NAME = "vsr_memory_context"
INJECTED_ID_PREFIXES = ("call_vsr_", "toolu_vsr_")
TEXT_PART_TYPES = frozenset({"text", "input_text"})
# Keys that make a text part evidence rather than prose: never shortened.
CITATION_KEYS = frozenset({"citations", "annotations", "signature"})
SIGNED_TYPES = frozenset({"thinking", "redacted_thinking"})
NESTED_INDEX = 1000


class ProvenanceLike(Protocol):
    rag_call_ids: frozenset[str]
    memory_call_ids: frozenset[str]


@dataclass(frozen=True)
class Block:
    kind: BlockKind
    message_index: int
    block_index: int
    path: Path  # from the body root, e.g. ("messages", 3, "content", 0, "text")
    text: str
    query: str
    call_id: str | None = None

    @property
    def looks_like_json(self) -> bool:
        return looks_like_json(self.text)


@dataclass
class ToolCall:
    call_id: str
    name: str
    query: str
    message_index: int


@dataclass
class Segments:
    blocks: list[Block]
    last_user_text: str
    latest_user_index: int | None
    latest_assistant_index: int | None
    protected_messages: frozenset[int]


class UnsupportedShape(ValueError):
    """The body has no ``messages`` list."""


# --- small readers ---------------------------------------------------------------------------


def looks_like_json(text: str) -> bool:
    """A complete JSON document (object, array or string): compressed only through its leaves."""
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        return True  # even malformed: the text engine leaves it unchanged, never as prose
    return stripped.startswith('"') and parses_as_json(stripped)


def is_json_payload(text: str) -> bool:
    """A valid JSON object or array."""
    stripped = text.strip()
    return stripped.startswith(("{", "[")) and parses_as_json(stripped)


def parses_as_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    return compact_json(arguments)


def is_plain_text_part(part: Any) -> bool:
    return (
        isinstance(part, dict)
        and part.get("type") in TEXT_PART_TYPES
        and isinstance(part.get("text"), str)
        and not CITATION_KEYS.intersection(part)
    )


def message_role(message: Any) -> str:
    return str(message.get("role", "")) if isinstance(message, dict) else ""


def typed_text(message: dict[str, Any]) -> str:
    """The text of a turn: string content or text parts (tool results are not typed text)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") in TEXT_PART_TYPES
            and isinstance(part.get("text"), str)
        ]
        return "\n".join(part for part in parts if part)
    return ""


# --- tool calls ------------------------------------------------------------------------------


def openai_calls(index: int, message: dict[str, Any]) -> Iterator[ToolCall]:
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict) or not isinstance(call.get("id"), str):
            continue
        raw_function = call.get("function")
        function: dict[str, Any] = raw_function if isinstance(raw_function, dict) else {}
        name = str(function.get("name", ""))
        query = f"{name} {arguments_text(function.get('arguments'))}".strip()
        yield ToolCall(call["id"], name, query, index)
    legacy = message.get("function_call")
    if isinstance(legacy, dict) and legacy.get("name"):
        name = str(legacy["name"])
        query = f"{name} {arguments_text(legacy.get('arguments'))}".strip()
        yield ToolCall(f"function:{name}", name, query, index)


def anthropic_calls(index: int, message: dict[str, Any]) -> Iterator[ToolCall]:
    content = message.get("content")
    for item in content if isinstance(content, list) else []:
        if (
            isinstance(item, dict)
            and item.get("type") == "tool_use"
            and isinstance(item.get("id"), str)
        ):
            name = str(item.get("name", ""))
            query = f"{name} {compact_json(item.get('input', {}))}".strip()
            yield ToolCall(item["id"], name, query, index)


def openai_result_ids(message: dict[str, Any]) -> list[str]:
    role = message_role(message)
    if role == "tool" and isinstance(message.get("tool_call_id"), str):
        return [message["tool_call_id"]]
    if role == "function" and message.get("name"):
        return [f"function:{message['name']}"]
    return []


def anthropic_result_ids(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    return [
        item["tool_use_id"]
        for item in (content if isinstance(content, list) else [])
        if isinstance(item, dict)
        and item.get("type") == "tool_result"
        and isinstance(item.get("tool_use_id"), str)
    ]


def index_tool_calls(
    messages: list[Any], chat_format: str
) -> tuple[dict[str, ToolCall], dict[str, list[int]]]:
    calls: dict[str, ToolCall] = {}
    results: dict[str, list[int]] = {}
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message_role(message)
        if role == "assistant":
            found = (
                anthropic_calls(index, message)
                if chat_format == "anthropic"
                else openai_calls(index, message)
            )
            for call in found:
                calls.setdefault(call.call_id, call)
        ids = (
            anthropic_result_ids(message)
            if chat_format == "anthropic"
            else openai_result_ids(message)
        )
        for call_id in ids:
            results.setdefault(call_id, []).append(index)
    return calls, results


def injected_kind(
    call_id: str, calls: dict[str, ToolCall], provenance: ProvenanceLike | None
) -> str | None:
    """``rag``, ``memory``, ``context`` (another injected source: never compressed) or None."""
    if provenance is not None:
        if call_id in provenance.rag_call_ids:
            return "rag"
        if call_id in provenance.memory_call_ids:
            return "memory"
    name = calls[call_id].name if call_id in calls else ""
    if name == RAG_TOOL_NAME:
        return "rag"
    if name == MEMORY_TOOL_NAME:
        return "memory"
    if name.startswith("vsr_") and name.endswith("_context"):
        return "context"
    if call_id.startswith(INJECTED_ID_PREFIXES) and not name:
        return "context"  # an injected result whose call is gone: keep it as it is
    return None


# --- protection ------------------------------------------------------------------------------


def is_injected_assistant(
    message: dict[str, Any],
    own_calls: list[ToolCall],
    calls: dict[str, ToolCall],
    provenance: ProvenanceLike | None,
) -> bool:
    """An assistant message the platform added to carry injected context (no text of its own)."""
    if not own_calls or typed_text(message).strip():
        return False
    return all(injected_kind(call.call_id, calls, provenance) for call in own_calls)


def latest_indexes(
    messages: list[Any], calls: dict[str, ToolCall], provenance: ProvenanceLike | None
) -> tuple[int | None, int | None, int | None]:
    """(latest turn-starting user with text, latest user message of any kind, latest assistant
    that is not an injected context exchange)."""
    by_message: dict[int, list[ToolCall]] = {}
    for call in calls.values():
        by_message.setdefault(call.message_index, []).append(call)
    turn_user = any_user = assistant = None
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not isinstance(message, dict):
            continue
        role = message_role(message)
        if role == "user":
            if any_user is None:
                any_user = index
            if turn_user is None and typed_text(message).strip():
                turn_user = index
        elif (
            role == "assistant"
            and assistant is None
            and not is_injected_assistant(message, by_message.get(index, []), calls, provenance)
        ):
            assistant = index
        if turn_user is not None and assistant is not None:
            break
    return turn_user, any_user, assistant


def spread_over_exchanges(
    protected: set[int], calls: dict[str, ToolCall], results: dict[str, list[int]]
) -> None:
    """A tool exchange is atomic: if either side is protected, both are."""
    changed = True
    while changed:
        changed = False
        for call_id, call in calls.items():
            sides = {call.message_index, *results.get(call_id, [])}
            if sides & protected and not sides <= protected:
                protected |= sides
                changed = True


def protected_messages(
    messages: list[Any],
    calls: dict[str, ToolCall],
    results: dict[str, list[int]],
    latest: tuple[int | None, int | None, int | None],
) -> frozenset[int]:
    protected = {
        index
        for index, message in enumerate(messages)
        if message_role(message) in {"system", "developer"}
    }
    protected.update(index for index in latest if index is not None)
    spread_over_exchanges(protected, calls, results)
    return frozenset(protected)


# --- blocks ----------------------------------------------------------------------------------


@dataclass
class Context:
    chat_format: str
    calls: dict[str, ToolCall]
    provenance: ProvenanceLike | None
    last_user_text: str
    protected: frozenset[int]
    turn_user_index: int | None


def result_kind(call_id: str | None, context: Context) -> str | None:
    if call_id is None:
        return "tool_output"
    injected = injected_kind(call_id, context.calls, context.provenance)
    if injected == "context":
        return None
    return injected or "tool_output"


def result_query(kind: str, call_id: str | None, context: Context) -> str:
    """A tool output is about its call and about the latest user text; retrieved context and
    history about the latest user text.

    vLLM Semantic Router scores a tool output against its call alone. A call's arguments often
    name only where to look (``read_file {"path": "app.log"}``), so the one line of a long output
    that answers the user shares no term with them: every chunk scored 0, only the boundaries were
    kept and the block's score was 0.0. The user's question is what the line is about, so it is
    part of the query too."""
    if kind == "tool_output" and call_id is not None and call_id in context.calls:
        return f"{context.calls[call_id].query} {context.last_user_text}".strip()
    return context.last_user_text


def text_block(
    kind: str,
    index: int,
    block_index: int,
    path: Path,
    text: str,
    context: Context,
    call_id: str | None = None,
) -> Block:
    return Block(
        kind=kind,  # type: ignore[arg-type]
        message_index=index,
        block_index=block_index,
        path=path,
        text=text,
        query=result_query(kind, call_id, context),
        call_id=call_id,
    )


def openai_tool_blocks(index: int, message: dict[str, Any], context: Context) -> Iterator[Block]:
    ids = openai_result_ids(message)
    call_id = ids[0] if ids else None
    kind = result_kind(call_id, context)
    if kind is None:
        return
    base: Path = ("messages", index, "content")
    content = message.get("content")
    if isinstance(content, str):
        yield text_block(kind, index, 0, base, content, context, call_id)
    elif isinstance(content, list):
        for part_index, part in enumerate(content):
            if is_plain_text_part(part):
                path = (*base, part_index, "text")
                yield text_block(kind, index, part_index, path, part["text"], context, call_id)


def anthropic_result_blocks(
    index: int, item_index: int, item: dict[str, Any], context: Context
) -> Iterator[Block]:
    call_id = item.get("tool_use_id") if isinstance(item.get("tool_use_id"), str) else None
    kind = result_kind(call_id, context)
    if kind is None:
        return
    base: Path = ("messages", index, "content", item_index, "content")
    content = item.get("content")
    if isinstance(content, str):
        yield text_block(kind, index, item_index, base, content, context, call_id)
    elif isinstance(content, list):
        for inner, nested in enumerate(content):
            if is_plain_text_part(nested) and nested.get("type") == "text":
                block_index = item_index * NESTED_INDEX + inner
                path = (*base, inner, "text")
                yield text_block(kind, index, block_index, path, nested["text"], context, call_id)


def is_plain_user_turn(message: dict[str, Any], chat_format: str) -> bool:
    """String content, or only text parts without citations: what ``current_user`` may truncate."""
    content = message.get("content")
    if isinstance(content, str):
        return True
    if not isinstance(content, list) or not content:
        return False
    allowed = {"text"} if chat_format == "anthropic" else TEXT_PART_TYPES
    return all(is_plain_text_part(part) and part["type"] in allowed for part in content)


def has_signed_content(message: dict[str, Any]) -> bool:
    """Thinking blocks and signed parts: the whole message is kept as it is."""
    content = message.get("content")
    return any(
        isinstance(part, dict)
        and (part.get("type") in SIGNED_TYPES or CITATION_KEYS.intersection(part))
        for part in (content if isinstance(content, list) else [])
    )


def message_text_kind(index: int, message: dict[str, Any], context: Context) -> str | None:
    """``current_user`` for the latest typed user turn, ``history`` for unprotected turns."""
    role = message_role(message)
    if index == context.turn_user_index:
        if is_plain_user_turn(message, context.chat_format) and not is_json_payload(
            typed_text(message)
        ):
            return "current_user"
        return None
    if role not in {"user", "assistant"} or index in context.protected:
        return None
    return None if has_signed_content(message) else "history"


def message_text_blocks(index: int, message: dict[str, Any], context: Context) -> Iterator[Block]:
    kind = message_text_kind(index, message, context)
    if kind is None:
        return
    role = message_role(message)
    content = message.get("content")
    base: Path = ("messages", index, "content")
    if isinstance(content, str):
        if role == "user" and kind == "history" and is_json_payload(content):
            return
        yield text_block(kind, index, 0, base, content, context)
        return
    allowed = {"text"} if context.chat_format == "anthropic" else TEXT_PART_TYPES
    for part_index, part in enumerate(content if isinstance(content, list) else []):
        if not is_plain_text_part(part) or part["type"] not in allowed:
            continue
        if role == "user" and kind == "history" and is_json_payload(part["text"]):
            continue
        yield text_block(
            kind, index, part_index, (*base, part_index, "text"), part["text"], context
        )


def message_blocks(index: int, message: dict[str, Any], context: Context) -> Iterator[Block]:
    role = message_role(message)
    if role in {"system", "developer"}:
        return
    if context.chat_format != "anthropic" and role in {"tool", "function"}:
        yield from openai_tool_blocks(index, message, context)
        return
    if context.chat_format == "anthropic":
        content = message.get("content")
        for item_index, item in enumerate(content if isinstance(content, list) else []):
            if isinstance(item, dict) and item.get("type") == "tool_result":
                yield from anthropic_result_blocks(index, item_index, item, context)
    yield from message_text_blocks(index, message, context)


def parse_segments(
    body: dict[str, Any], chat_format: str, provenance: ProvenanceLike | None = None
) -> Segments:
    """All blocks of ``body`` (which is only read), and which messages are protected."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        raise UnsupportedShape("the request has no messages list")
    calls, results = index_tool_calls(messages, chat_format)
    latest = latest_indexes(messages, calls, provenance)
    protected = protected_messages(messages, calls, results, latest)
    turn_user = latest[0]
    last_user_text = typed_text(messages[turn_user]) if turn_user is not None else ""
    context = Context(chat_format, calls, provenance, last_user_text, protected, turn_user)
    blocks = [
        block
        for index, message in enumerate(messages)
        if isinstance(message, dict)
        for block in message_blocks(index, message, context)
    ]
    return Segments(
        blocks=blocks,
        last_user_text=last_user_text,
        latest_user_index=turn_user,
        latest_assistant_index=latest[2],
        protected_messages=protected,
    )
