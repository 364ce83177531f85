"""A replay record as readable tables for the auditors' detail page.                      [pure]

Reads the shapes ``resolver.save_replay`` writes: ``sources`` (name, type, status, items, kept, ms,
on_failure, error, optional notes, where a judged source names its judge, and per-candidate
``candidates`` with recall/judge scores and the candidate's decision), ``items`` (source, priority, tokens, estimator, score, title, kept, reason),
``budget``, ``tokens`` and ``compression`` (a report with optional ``blocks``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

EMPTY = "—"


class ReplayLike(Protocol):
    id: str
    route: str
    user_id: str
    session_key: str
    status: str
    format: str
    created_at: Any
    duration_ms: float
    sources: list[dict[str, Any]]
    items: list[dict[str, Any]]
    budget: dict[str, Any]
    tokens: dict[str, Any]
    compression: dict[str, Any]
    tool_calls: list[dict[str, Any]]
    error: Any
    request_body: Any
    rewritten_body: Any
    response_received_at: Any
    response_body: Any


@dataclass(frozen=True)
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    row_classes: list[str] = field(default_factory=list)

    @property
    def styled_rows(self) -> list[tuple[str, list[str]]]:
        classes = self.row_classes or [""] * len(self.rows)
        return list(zip(classes, self.rows, strict=True))


def cell(value: Any) -> str:
    if value is None or value == "":
        return EMPTY
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
    if isinstance(value, dict):
        return "; ".join(f"{key}: {cell(inner)}" for key, inner in value.items()) or EMPTY
    if isinstance(value, list):
        return ", ".join(cell(inner) for inner in value) or EMPTY
    return str(value)


# PostgreSQL's jsonb does not keep key order: these put the keys back in a reading order (keys not
# listed follow, in the order they come).
BUDGET_ORDER = (
    "context_window",
    "reserved_output",
    "max_input",
    "request_tokens",
    "context",
    "used",
)
# The platform's counts, how they were counted, then what the provider reported.
TOKENS_ORDER = ("before", "after", "estimator", "label", "calibration", "deployment", "provider")
COMPRESSION_ORDER = (
    "applied",
    "skip_reason",
    "error",
    "tokens_before",
    "tokens_after",
    "target_request_tokens",
    "quality",
    "trigger",
    "omitted_chunks",
    "recovery_keys",
    "warnings",
    "estimator",
)
BLOCK_ORDER = (
    "message_index",
    "block_index",
    "kind",
    "mode",
    "original_tokens",
    "target_tokens",
    "final_tokens",
    "score",
    "omitted_chunks",
    "format",
)
CANDIDATE_ORDER = (
    "document_id",
    "chunk_id",
    "memory_id",
    "title",
    "recall_rank",
    "recall_score",
    "cosine",
    "bm25",
    "judge_score",
    "adjusted_score",
    "kept",
    "reason",
)


def ordered(keys: list[str], preferred: tuple[str, ...]) -> list[str]:
    return [key for key in preferred if key in keys] + [key for key in keys if key not in preferred]


# The record's keys in an auditor's words; a key not listed reads with its underscores as spaces.
LABELS = {
    "context_window": "context window",
    "reserved_output": "reserved for the answer",
    "max_input": "largest input",
    "request_tokens": "request tokens",
    "context": "context budget",
    "used": "context used",
    "before": "tokens before",
    "after": "tokens after",
    "estimator": "counted by",
    "label": "count is",
    "applied": "applied",
    "skip_reason": "why not applied",
    "tokens_before": "tokens before",
    "tokens_after": "tokens after",
    "target_request_tokens": "target request tokens",
    "omitted_chunks": "omitted chunks",
    "recovery_keys": "recovery keys",
    "message_index": "message",
    "block_index": "block",
    "original_tokens": "tokens before",
    "target_tokens": "target tokens",
    "final_tokens": "tokens after",
    "document_id": "document",
    "chunk_id": "chunk",
    "memory_id": "memory",
    "recall_rank": "recall rank",
    "recall_score": "recall score",
    "judge_score": "judge score",
    "adjusted_score": "adjusted score",
    "kept": "decision",
}
# The values of a few keys, as words.
VALUE_WORDS = {
    "not_configured": "the route has no compress block",
    "not_applied": "not applied",
    "below_threshold": "below the threshold",
    "over_budget": "over the budget",
}


def label(key: str) -> str:
    return LABELS.get(key, key.replace("_", " "))


def key_values(
    title: str,
    mapping: dict[str, Any] | None,
    preferred: tuple[str, ...] = (),
    skip: tuple[str, ...] = (),
    labels: dict[str, str] | None = None,
) -> Table:
    mapping = mapping or {}
    keys = ordered([key for key in mapping if key not in skip], preferred)
    words = {**LABELS, **(labels or {})}
    rows = [[words.get(key, key.replace("_", " ")), worded(mapping[key])] for key in keys]
    return Table(title, ["", "value"], rows)


def worded(value: Any) -> str:
    text = cell(value)
    return VALUE_WORDS.get(text, text)


def columns_of(rows: list[dict[str, Any]], preferred: tuple[str, ...]) -> list[str]:
    """Every key of the rows (candidates differ by source kind), in reading order."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return ordered(list(seen), preferred)


def decision(kept: Any) -> str:
    return "kept" if kept else "dropped"


def decision_class(row: dict[str, Any]) -> str:
    return "replay-kept" if row.get("kept") else "replay-dropped"


# The judge's notes have a column of their own (``judge_cell``), so the notes cell leaves them out.
JUDGE_NOTES = ("judge", "judge_fallback", "judge_usage")


def judge_usage_text(usage: Any) -> str:
    """A deployment judge's calls, tokens and cost: ``1 call, 412 in / 9 out tokens, cost
    unknown`` (no price known) or ``..., $0.000071``."""
    if not isinstance(usage, dict):
        return ""
    calls = usage.get("calls") or 0
    cost = usage.get("cost_usd")
    return (
        f"{calls} call{'' if calls == 1 else 's'}, {usage.get('input_tokens') or 0} in / "
        f"{usage.get('output_tokens') or 0} out tokens, "
        + ("cost unknown" if cost is None else f"${cost:.6f}")
    )


def judge_cell(source: dict[str, Any]) -> str:
    """Which relevance judge ran for a source (``local``, ``deployment:<name>``), whether it
    fell back to the recall order for want of a usable answer, and what a deployment judge's
    calls cost; a dash for unjudged sources."""
    notes = source.get("notes") or {}
    judge = notes.get("judge")
    if not judge:
        return EMPTY
    text = f"{judge} (fell back to recall order)" if notes.get("judge_fallback") else str(judge)
    usage = judge_usage_text(notes.get("judge_usage"))
    return f"{text}; {usage}" if usage else text


def notes_cell(source: dict[str, Any]) -> str:
    notes = source.get("notes") or {}
    return cell({label(key): value for key, value in notes.items() if key not in JUDGE_NOTES})


# A source's status in the list's words: only ``failed`` and ``timeout`` are failures; ``empty``
# (nothing matched) and ``skipped`` (not run for this request) are outcomes of a working source.
FAILED_STATUSES = ("failed", "timeout")
STATUS_ORDER = ("failed", "timeout", "empty", "skipped")


def source_outcome_summary(sources: list[dict[str, Any]]) -> str:
    """``3 sources, all ok`` or ``3 sources; failed: kb; empty: mem`` for the replay list."""
    count = f"{len(sources)} source{'' if len(sources) == 1 else 's'}"
    by_status: dict[str, list[str]] = {}
    for source in sources:
        status = str(source.get("status") or "unknown")
        if status != "ok":
            by_status.setdefault(status, []).append(str(source.get("name") or "?"))
    if not by_status:
        return f"{count}, all ok"
    statuses = ordered(list(by_status), STATUS_ORDER)
    return "; ".join([count, *(f"{status}: {', '.join(by_status[status])}" for status in statuses)])


def sources_table(sources: list[dict[str, Any]]) -> Table:
    columns = [
        "name",
        "type",
        "status",
        "items",
        "kept",
        "ms",
        "on failure",
        "error",
        "notes",
        "judge",
    ]
    rows = [
        [
            cell(s.get("name")),
            cell(s.get("type")),
            cell(s.get("status")),
            cell(s.get("items")),
            cell(s.get("kept")),
            cell(s.get("ms")),
            cell(s.get("on_failure")),
            cell(s.get("error")),
            notes_cell(s),
            judge_cell(s),
        ]
        for s in sources
    ]
    classes = ["replay-failed" if s.get("status") in FAILED_STATUSES else "" for s in sources]
    return Table("Sources", columns, rows, classes)


def candidate_tables(sources: list[dict[str, Any]]) -> list[Table]:
    """What each matching source (rag, memory) recalled, with its scores and its own decision."""
    tables = []
    for source in sources:
        candidates = source.get("candidates") or []
        if not candidates:
            continue
        columns = columns_of(candidates, CANDIDATE_ORDER)
        rows = [
            [
                decision(c[key])
                if key == "kept"
                else worded(c.get(key))
                if key == "reason"
                else cell(c.get(key))
                for key in columns
            ]
            for c in candidates
        ]
        headers = [label(key) for key in columns]
        title = f"Candidates of {source.get('name')} ({source.get('type')})"
        if (judge := judge_cell(source)) != EMPTY:
            title += f", judged by {judge}"
        tables.append(Table(title, headers, rows, [decision_class(c) for c in candidates]))
    return tables


def items_table(items: list[dict[str, Any]]) -> Table:
    columns = ["source", "title", "priority", "tokens", "score", "decision", "reason"]
    rows = [
        [
            cell(i.get("source")),
            cell(i.get("title")),
            cell(i.get("priority")),
            f"{cell(i.get('tokens'))} ({cell(i.get('estimator'))})"
            if i.get("estimator")
            else cell(i.get("tokens")),
            cell(i.get("score")),
            decision(i.get("kept")),
            worded(i.get("reason")),
        ]
        for i in items
    ]
    return Table("Items", columns, rows, [decision_class(i) for i in items])


def compression_tables(compression: dict[str, Any] | None) -> list[Table]:
    compression = compression or {}
    labels = {"estimator": "counted by", "quality": "quality"}
    tables = [key_values("Compression", compression, COMPRESSION_ORDER, ("blocks",), labels)]
    blocks = compression.get("blocks") or []
    if blocks:
        columns = columns_of(blocks, BLOCK_ORDER)
        rows = [[cell(b.get(key)) for key in columns] for b in blocks]
        tables.append(Table("Compressed blocks", [label(key) for key in columns], rows))
    return tables


TOOL_CALL_ORDER = ("round", "tool", "source", "status", "key", "bytes", "items", "tokens", "ms")


def tool_calls_table(calls: list[dict[str, Any]]) -> list[Table]:
    """The calls of the platform's own tools the gateway served (none: no table)."""
    if not calls:
        return []
    columns = columns_of(calls, TOOL_CALL_ORDER)
    rows = [[cell(call.get(key)) for key in columns] for call in calls]
    return [Table("Served tool calls", [label(key) for key in columns], rows)]


def text_of(content: Any) -> str:
    """A message's content as text: strings as they are, text parts joined, the rest as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part.get("text") if isinstance(part, dict) and "text" in part else json.dumps(part)
            for part in content
        ]
        return "\n".join(str(part) for part in parts)
    return json.dumps(content, ensure_ascii=False)


def messages_table(title: str, body: Any) -> Table | None:
    """A captured request or response body as role / content rows (None when not captured)."""
    if body is None:
        return None
    if isinstance(body, dict) and isinstance(body.get("choices"), list):  # an OpenAI response
        messages = [choice.get("message", {}) for choice in body["choices"]]
    elif isinstance(body, dict) and isinstance(body.get("messages"), list):
        system = body.get("system")  # Anthropic keeps the system prompt outside the messages
        messages = ([{"role": "system", "content": system}] if system else []) + body["messages"]
    elif isinstance(body, dict) and body.get("type") == "message":  # an Anthropic response
        messages = [{"role": body.get("role", "assistant"), "content": body.get("content")}]
    else:
        return Table(title, ["body"], [[json.dumps(body, indent=2, ensure_ascii=False)]])
    rows = [[cell(m.get("role")), text_of(m.get("content"))] for m in messages]
    return Table(title, ["role", "content"], rows)


def summary_table(record: ReplayLike) -> Table:
    return key_values(
        "Summary",
        {
            "id": record.id,
            "route": record.route,
            # The arm of the route's traffic split (older records and drafts: main).
            "variant": getattr(record, "variant", "") or "main",
            "status": record.status,
            "format": record.format,
            "user id": record.user_id,
            "session": record.session_key,
            "created at": record.created_at,
            "duration ms": record.duration_ms,
            # The whole call the gateway carried (the deployment's answer included).
            "call ms": getattr(record, "call_ms", None),
            "error": record.error,
            "response received at": record.response_received_at,
        },
    )


def spend_table(record: ReplayLike) -> Table | None:
    """What the call spent: the provider's usage over all its upstream calls, its cost and the
    parts of it, the deployment that answered and the API key that called (a record of the
    gateway's or the REST API's; a draft's trial has none)."""
    if not hasattr(record, "cost_usd"):
        return None
    cost = (record.tokens or {}).get("cost") or {}
    return key_values(
        "Usage and cost",
        {
            "deployment": getattr(record, "deployment", "") or None,
            "API key id": getattr(record, "key_id", None),
            "input tokens": getattr(record, "input_tokens", 0),
            "cached input tokens": getattr(record, "cached_input_tokens", 0),
            "cache write tokens": getattr(record, "cache_write_tokens", 0),
            "output tokens": getattr(record, "output_tokens", 0),
            "cost USD": record.cost_usd,
            "model cost USD": cost.get("model"),
            "judge cost USD": cost.get("judge"),
            "compression judge cost USD": cost.get("compression"),
        },
    )


def replay_sections(record: ReplayLike) -> dict[str, Any]:
    bodies = [
        messages_table("Request (captured)", record.request_body),
        messages_table("Rewritten request (captured)", record.rewritten_body),
        messages_table("Response (captured)", record.response_body),
    ]
    return {
        "tables": [
            summary_table(record),
            sources_table(record.sources or []),
            *candidate_tables(record.sources or []),
            items_table(record.items or []),
            key_values("Budget", record.budget, BUDGET_ORDER),
            key_values("Tokens", record.tokens, TOKENS_ORDER),
            *([spend] if (spend := spend_table(record)) is not None else []),
            *compression_tables(record.compression),
            *tool_calls_table(record.tool_calls or []),
        ],
        # Everything the record holds is in the tables above: no raw JSON beside them.
        "bodies": [table for table in bodies if table is not None],
    }
