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


# The case of issue 13: a 240-line tool output with one line about the user's question, read by a
# call whose arguments name only a file, compressed to 60 tokens.
REFUND_QUESTION = "When was the refund for my order approved?"
# At 60 tokens chunks hold at most 15 tokens, so this 29-token line is cut in two: the question's
# terms are in the first piece, the answer (the date and the reference) in the second.
REFUND_LINE = (
    "137 WARN billing: refund for order 4471 approved by the billing desk on 2026-03-03 at "
    "14:05 UTC, reference RF-88213"
)
REFUND_ANSWER = "RF-88213"
FILE_ARGUMENTS = '{"path": "/srv/app/current.txt"}'


def service_log(lines: int = 240, needle_at: int | None = 137) -> str:
    """Service log lines sharing no term with the question, a few other refunds queued, and the
    answering line at ``needle_at``."""
    rows = [
        f"{i:03d} INFO worker-{i % 5} sync: job {51_000 + i * 7} processed {i % 91} rows "
        f"in {(i * 13) % 400} ms, queue depth {i % 17}"
        for i in range(lines)
    ]
    for other in (31, 88, 190):
        if other < lines:
            rows[other] = f"{other:03d} INFO billing: refund queued, order {5_000 + other}"
    if needle_at is not None:
        rows[needle_at] = REFUND_LINE.replace("137", f"{needle_at:03d}", 1)
    return "\n".join(rows)


def file_read(tool_output: str, arguments: str = FILE_ARGUMENTS) -> dict[str, Any]:
    """The user's question, a read_file call, its output."""
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": REFUND_QUESTION},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_read",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_read", "content": tool_output},
        ],
    }
