"""The demo tenant's data: plain values, importable without Django."""

from __future__ import annotations

from typing import Any

SUPPORT_ROUTE: dict[str, Any] = {
    "name": "support",
    "description": "Customer support assistant (demo).",
    "model": {"name": "gpt-4o-mini", "context_window": 128000, "max_output_tokens": 1024},
    "context": {
        "sources": [
            {
                "type": "skill_guardrails",
                "name": "guardrails",
                "priority": 100,
                "texts": [
                    "Never promise a refund outside the policy window; quote the policy instead.",
                    "Do not reveal other customers' data.",
                ],
            },
            {"type": "user_profile", "name": "profile", "priority": 80, "timeout_ms": 500},
            {"type": "recent_messages", "name": "history", "priority": 60, "last_n_turns": 6},
        ],
        "budget": {"max_tokens": "auto", "reserve_output_tokens": "auto"},
        "injection": {"mode": "system_prompt"},
    },
}

DEMO_RESOLVE_BODY: dict[str, Any] = {
    "route": "support",
    "user": "u_123",
    "session": "s_9",
    "request": {
        "model": "gpt-4o-mini",
        "max_tokens": 512,
        "messages": [{"role": "user", "content": "Can I get a refund for my headphones?"}],
    },
}
