"""Section 16: how much of each request stays the same from one turn of a session to the next,
with context injected, and how much of it a provider's prompt cache can then serve.

A conversation as an agent sends it: an Anthropic Messages body with a system prompt of the
length real assistants carry, two tools of the caller's, and the whole conversation so far; each
turn adds an answer and the next of the demo's sample questions. Each turn goes through the resolve
use case (in process) on copies of the demo's ``support`` route (guardrails, profile, history,
documents, u_123's memories), four ways: context injected as tool exchanges (the default) or into
the system prompt, each with ``model.prompt_cache`` off and on. For every turn after the first:

- *prefix unchanged*: the share of the rewritten request (serialised in the provider's prefix
  order: tools, system, messages; the cache marks themselves left out) that the previous turn's
  request begins with: what a provider could serve from its cache at best;
- *read from the cache*: the share up to the last cache mark of the previous turn that lies within
  that unchanged prefix: what Anthropic serves from its cache (marks are needed there; without
  them nothing is); for OpenAI, which caches unmarked prefixes by itself, the first figure is the
  one that counts.

The bench's routes and their records are removed afterwards.
"""

from __future__ import annotations

import copy
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextplatform.protocols.prompt_cache import common_prefix_length
from scripts.bench_env import load_average, utc_now
from scripts.bench_setup import DEMO_TENANT, demo_tenant, ensure_demo_documents, log
from scripts.report import Check, check_rows, print_checks, quick_note, table, write_section

USER = "u_123"
START, END = "<!-- prompt_cache:start -->", "<!-- prompt_cache:end -->"
FULL_TURNS, QUICK_TURNS = 16, 6
FULL_SESSIONS, QUICK_SESSIONS = 4, 1
TARGET_READ_SHARE = 0.5  # at least half of a later turn read from the cache, marks on
ARMS = {
    "tool_role, prompt_cache off": ("tool_role", False),
    "tool_role, prompt_cache on": ("tool_role", True),
    "system_prompt, prompt_cache off": ("system_prompt", False),
    "system_prompt, prompt_cache on": ("system_prompt", True),
}
SYSTEM_PROMPT = " ".join(
    [
        "You are the customer support assistant of an online shop that sells headphones,",
        "jackets and premium memberships. Answer in the customer's language, briefly, and quote",
        "the policy that applies. Never invent order numbers, prices or dates; when the",
        "context does not say, ask. Escalate to a human when the customer asks for one, when",
        "they are upset after two answers, or when an order is over 500 euros.",
    ]
    * 12  # a system prompt of ~1,000 tokens, as assistants' prompts commonly are
)
CALLER_TOOLS = [
    {
        "name": "lookup_order",
        "description": "Find an order of the customer by its number.",
        "input_schema": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    },
    {
        "name": "escalate",
        "description": "Hand the conversation to a human agent.",
        "input_schema": {"type": "object", "properties": {"reason": {"type": "string"}}},
    },
]
ANSWER = "Thanks for asking. Here is what our policy says, and what I would do next."


@dataclass
class ArmResult:
    unchanged: list[float] = field(default_factory=list)  # per turn after the first
    read_from_cache: list[float] = field(default_factory=list)
    request_chars: list[int] = field(default_factory=list)


@dataclass
class PromptCacheResults:
    date: str
    quick: bool
    turns: int
    sessions: int
    arms: dict[str, ArmResult] = field(default_factory=dict)
    load_average: str = ""
    runtime_s: float = 0.0


def serialised(body: dict[str, Any]) -> tuple[str, list[int]]:
    """The request in the provider's prefix order without its cache marks, and where each
    marked block ends in that text."""
    text = ""
    ends: list[int] = []

    def add(block: Any) -> None:
        nonlocal text
        marked = isinstance(block, dict) and "cache_control" in block
        plain = {k: v for k, v in block.items() if k != "cache_control"} if marked else block
        text += json.dumps(plain, sort_keys=True) + "\n"
        if marked:
            ends.append(len(text))

    for tool in body.get("tools") or []:
        add(tool)
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or []:
        add(block)
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        text += f"<{message.get('role')}>\n"
        for block in blocks or []:
            add(block)
    return text, ends


def prepare() -> tuple[Any, dict[str, str]]:
    from django_tenants.utils import schema_context

    from contextplatform.demo.defaults import DEMO_ADDED_SOURCES, SUPPORT_ROUTE_CORE
    from contextplatform.routes.models import Route
    from contextplatform.routes.services import create_route, prepare_route

    tenant = demo_tenant("prompt_cache")
    names = {}
    with schema_context(DEMO_TENANT):
        ensure_demo_documents("prompt_cache")
        for index, (arm, (injection, cached)) in enumerate(ARMS.items()):
            name = f"bench-prompt-cache-{index}"
            names[arm] = name
            Route.objects.filter(name=name).delete()
            written = copy.deepcopy(SUPPORT_ROUTE_CORE)
            written["name"] = name
            written["model"]["prompt_cache"] = cached
            written["context"]["injection"] = {"mode": injection}
            memories = next(s for s in DEMO_ADDED_SOURCES if s["type"] == "memory")
            written["context"]["sources"].append(copy.deepcopy(memories))
            prepared = prepare_route(written)
            create_route(spec=prepared.spec, layer=prepared.layer, recipe=prepared.recipe)
    return tenant, names


def remove(names: dict[str, str]) -> None:
    from django_tenants.utils import schema_context

    from contextplatform.replay.models import ReplayRecord
    from contextplatform.replay.writer import flush_current_tenant
    from contextplatform.routes.models import Route
    from sources.models import ChatSession

    with schema_context(DEMO_TENANT):
        flush_current_tenant()
        ReplayRecord.objects.filter(route__in=names.values()).delete()
        Route.objects.filter(name__in=names.values()).delete()
        ChatSession.objects.filter(key__startswith="s_bench_prompt_cache").delete()


def conversation(tenant: Any, route: str, session: str, turns: int, result: ArmResult) -> None:
    from contextplatform.demo.defaults import DEMO_SAMPLE_QUESTIONS
    from contextplatform.resolve.use_cases import ResolveCall, resolve_context

    questions = list(DEMO_SAMPLE_QUESTIONS)
    history: list[dict[str, Any]] = []
    previous: tuple[str, list[int]] | None = None
    for turn in range(turns):
        history.append({"role": "user", "content": questions[turn % len(questions)]})
        body = {
            "model": "claude-sonnet-4",
            "max_tokens": 512,
            "system": SYSTEM_PROMPT,
            "tools": CALLER_TOOLS,
            "messages": history,
        }
        resolution = resolve_context(
            ResolveCall(
                tenant=tenant,
                route=route,
                request_body=copy.deepcopy(body),
                user=USER,
                session=session,
                store_memory=False,
            )
        )
        current = serialised(resolution.rewritten)
        if previous is not None:
            same = common_prefix_length(previous[0], current[0])
            cached = max((end for end in previous[1] if end <= same), default=0)
            result.unchanged.append(same / len(current[0]))
            result.read_from_cache.append(cached / len(current[0]))
        result.request_chars.append(len(current[0]))
        previous = current
        history.append({"role": "assistant", "content": ANSWER})


def run_prompt_cache(quick: bool) -> PromptCacheResults:
    from django_tenants.utils import schema_context

    started = time.perf_counter()
    turns = QUICK_TURNS if quick else FULL_TURNS
    sessions = QUICK_SESSIONS if quick else FULL_SESSIONS
    results = PromptCacheResults(date=utc_now(), quick=quick, turns=turns, sessions=sessions)
    tenant, names = prepare()
    try:
        with schema_context(DEMO_TENANT):
            for session in range(sessions):
                for arm, route in names.items():
                    log(f"prompt_cache: session {session + 1}/{sessions}, {arm} …")
                    key = f"s_bench_prompt_cache-{session}-{route}"
                    results.arms.setdefault(arm, ArmResult())
                    conversation(tenant, route, key, turns, results.arms[arm])
    finally:
        remove(names)
    results.load_average = load_average()
    results.runtime_s = time.perf_counter() - started
    return results


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def checks(results: PromptCacheResults) -> list[Check]:
    made = []
    for arm in ("tool_role, prompt_cache on",):
        read = mean(results.arms[arm].read_from_cache)
        made.append(
            Check(
                f"share of a later turn read from the cache ({arm})",
                f">= {TARGET_READ_SHARE:.0%}",
                f"{read:.1%}",
                read >= TARGET_READ_SHARE,
            )
        )
    off = mean(results.arms["tool_role, prompt_cache off"].read_from_cache)
    made.append(
        Check(
            "without marks Anthropic reads nothing from its cache",
            "0%",
            f"{off:.1%}",
            off == 0.0,
        )
    )
    return made


def rows(results: PromptCacheResults) -> list[list[str]]:
    made = []
    for arm, result in results.arms.items():
        made.append(
            [
                arm,
                str(len(result.unchanged)),
                f"{mean(result.unchanged):.1%}",
                f"{min(result.unchanged, default=float('nan')):.1%}",
                f"{mean(result.read_from_cache):.1%}",
                f"{statistics.median(result.request_chars):,.0f}",
            ]
        )
    return made


def section(results: PromptCacheResults, commit: str) -> str:
    return "\n\n".join(
        [
            START,
            "## 16. Provider prompt caching: the prefix kept from turn to turn",
            f"Measured {results.date} (commit {commit}) in {results.runtime_s:.0f} s by "
            "`scripts/bench_prompt_cache.py`; `BENCH_ONLY=prompt_cache make bench` refreshes this "
            f"section alone. Load average at the end: {results.load_average}."
            f"{quick_note(results.quick)}",
            table(["check", "target", "measured", "result"], check_rows(checks(results))),
            "A conversation as an agent sends it (an Anthropic Messages body: a system prompt of "
            "~1,000 tokens, two tools of the caller's, the whole conversation so far; each turn "
            f"adds an answer and the next sample question), {results.turns} turns, "
            f"{results.sessions} session(s) per arm, each turn resolved on a copy of the demo's "
            "`support` route (guardrails, profile, history, documents, memories). *Prefix "
            "unchanged*: the share of a turn's rewritten request, serialised in the provider's "
            "prefix order (tools, system, messages) without the marks, that the previous turn's "
            "begins with — what a prefix cache (OpenAI's, which needs no marks) can serve at "
            "best. *Read from the cache*: the share up to the previous turn's last cache mark "
            "within that unchanged prefix — what Anthropic serves from its cache, which needs "
            "the marks.",
            table(
                [
                    "arm",
                    "turns compared",
                    "prefix unchanged (mean)",
                    "min",
                    "read from the cache (mean)",
                    "request chars (median)",
                ],
                rows(results),
            ),
            "Context injected as tool exchanges goes after the last user message: everything "
            "before it (the caller's tools, the system prompt, the conversation so far) is the "
            "previous turn's request, so the unchanged share grows with the conversation. In the "
            "system prompt, the context changes the system part every turn, and with it "
            "everything after: only the tools and the caller's own system text stay.",
            END,
        ]
    )


def write_prompt_cache(results: PromptCacheResults, docs_dir: Path, commit: str) -> list[Path]:
    return [write_section(docs_dir, section(results, commit), START, END)]


def print_prompt_cache(results: PromptCacheResults) -> None:
    print()
    print("Provider prompt caching (demo route copies, in process)")
    for row in rows(results):
        print(f"  {row[0]:<34} unchanged {row[2]:>6}  read from cache {row[4]:>6}")
    print_checks(checks(results))
