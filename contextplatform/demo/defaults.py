"""The demo tenant's data: plain values, importable without Django (the stand-in model reads it)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

DemoProvider = Literal["openai", "anthropic", "standin"]

DEMO_DEPLOYMENT = "demo-model"
DEMO_ROUTE = "support"
DEMO_USER = "u_123"
DEMO_SESSION = "s_9"
DEMO_QUESTION = "Can I get a refund for my headphones?"
DEMO_MAX_TOKENS = 512
DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
DEFAULT_ANTHROPIC_MODEL = "claude-haiku-4-5"
STANDIN_HOST = "127.0.0.1"
STANDIN_MODEL = "stand-in"
DEFAULT_STANDIN_PORT = 8001

# The route the benchmarks measure (docs/benchmarks.md): guardrails, profile, history and
# documents. The demo's route adds memories, a lazy source and compression to it.
SUPPORT_ROUTE_CORE: dict[str, Any] = {
    "name": "support",
    "description": "Customer support assistant (demo).",
    "model": {
        "name": "gpt-4o-mini",
        "context_window": 128000,
        "max_output_tokens": 1024,
        "upstream": DEMO_DEPLOYMENT,
    },
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
                # The default match block: the local judge reads its scores against this
                # collection's own calibration, measured when the articles are ingested.
                "cache_results": True,
            },
        ],
        "budget": {"max_tokens": "auto", "reserve_output_tokens": "auto"},
        "injection": {"mode": "system_prompt"},
    },
}
DEMO_ADDED_SOURCES: list[dict[str, Any]] = [
    {
        # What the user told earlier turns: recalled for the question, and each turn handed back
        # (by the gateway itself, or POST /api/v1/resolve/{id}/response) is written by the local
        # extractor, no model call.
        "type": "memory",
        "name": "memories",
        "priority": 70,
        "store": {"auto": True},
    },
    {
        # Not fetched before the call: through the gateway the model is offered a
        # search_manuals tool over the product manuals and the gateway serves its calls.
        "type": "rag",
        "name": "manuals",
        "priority": 20,
        "backend": "vectorstore",
        "backend_config": {"collection": "product-manuals"},
        "lazy": True,
    },
]
# Long tool outputs shrink to what answers the question; their originals stay retrievable
# (vsr_context_retrieve, served by the gateway) for 15 minutes.
DEMO_COMPRESS: dict[str, Any] = {
    "mode": "auto",
    "targets": {
        "tool_outputs": {"mode": "recoverable", "min_tokens": 300, "target_tokens": 120},
        "history": {"mode": "extractive", "min_tokens": 2000, "target_tokens": 1000},
    },
}
SUPPORT_ROUTE: dict[str, Any] = {
    **SUPPORT_ROUTE_CORE,
    "context": {
        **SUPPORT_ROUTE_CORE["context"],
        "sources": [*SUPPORT_ROUTE_CORE["context"]["sources"], *DEMO_ADDED_SOURCES],
        "compress": DEMO_COMPRESS,
    },
}

DEMO_RESOLVE_BODY: dict[str, Any] = {
    "route": DEMO_ROUTE,
    "user": DEMO_USER,
    "session": DEMO_SESSION,
    "request": {
        "model": "gpt-4o-mini",
        "max_tokens": DEMO_MAX_TOKENS,
        "messages": [{"role": "user", "content": DEMO_QUESTION}],
    },
}

DEMO_COLLECTION = "support-kb"
DEMO_MANUALS_COLLECTION = "product-manuals"
# What u_123 told earlier turns, as the extractor writes it, with the day it was said: seeded once
# (a start finds them by their text), recalled by the demo route's memory source.
DEMO_MEMORIES: list[dict[str, str]] = [
    {
        "content": "User lives in Lisbon (moved there in March 2026)",
        "observed_at": "2026-03-14T10:00:00+00:00",
    },
    {
        "content": "User owns the Aurora headphones bought 2026-10-02",
        "observed_at": "2026-10-02T16:30:00+00:00",
    },
    {
        "content": "User prefers replies by email rather than phone",
        "kind": "preference",
        "observed_at": "2026-10-05T09:15:00+00:00",
    },
    {
        "content": "User prefers store credit over a refund to the card",
        "kind": "preference",
        "observed_at": "2026-11-20T18:40:00+00:00",
    },
]
DEMO_MANUALS: list[dict[str, Any]] = [
    {
        "id": "aurora-pairing",
        "title": "Aurora headphones: pairing",
        "text": "To pair the Aurora headphones, hold the power button for five seconds until the "
        "light blinks blue, then choose Aurora in your phone's Bluetooth list. The headphones "
        "remember eight devices and switch to the last one used.",
        "metadata": {"product": "aurora"},
    },
    {
        "id": "aurora-reset",
        "title": "Aurora headphones: factory reset",
        "text": "A factory reset clears paired devices and fixes most sound problems, crackling "
        "included: with the headphones on the charger, hold the power and volume-down buttons "
        "together for ten seconds until the light flashes red three times.",
        "metadata": {"product": "aurora"},
    },
    {
        "id": "aurora-battery",
        "title": "Aurora headphones: battery",
        "text": "A full charge lasts 30 hours with noise cancelling on and 40 hours with it off. "
        "Ten minutes on the USB-C charger give three hours of listening.",
        "metadata": {"product": "aurora"},
    },
]
# Questions a customer might ask, each with the article that answers it: the demo route keeps that
# article for each on its default match block (tests/demo/test_demo.py).
DEMO_SAMPLE_QUESTIONS: dict[str, str] = {
    DEMO_QUESTION: "refund-policy",
    "How many days do I have to return an item?": "refund-policy",
    "My headphones make a crackling sound, is that covered?": "warranty",
    "How long does delivery take to Germany?": "shipping",
    "Do you ship to Norway?": "shipping",
    "I would like the same jacket in another colour": "exchange",
    "Someone placed an order on my account": "account-security",
    "What do I get with premium?": "premium",
}
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

# The demo route's evaluation set: each question with what it must keep (documents by id, u_123's
# memories and the guardrail by their text). A save of the route runs them.
DEMO_EVAL_CASES: list[dict[str, Any]] = [
    {
        "id": "refund",
        "query": DEMO_QUESTION,
        "user": DEMO_USER,
        "expect": {"documents": ["refund-policy"], "text_containing": ["30 days"]},
    },
    {
        "id": "return-window",
        "query": "How many days do I have to return an item?",
        "expect": {"documents": ["refund-policy"]},
    },
    {
        "id": "crackling",
        "query": "My headphones make a crackling sound, is that covered?",
        "expect": {"documents": ["warranty"]},
    },
    {
        "id": "norway",
        "query": "Do you ship to Norway?",
        "expect": {"documents": ["shipping"]},
    },
    {
        "id": "home-city",
        "query": "Can you deliver a replacement to the city where I live?",
        "user": DEMO_USER,
        "expect": {"memories_containing": ["Lisbon"]},
    },
    {
        "id": "guardrail",
        "query": "Can I get a refund after two months?",
        "expect": {"text_containing": ["Never promise a refund outside the policy window"]},
    },
]


# --- the demo deployment: a real provider when its key is set, else the local stand-in ----------


def demo_provider(environ: Mapping[str, str]) -> DemoProvider:
    """OpenAI when ``OPENAI_API_KEY`` is set, else Anthropic with ``ANTHROPIC_API_KEY``, else the
    stand-in model ``make run`` starts (the demo then needs no network)."""
    if environ.get("OPENAI_API_KEY", "").strip():
        return "openai"
    if environ.get("ANTHROPIC_API_KEY", "").strip():
        return "anthropic"
    return "standin"


def standin_port(environ: Mapping[str, str]) -> int:
    value = environ.get("STANDIN_PORT", "").strip()
    return int(value) if value.isdigit() else DEFAULT_STANDIN_PORT


def demo_deployment(environ: Mapping[str, str]) -> dict[str, Any]:
    """The demo deployment as written to ``POST /api/v1/deployments`` (its key included)."""
    provider = demo_provider(environ)
    model = environ.get("DEMO_MODEL", "").strip()
    if provider == "openai":
        return {
            "name": DEMO_DEPLOYMENT,
            "protocol": "openai",
            "base_url": environ.get("OPENAI_BASE_URL", "").strip() or DEFAULT_OPENAI_BASE_URL,
            "model": model or DEFAULT_OPENAI_MODEL,
            "api_key": environ["OPENAI_API_KEY"].strip(),
        }
    if provider == "anthropic":
        return {
            "name": DEMO_DEPLOYMENT,
            "protocol": "anthropic",
            "base_url": environ.get("ANTHROPIC_BASE_URL", "").strip() or DEFAULT_ANTHROPIC_BASE_URL,
            "model": model or DEFAULT_ANTHROPIC_MODEL,
            "api_key": environ["ANTHROPIC_API_KEY"].strip(),
        }
    return {
        "name": DEMO_DEPLOYMENT,
        "protocol": "openai",
        "base_url": f"http://{STANDIN_HOST}:{standin_port(environ)}/v1",
        "model": STANDIN_MODEL,
        "api_key": None,
        "context_window": 128000,
        # The stand-in only quotes what it is given: it cannot judge relevance.
        "may_judge": False,
    }


def demo_allowlist_entries(deployment: Mapping[str, Any]) -> list[str]:
    """What the demo tenant's outbound allow-list needs for the deployment, and no more: the
    stand-in's loopback address on its port, or a custom base URL's host on its port (a local
    OpenAI-compatible server); public providers need none."""
    if deployment["base_url"] in (DEFAULT_OPENAI_BASE_URL, DEFAULT_ANTHROPIC_BASE_URL):
        return []
    url = urlsplit(deployment["base_url"])
    if not url.hostname:
        return []
    host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
    port = url.port or (443 if url.scheme == "https" else 80)
    return [f"{host}:{port}"]


# --- what ``make run`` prints: the gateway call with curl and with the official client ----------


def _headers() -> dict[str, str]:
    return {"x-user-id": DEMO_USER, "x-session-id": DEMO_SESSION}


def _messages() -> list[dict[str, str]]:
    return [{"role": "user", "content": DEMO_QUESTION}]


def openai_snippet(server: str, key: str, route: str = DEMO_ROUTE) -> str:
    """Five lines of Python with the official ``openai`` client against the gateway."""
    return "\n".join(
        [
            "from openai import OpenAI",
            f"client = OpenAI(base_url={server + '/v1'!r}, api_key={key!r})",
            f"messages = {_messages()!r}",
            f"answer = client.chat.completions.create(model={route!r}, messages=messages, "
            f"extra_headers={_headers()!r})",
            "print(answer.choices[0].message.content)",
        ]
    )


def anthropic_snippet(server: str, key: str, route: str = DEMO_ROUTE) -> str:
    """Five lines of Python with the official ``anthropic`` client against the gateway."""
    return "\n".join(
        [
            "from anthropic import Anthropic",
            f"client = Anthropic(base_url={server!r}, api_key={key!r})",
            f"messages = {_messages()!r}",
            f"answer = client.messages.create(model={route!r}, max_tokens={DEMO_MAX_TOKENS}, "
            f"messages=messages, extra_headers={_headers()!r})",
            "print(answer.content[0].text)",
        ]
    )


def gateway_curl(server: str, key: str, protocol: str, route: str = DEMO_ROUTE) -> str:
    """The same call as one curl command line."""
    body: dict[str, Any] = {"model": route, "messages": _messages()}
    if protocol == "anthropic":
        body["max_tokens"] = DEMO_MAX_TOKENS
        path, auth = "/v1/messages", ["-H", f"x-api-key: {key}"]
        auth += ["-H", "anthropic-version: 2023-06-01"]
    else:
        path, auth = "/v1/chat/completions", ["-H", f"Authorization: Bearer {key}"]
    words = ["curl", "-s", server + path, *auth, "-H", "Content-Type: application/json"]
    for name, value in _headers().items():
        words += ["-H", f"{name}: {value}"]
    words += ["-d", json.dumps(body)]
    return shlex.join(words)
