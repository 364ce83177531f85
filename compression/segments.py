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

Where a provider keeps its calls, its results and its text parts is its protocol's to say
(``contextplatform.protocols``): this module asks ``protocol_for(chat_format)``.

Results of other injected context exchanges (``vsr_<source>_context``: guardrails, profiles, …)
are never blocks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from contextplatform.protocols.base import ProviderProtocol
from contextplatform.protocols.registry import PROTOCOLS, protocol_for
from contextplatform.protocols.tools import MessageResult

BlockKind = Literal["tool_output", "history", "rag", "memory", "current_user"]
Path = tuple[str | int, ...]

RAG_TOOL_NAME = "vsr_rag_context"
MEMORY_TOOL_NAME = "vsr_memory_context"
# Any provider's: a history may have been written in another provider's style than its format's.
INJECTED_ID_PREFIXES = tuple(protocol.injected_id_prefix for protocol in PROTOCOLS.values())
TEXT_PART_TYPES = frozenset().union(*(protocol.text_part_types for protocol in PROTOCOLS.values()))
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


def is_plain_text_part(part: Any, types: frozenset[str] = TEXT_PART_TYPES) -> bool:
    return (
        isinstance(part, dict)
        and part.get("type") in types
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


def index_tool_calls(
    messages: list[Any], protocol: ProviderProtocol
) -> tuple[dict[str, ToolCall], dict[str, list[int]]]:
    calls: dict[str, ToolCall] = {}
    results: dict[str, list[int]] = {}
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message_role(message)
        if role == "assistant":
            for call in protocol.message_calls(message):
                query = f"{call.name} {call.arguments}".strip()
                calls.setdefault(call.id, ToolCall(call.id, call.name, query, index))
        for call_id in protocol.result_ids(message):
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
    protocol: ProviderProtocol
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


def result_blocks(index: int, result: MessageResult, context: Context) -> Iterator[Block]:
    """The text of one tool result: its string content, or its plain text parts
    (``block_index``: the part's, or ``position * 1000 + part`` inside a message's item)."""
    kind = result_kind(result.call_id, context)
    if kind is None:
        return
    call_id = result.call_id
    base: Path = ("messages", index, *result.path)
    content = result.content
    if isinstance(content, str):
        yield text_block(kind, index, result.position or 0, base, content, context, call_id)
    elif isinstance(content, list):
        for inner, part in enumerate(content):
            if is_plain_text_part(part, context.protocol.text_part_types):
                block_index = (
                    inner if result.position is None else result.position * NESTED_INDEX + inner
                )
                path = (*base, inner, "text")
                yield text_block(kind, index, block_index, path, part["text"], context, call_id)


def is_plain_user_turn(message: dict[str, Any], protocol: ProviderProtocol) -> bool:
    """String content, or only text parts without citations: what ``current_user`` may truncate."""
    content = message.get("content")
    if isinstance(content, str):
        return True
    if not isinstance(content, list) or not content:
        return False
    return all(is_plain_text_part(part, protocol.text_part_types) for part in content)


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
        if is_plain_user_turn(message, context.protocol) and not is_json_payload(
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
    for part_index, part in enumerate(content if isinstance(content, list) else []):
        if not is_plain_text_part(part, context.protocol.text_part_types):
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
    for result in context.protocol.message_results(message):
        yield from result_blocks(index, result, context)
    # A message that is a result as a whole (``role: tool``) has no text of its own: it is no
    # user or assistant turn.
    yield from message_text_blocks(index, message, context)


def parse_segments(
    body: dict[str, Any], chat_format: str, provenance: ProvenanceLike | None = None
) -> Segments:
    """All blocks of ``body`` (which is only read), and which messages are protected."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        raise UnsupportedShape("the request has no messages list")
    protocol = protocol_for(chat_format)
    calls, results = index_tool_calls(messages, protocol)
    latest = latest_indexes(messages, calls, provenance)
    protected = protected_messages(messages, calls, results, latest)
    turn_user = latest[0]
    last_user_text = typed_text(messages[turn_user]) if turn_user is not None else ""
    context = Context(protocol, calls, provenance, last_user_text, protected, turn_user)
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
