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
            {
                "type": "rag",
                "name": "docs",
                "priority": 30,
                "backend": "vectorstore",
                "backend_config": {"collection": "support-kb"},
                # The local judge's 0.5 is calibrated on Cranfield's sparse relevance; a small
                # support collection reads better at 0.15 (docs/configuration.md, Judge).
                "match": {
                    "recall": {"method": "embedding", "top_k": 20, "min_similarity": 0.3},
                    "judge": {"preset": "relevance", "top_k": 3, "min_score": 0.15},
                },
                "cache_results": True,
            },
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

DEMO_COLLECTION = "support-kb"
DEMO_DOCUMENTS: list[dict[str, Any]] = [
    {
        "id": "refund-policy",
        "title": "Refund policy",
        "text": "Customers can return any product within 30 days of delivery for a full refund. "
        "The item must be in its original packaging. Refunds go back to the original payment "
        "method within 5 business days of the return arriving at our warehouse. Opened software "
        "and gift cards cannot be refunded.",
        "metadata": {"topic": "billing"},
    },
    {
        "id": "warranty",
        "title": "Warranty for audio products",
        "text": "Headphones and speakers carry a two-year warranty against manufacturing defects, "
        "such as crackling sound, a dead ear cup or a broken hinge. Damage from drops or water is "
        "not covered. To claim, send a short video of the fault and the order number; we ship a "
        "replacement before you send the faulty unit back.",
        "metadata": {"topic": "warranty"},
    },
    {
        "id": "shipping",
        "title": "Shipping times and costs",
        "text": "Standard shipping within the EU takes 3 to 5 business days and is free above 50 "
        "euros. Express shipping arrives the next business day when ordered before 2 pm. We ship "
        "to the UK, Switzerland and Norway with customs duties paid.",
        "metadata": {"topic": "shipping"},
    },
    {
        "id": "exchange",
        "title": "Exchanging a product",
        "text": "If you want another size or colour, start an exchange from your order page. "
        "Exchanges are free within 30 days. The new item ships as soon as the carrier scans the "
        "return label.",
        "metadata": {"topic": "billing"},
    },
    {
        "id": "account-security",
        "title": "Account security",
        "text": "We never ask for your password by email or phone. Turn on two-factor "
        "authentication in your account settings. If you see an order you did not place, reset "
        "your password and contact support so we can block the order.",
        "metadata": {"topic": "account"},
    },
    {
        "id": "premium",
        "title": "Premium membership",
        "text": "Premium members get free express shipping, an extended 60-day return window and "
        "priority support by chat. Membership renews yearly and can be cancelled at any time from "
        "the account page.",
        "metadata": {"topic": "billing"},
    },
]
