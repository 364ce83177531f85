"""Requests for the compression engine's tests, hand-built and generated.

The hand-built ones are the engine's worked examples: a tool call whose output is a long log (with
``NEEDLE``, the line the call asks for, where a test wants it), in OpenAI's and Anthropic's shapes;
RAG and memory blocks injected by the routing pipeline; three tool outputs of different topics to
rank; a long latest user message. The hypothesis strategies generate whole conversations (user and
assistant turns, tool calls with text or JSON outputs, images, injected RAG and memory) rendered to
either provider's shape, compress blocks with random modes and thresholds, and budgets as a share of
the request's own size.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from compression.config import CompressConfig
from contextplatform.resolve.injection import SourceBlock, inject

# --- hand-built requests -------------------------------------------------------------------------

IMAGE_URL = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
ANTHROPIC_IMAGE = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
}
NEEDLE = "the vault code for order 4242 is alpha-bravo-nine"


def log(lines: int, topic: str = "server", needle_at: int | None = None) -> str:
    rows = [
        f"{topic} entry {i}: status nominal, queue depth {i % 17}, latency {i * 3} ms"
        for i in range(lines)
    ]
    if needle_at is not None:
        rows[needle_at] = NEEDLE
    return "\n".join(rows)


def openai_tool_request(output: str, arguments: str = '{"order": 4242}') -> dict[str, Any]:
    return {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": "What is the vault code for order 4242?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_vault_log", "arguments": arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": output},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_vault_log",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ],
    }


def anthropic_tool_request(output: str) -> dict[str, Any]:
    return {
        "model": "claude",
        "system": "You are a support agent.",
        "max_tokens": 256,
        "messages": [
            {"role": "user", "content": "What is the vault code for order 4242?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Reading the log."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "read_vault_log",
                        "input": {"order": 4242},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "is_error": False,
                        "cache_control": {"type": "ephemeral"},
                        "content": [
                            {"type": "text", "text": output},
                            ANTHROPIC_IMAGE,
                            {"type": "text", "text": "end of log"},
                        ],
                    }
                ],
            },
        ],
        "tools": [{"name": "read_vault_log", "input_schema": {"type": "object"}}],
    }


def injected(chat_format: str, mode: str = "tool_role") -> dict[str, Any]:
    base: dict[str, Any]
    if chat_format == "openai":
        base = {"messages": [{"role": "user", "content": "What is the refund window?"}]}
    else:
        base = {
            "system": "Be brief.",
            "messages": [{"role": "user", "content": "What is the refund window?"}],
        }
    blocks = [
        SourceBlock("docs", "rag", (log(500, "policy", needle_at=7),)),
        SourceBlock("mem", "memory", (log(500, "memory"),)),
    ]
    return inject(base, chat_format, blocks, mode, "rsv_test")  # type: ignore[arg-type]


def three_outputs() -> dict[str, Any]:
    calls = [
        ("c1", "weather", "rain forecast wind"),
        ("c2", "vault", "vault code order"),
        ("c3", "menu", "lunch menu soup"),
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is the vault code for the order?"}
    ]
    for call_id, name, topic in calls:
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": "{}"},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": log(300, topic)})
    return {"messages": messages}


def long_question(chat_format: str) -> dict[str, Any]:
    question = "Please read this carefully. " + log(400, "note") + " What should I do?"
    if chat_format == "openai":
        return {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": question},
            ]
        }
    return {"system": "Be brief.", "messages": [{"role": "user", "content": question}]}


# --- generated conversations ---------------------------------------------------------------------

WORDS = [
    "order",
    "refund",
    "vault",
    "code",
    "server",
    "latency",
    "queue",
    "depot",
    "van",
    "policy",
    "memory",
    "user",
    "status",
    "error",
    "retry",
    "invoice",
    "ticket",
    "shipping",
    "window",
    "days",
    "payment",
    "card",
    "account",
    "login",
    "token",
    "cache",
    "disk",
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
]


@st.composite
def prose(draw: st.DrawFn, max_lines: int = 80) -> str:
    lines = draw(st.integers(min_value=1, max_value=max_lines))
    rows = [
        " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12)))
        for _ in range(lines)
    ]
    return "\n".join(rows)


@st.composite
def tool_output(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 4)) == 0:
        notes = draw(st.lists(prose(12), min_size=1, max_size=6))
        return json.dumps([{"n": i, "ok": True, "note": note} for i, note in enumerate(notes)])
    return draw(prose())


# A conversation is a list of turns, rendered to either provider's shape.
turn = st.one_of(
    st.tuples(st.just("user"), prose(), st.booleans(), st.booleans()),  # text, image, json
    st.tuples(st.just("assistant"), prose(), st.booleans(), st.booleans()),
    st.tuples(
        st.just("tools"),
        st.lists(tool_output(), min_size=1, max_size=2),
        st.booleans(),
        st.booleans(),
    ),
    st.tuples(st.just("rag"), prose(), st.booleans(), st.booleans()),
    st.tuples(st.just("memory"), prose(), st.booleans(), st.booleans()),
)


@st.composite
def conversation(draw: st.DrawFn) -> dict[str, Any]:
    turns = draw(st.lists(turn, min_size=1, max_size=8))
    last = draw(st.sampled_from(["user", "tools"]))
    if last == "user":
        turns.append(("user", draw(prose()), draw(st.booleans()), False))
    else:
        turns.append(("tools", draw(st.lists(tool_output(), min_size=1, max_size=2)), False, False))
    return {
        "system": draw(st.one_of(st.none(), prose(6))),
        "developer": draw(st.booleans()),
        "turns": turns,
        "tools": draw(st.booleans()),
    }


def render_openai(spec: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if spec["system"] is not None:
        messages.append({"role": "system", "content": spec["system"]})
    if spec["developer"]:
        messages.append({"role": "developer", "content": "Use tools when needed."})
    for number, (kind, payload, flag, json_flag) in enumerate(spec["turns"]):
        if kind == "user":
            text = json.dumps({"payload": payload}) if json_flag else payload
            content: Any = [{"type": "text", "text": text}, IMAGE_URL] if flag else text
            messages.append({"role": "user", "content": content})
        elif kind == "assistant":
            messages.append({"role": "assistant", "content": payload})
        elif kind == "tools":
            ids = [f"call_{number}_{i}" for i in range(len(payload))]
            calls = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "lookup", "arguments": json.dumps({"n": i})},
                }
                for i, call_id in enumerate(ids)
            ]
            messages.append(
                {"role": "assistant", "content": "checking" if flag else None, "tool_calls": calls}
            )
            for call_id, output in zip(ids, payload, strict=True):
                content = [{"type": "text", "text": output}, IMAGE_URL] if flag else output
                messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        else:
            call_id = f"call_vsr_{number}"
            name = "vsr_rag_context" if kind == "rag" else "vsr_memory_context"
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": "{}"},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": payload})
    body: dict[str, Any] = {"model": "m", "messages": messages}
    if spec["tools"]:
        body["tools"] = [
            {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
        ]
    return body


def render_anthropic(spec: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for number, (kind, payload, flag, json_flag) in enumerate(spec["turns"]):
        if kind == "user":
            text = json.dumps({"payload": payload}) if json_flag else payload
            content: Any = [{"type": "text", "text": text}, ANTHROPIC_IMAGE] if flag else text
            messages.append({"role": "user", "content": content})
        elif kind == "assistant":
            messages.append({"role": "assistant", "content": payload})
        else:
            outputs = payload if kind == "tools" else [payload]
            name = {"tools": "lookup", "rag": "vsr_rag_context", "memory": "vsr_memory_context"}[
                kind
            ]
            prefix = "toolu_vsr_" if kind != "tools" else "toolu_"
            ids = [f"{prefix}{number}_{i}" for i in range(len(outputs))]
            uses = [
                {"type": "tool_use", "id": call_id, "name": name, "input": {"n": i}}
                for i, call_id in enumerate(ids)
            ]
            lead = [{"type": "text", "text": "checking"}] if flag and kind == "tools" else []
            messages.append({"role": "assistant", "content": lead + uses})
            results = []
            for call_id, output in zip(ids, outputs, strict=True):
                inner: Any = [{"type": "text", "text": output}, ANTHROPIC_IMAGE] if flag else output
                result: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": inner,
                }
                if flag:
                    result["cache_control"] = {"type": "ephemeral"}
                    result["is_error"] = False
                results.append(result)
            messages.append({"role": "user", "content": results})
    body: dict[str, Any] = {"model": "m", "max_tokens": 100, "messages": messages}
    if spec["system"] is not None:
        body["system"] = spec["system"]
    if spec["tools"]:
        body["tools"] = [{"name": "lookup", "input_schema": {"type": "object"}}]
    return body


# --- generated compress blocks and budgets -------------------------------------------------------

MODES = st.sampled_from(["preserve", "extractive", "recoverable"])


@st.composite
def compress_config(draw: st.DrawFn) -> CompressConfig:
    def target(mode: str) -> dict[str, Any]:
        low = draw(st.integers(min_value=20, max_value=400))
        return {"mode": mode, "min_tokens": low, "target_tokens": draw(st.integers(1, low - 1))}

    return CompressConfig.model_validate(
        {
            "mode": draw(st.sampled_from(["auto", "always"])),
            "targets": {
                "tool_outputs": target(draw(MODES)),
                "history": target(draw(MODES)),
                "rag": target(draw(MODES)),
                "memory": target(draw(MODES)),
                "current_user": {"mode": draw(st.sampled_from(["preserve", "truncate"]))},
            },
        }
    )


# The budget as a share of the request's own size: mostly reachable, sometimes not.
BUDGET_SHARE = st.one_of(
    st.floats(min_value=1.0, max_value=1.5),
    st.floats(min_value=0.75, max_value=1.0),
    st.floats(min_value=0.1, max_value=0.75),
    st.just(50.0),
)
