"""A chat whose tool output (2,500 log lines, one of them the answer) is worth compressing."""

from __future__ import annotations

from typing import Any

LOG = "\n".join(
    f"log line {i}: service {i % 7} answered {500 if i == 1234 else 200} after {i % 97} ms"
    for i in range(2500)
)


def conversation(tool_output: str = LOG, system: str = "You are a log analyst.") -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 200,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "Which service answered 500?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_logs", "arguments": '{"status": 500}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": tool_output},
            {"role": "user", "content": "Which service answered 500, and when?"},
        ],
    }
