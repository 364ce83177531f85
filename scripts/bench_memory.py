"""``make bench`` section 6: memory. Three measurements (results in docs/benchmarks.md, section 6):

1. Write to searchable, end to end over HTTP: a real uvicorn server and a real Celery worker
   (solo pool, Redis broker, a queue of this run's own). Each turn is resolved on a route whose
   ``memory`` source has ``store.auto: true``, its answer handed back through
   ``POST /api/v1/resolve/{id}/response``, and ``POST /api/v1/users/{user}/memories/search`` is
   polled until the new memory comes back. Latency = hand-back sent -> first search that returns it.
2. Search at scale: ``memory.selectors.search_memories`` over 1,000,000 memories of 10,000 users
   (``scripts/bench_memory_scale.py``), with recall@5 against an exact numpy scan.
3. Quality: long synthetic conversations with planted facts (``scripts/bench_memory_data.py``),
   written through the real write path in process (``queue_turn`` + ``write_turn``, local
   extractor), then one question per fact through the ``memory`` source's recall: on the
   source's defaults (no match block: the embedder's ``min_similarity`` and ``top_k``), the same
   with ``hybrid_search``, and written blocks of ``min_similarity`` 0.7 (the default before issue
   13, the same-run baseline) and 0.3: recall@5 of the planted fact, and the tokens injected next
   to the tokens of the whole conversation.
4. Extraction: the same conversations' user turns through the local extractor alone, in process
   (``scripts/bench_memory_extraction.py``): planted facts stored (target ≥ 95 %) and small-talk
   turns stored (target none), beside the rules before issue 13 (a frozen copy) and a memory per
   user sentence, in the same run.

Each part runs in a tenant of its own (``bench_memory_flow`` for 1 and 3, ``bench_memory`` for 2).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from scripts import bench_memory_data as data
from scripts.bench_env import load_average, utc_now
from scripts.bench_http import running_server
from scripts.bench_memory_extraction import (
    ExtractionResult,
    run_extraction,
    run_questions,
    run_superseding,
)
from scripts.bench_memory_scale import ScaleResult, run_scale
from scripts.bench_setup import ROOT, ensure_tenant, log

FLOW_TENANT = "bench_memory_flow"
SCALE_TENANT = "bench_memory"
ROUTE = "memory-bench"
DEFAULT_REDIS = "redis://127.0.0.1:6379/7"
LOG_DIR = ROOT / "var" / "bench"
K = 5
# The configurations each question is asked with: the source's defaults (no match block: the
# store's, else the embedder's min_similarity and top_k), the same with hybrid_search, and
# written blocks of top_k 5 at 0.7 (the default before issue 13, the seed's generic value: the
# same-run baseline) and at 0.3.
DEFAULTS = "defaults"
HYBRID = "hybrid"
BASELINE_MIN_SIMILARITY = 0.7
LOWER_MIN_SIMILARITY = 0.3
Config = str | float
CONFIGS: tuple[Config, ...] = (DEFAULTS, HYBRID, BASELINE_MIN_SIMILARITY, LOWER_MIN_SIMILARITY)
SWEEP = tuple(round(0.05 * step, 2) for step in range(0, 19))  # 0.0 .. 0.9
STYLES = ("paraphrased", "direct")  # the two questions asked about every planted fact
QUALITY_SEED = 20_261_206
POLL_INTERVAL_S = 0.02
VISIBLE_TIMEOUT_S = 30.0
WORKER_STOP_S = 20.0

# Write to searchable: "My favourite <thing> is <value>." Values are unique across the turns.
THINGS: dict[str, tuple[str, ...]] = {
    "colour": ("teal", "vermilion", "ochre", "periwinkle", "chartreuse"),
    "fruit": ("lychee", "quince", "persimmon", "gooseberry", "rambutan"),
    "city": ("Valparaiso", "Trondheim", "Plovdiv", "Cusco", "Gdansk"),
    "film": ("Paterson", "Amelie", "Ikiru", "Stalker", "Moonlight"),
    "board game": ("Carcassonne", "Azul", "Hanabi", "Wingspan", "Dixit"),
    "tree": ("ginkgo", "hornbeam", "larch", "baobab", "sycamore"),
    "cheese": ("taleggio", "manchego", "halloumi", "gruyere", "stilton"),
    "bird": ("kingfisher", "hoopoe", "puffin", "wren", "kestrel"),
    "flower": ("peony", "freesia", "anemone", "foxglove", "hellebore"),
    "dessert": ("tiramisu", "baklava", "pavlova", "churros", "mochi"),
}


@dataclass(frozen=True)
class MemorySizes:
    write_users: int = 5  # x len(THINGS) turns
    write_warmup: int = 3
    conversations: int = 24
    turns: int = 40
    facts: int = 5


FULL_SIZES = MemorySizes()
QUICK_SIZES = MemorySizes(write_users=1, conversations=6)


# Results -----------------------------------------------------------------------------------------


@dataclass
class WriteSample:
    user: str
    thing: str
    value: str
    ack_ms: float  # the hand-back's HTTP response (202)
    visible_ms: float | None  # hand-back sent -> the first search returning the memory
    written_ms: float | None = None  # hand-back sent -> the worker's MemoryTurn.written_at
    polls: int = 0
    status: str = ""  # MemoryTurn status
    sent_at: float = 0.0  # wall clock (time.time()) when the hand-back was sent


@dataclass
class WriteResult:
    samples: list[WriteSample]
    warmup: int
    redis: str
    queue: str
    resolve_ms: list[float]
    search_ms: list[float]  # every poll's response time
    worker_alive: bool
    note: str = ""  # why the part did not run, when it did not

    def visible(self) -> list[float]:
        return [s.visible_ms for s in self.samples if s.visible_ms is not None]

    def written(self) -> list[float]:
        return [s.written_ms for s in self.samples if s.written_ms is not None]


@dataclass
class Question:
    conversation: str
    key: str  # the fact template's key
    value: str
    style: str  # "paraphrased" (other words than the statement) or "direct" (its own words)
    question: str
    stored: bool  # the extractor wrote a memory holding the value
    rank: int | None  # 1-based rank of the fact's memory in the top 5 (no threshold)
    cosine: float | None  # the fact's memory's cosine to the question (None: not stored)
    recalled: dict[Config, bool]  # configuration (CONFIGS) -> in the source's recall
    injected: dict[Config, bool]  # configuration -> kept by the reflection gate and injected
    injected_tokens: dict[Config, int]  # configuration -> tokens of the injected memories
    injected_count: dict[Config, int]
    history_tokens: int  # the whole conversation (every user and assistant message)
    memories: int  # the user's memories at question time
    defaults: dict[str, Any] = field(default_factory=dict)  # what the defaults came to


@dataclass
class QualityResult:
    conversations: int
    turns: int
    facts: int
    questions: list[Question]
    write_ms: list[float]  # write_turn, one call per turn
    memories_written: int
    turn_status: dict[str, int]
    extracted_keys: dict[str, tuple[int, int]]  # template key -> (stored, planted)
    runtime_s: float = 0.0
    # What the source's defaults came to in this run (its notes: min_similarity, top_k, where
    # each came from, the embedder)
    defaults: dict[str, Any] = field(default_factory=dict)

    def asked(self, style: str, *, stored_only: bool = False) -> list[Question]:
        return [q for q in self.questions if q.style == style and (q.stored or not stored_only)]

    def recall(self, config: Config, style: str, *, stored_only: bool = False) -> float:
        hits = [q.recalled[config] for q in self.asked(style, stored_only=stored_only)]
        return float(np.mean(hits)) if hits else float("nan")

    @property
    def default_threshold(self) -> float:
        return float(self.defaults.get("min_similarity", float("nan")))

    def label(self, config: Config, *, short: bool = False) -> str:
        """How the report names a configuration."""
        if config in (DEFAULTS, HYBRID):
            applied = (
                f"top_k {self.defaults.get('top_k')}, min_similarity {self.default_threshold:g}"
            )
            name = "defaults" if config == DEFAULTS else "defaults + hybrid_search"
            return name if short else f"{name} ({applied}, from the {self.defaults_from})"
        name = f"min_similarity {config:g}"
        if config == BASELINE_MIN_SIMILARITY and not short:
            return f"{name} (the default before issue 13)"
        return name

    @property
    def defaults_from(self) -> str:
        origins = {self.defaults.get("min_similarity_from"), self.defaults.get("top_k_from")}
        return " and ".join(sorted(str(origin) for origin in origins if origin))

    def sweep(self, style: str, *, stored_only: bool = False) -> list[tuple[float, float]]:
        """(threshold, recall@5) for every threshold of SWEEP, from the unthresholded top 5: the
        source's recall at threshold t is the top 5 by cosine, cut at t."""
        questions = self.asked(style, stored_only=stored_only)
        return [
            (
                threshold,
                float(
                    np.mean(
                        [q.rank is not None and (q.cosine or 0.0) >= threshold for q in questions]
                    )
                )
                if questions
                else float("nan"),
            )
            for threshold in SWEEP
        ]


@dataclass
class MemoryResults:
    date: str
    quick: bool
    write: WriteResult
    scale: ScaleResult
    quality: QualityResult
    load_average: str = ""
    runtime_s: float = 0.0
    extraction: ExtractionResult | None = None


# Set-up ------------------------------------------------------------------------------------------


def route_spec() -> dict[str, Any]:
    return {
        "name": ROUTE,
        "description": "make bench: memory (store.auto)",
        "context": {
            "sources": [{"type": "memory", "name": "memories", "store": {"auto": True}}],
            "injection": {"mode": "tool_role"},
        },
    }


def prepare_flow_tenant() -> None:
    """The flow tenant with the bench route, and none of an earlier run's memories or turns."""
    from django_tenants.utils import schema_context

    from contextplatform.replay.models import ReplayRecord
    from contextplatform.routes.configuration.schema import validate_route_spec
    from contextplatform.routes.services import upsert_route
    from memory.models import Memory, MemoryTurn

    ensure_tenant(FLOW_TENANT)
    with schema_context(FLOW_TENANT):
        upsert_route(spec=validate_route_spec(route_spec()))
        Memory.objects.all().delete()
        MemoryTurn.objects.all().delete()
        ReplayRecord.objects.all().delete()


# 1. Write to searchable --------------------------------------------------------------------------


def redis_url() -> str:
    return os.environ.get("BENCH_REDIS_URL") or os.environ.get("REDIS_URL") or DEFAULT_REDIS


def redis_answers(url: str) -> str | None:
    """None when Redis answers, else why not."""
    import redis

    try:
        redis.Redis.from_url(url, socket_timeout=2).ping()
    except redis.RedisError as error:
        return f"{type(error).__name__}: {error}"
    return None


def forget_queue(url: str, queue: str) -> None:
    """Remove what this run's queue left in Redis (kombu's bindings; the queue itself is empty).
    Task results expire by themselves (Celery's default: one day)."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=2)
    client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")


def start_worker(env: dict[str, str], queue: str) -> subprocess.Popen[bytes]:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    from contextplatform.celery import solo_worker_command

    args = solo_worker_command("--hostname", f"{queue}@%h")
    with (LOG_DIR / "celery-memory.log").open("wb") as output:
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        worker.terminate()  # SIGTERM: Celery's warm shutdown
    try:
        worker.wait(timeout=WORKER_STOP_S)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def write_turns(users: int) -> list[tuple[str, str, str]]:
    """(user, thing, value): every user states one value of every thing, no value twice."""
    return [
        (f"w{user}", thing, values[user % len(values)])
        for user in range(users)
        for thing, values in THINGS.items()
    ]


def contains(hits: list[dict[str, Any]], value: str) -> bool:
    return any(value.lower() in hit["content"].lower() for hit in hits)


class WriteRunner:
    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.resolve_ms: list[float] = []
        self.search_ms: list[float] = []

    def resolve(self, user: str, text: str) -> str:
        started = time.perf_counter()
        response = self.client.post(
            "/api/v1/resolve",
            json={
                "route": ROUTE,
                "user": user,
                "request": {"messages": [{"role": "user", "content": text}]},
            },
        )
        self.resolve_ms.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
        return str(response.json()["id"])

    def search(self, user: str, query: str) -> list[dict[str, Any]]:
        started = time.perf_counter()
        response = self.client.post(
            f"/api/v1/users/{user}/memories/search", json={"query": query, "limit": K}
        )
        self.search_ms.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
        return list(response.json()["data"])

    def turn(self, user: str, thing: str, value: str, timeout_s: float) -> tuple[str, WriteSample]:
        resolve_id = self.resolve(user, f"My favourite {thing} is {value}.")
        question = f"What is my favourite {thing}?"
        wall = time.time()
        started = time.perf_counter()
        response = self.client.post(
            f"/api/v1/resolve/{resolve_id}/response",
            json={
                "response": {"choices": [{"message": {"role": "assistant", "content": "Noted!"}}]}
            },
        )
        ack_ms = (time.perf_counter() - started) * 1000
        if response.status_code != 202 or response.json().get("memory_write") != "queued":
            raise RuntimeError(f"hand-back not queued: {response.status_code} {response.text}")
        polls, visible_ms = 0, None
        while time.perf_counter() - started < timeout_s:
            polls += 1
            if contains(self.search(user, question), value):
                visible_ms = (time.perf_counter() - started) * 1000
                break
            time.sleep(POLL_INTERVAL_S)
        return resolve_id, WriteSample(
            user, thing, value, ack_ms, visible_ms, polls=polls, sent_at=wall
        )


def attach_written(samples: list[tuple[str, WriteSample]]) -> None:
    """The worker's own timestamp of each write (``MemoryTurn.written_at``), as ms after the
    hand-back was sent (both clocks are this machine's wall clock)."""
    from django_tenants.utils import schema_context

    from memory.models import MemoryTurn

    with schema_context(FLOW_TENANT):
        turns = {
            turn.resolve_id: turn
            for turn in MemoryTurn.objects.filter(resolve_id__in=[rid for rid, _ in samples])
        }
    for resolve_id, sample in samples:
        turn = turns.get(resolve_id)
        sample.status = turn.status if turn else "missing"
        if turn and turn.written_at:
            sample.written_ms = (turn.written_at.timestamp() - sample.sent_at) * 1000


def run_write(sizes: MemorySizes) -> WriteResult:
    from tenants.models import Tenant
    from tenants.services import issue_api_key, revoke_api_key

    url = redis_url()
    queue = f"membench-{uuid.uuid4().hex[:8]}"
    problem = redis_answers(url)
    if problem:
        log(f"write to searchable: SKIPPED, no Redis at {url} ({problem})")
        return WriteResult([], 0, url, queue, [], [], False, note=f"no Redis at {url}: {problem}")
    env = {
        **os.environ,
        "REDIS_URL": url,
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "DB_POOL_MAX_SIZE": os.environ.get("DB_POOL_MAX_SIZE", "4"),
    }
    issued = issue_api_key(tenant=Tenant.objects.get(schema_name=FLOW_TENANT), name="make bench")
    headers = {"Authorization": f"Bearer {issued.plain_key}"}
    turns = write_turns(sizes.write_users)
    warm = [(f"warm{i}", "song", f"warmup tune {i}") for i in range(sizes.write_warmup)]
    log(f"write to searchable: uvicorn + Celery worker (solo, Redis {url}, queue {queue}) …")
    worker = start_worker({**env, "DB_POOL_MAX_SIZE": "0"}, queue)
    try:
        with (
            running_server(1, env, "uvicorn-memory.log") as server,
            httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as client,
        ):
            runner = WriteRunner(client)
            for user, thing, value in warm:  # the worker loads Django and the embedder here
                _, sample = runner.turn(user, thing, value, timeout_s=120.0)
                if sample.visible_ms is None:
                    raise RuntimeError(
                        "a warm-up write never became searchable; see "
                        f"{LOG_DIR / 'celery-memory.log'} and {server.log_path}"
                    )
            runner.resolve_ms.clear()
            runner.search_ms.clear()
            log(f"write to searchable: {len(turns)} turns, one at a time …")
            measured = []
            for user, thing, value in turns:
                if worker.poll() is not None:
                    raise RuntimeError(f"the Celery worker exited ({worker.returncode})")
                measured.append(runner.turn(user, thing, value, VISIBLE_TIMEOUT_S))
        alive = worker.poll() is None
    finally:
        stop_worker(worker)
        revoke_api_key(api_key=issued.api_key)
        forget_queue(url, queue)
    attach_written(measured)
    return WriteResult(
        samples=[sample for _, sample in measured],
        warmup=len(warm),
        redis=url,
        queue=queue,
        resolve_ms=runner.resolve_ms,
        search_ms=runner.search_ms,
        worker_alive=alive,
    )


# 3. Quality --------------------------------------------------------------------------------------


def memory_source(config: Config) -> Any:
    from memory.source import MemorySettings, MemorySource
    from sources.matching import MatchConfig, RecallConfig

    if isinstance(config, str):  # no match block: the source's own defaults
        settings = MemorySettings(type="memory", name="memories", hybrid_search=config == HYBRID)
    else:
        match = MatchConfig(recall=RecallConfig(top_k=K, min_similarity=config))
        settings = MemorySettings(type="memory", name="memories", match=match)
    return MemorySource(settings)


def fetch_memories(
    source: Any, tenant: str, route: str, user: str, question: str, *, dry_run: bool = False
) -> Any:
    """A memory source's fetch for one question of ``user``, as the resolver runs it (also
    ``scripts/measure_memory_defaults.py``'s)."""
    from asgiref.sync import async_to_sync

    from sources.base import ContextRequest

    request = ContextRequest(
        request_id=uuid.uuid4().hex,
        tenant=tenant,
        route=route,
        user=user,
        session=None,
        query=question,
        dry_run=dry_run,
    )
    return async_to_sync(source.fetch)(request)


def through_source(user: str, question: str, config: Config) -> tuple[set[int], list[Any], Any]:
    """The memory source's fetch, as the resolver runs it: (recalled ids, injected items, notes)."""
    result = fetch_memories(memory_source(config), FLOW_TENANT, ROUTE, user, question)
    recalled = {int(entry["memory_id"]) for entry in result.trace}
    return recalled, result.items, result.notes


def write_conversation(
    conversation: data.Conversation, embedder: Any
) -> tuple[list[float], dict[str, str]]:
    """Every turn through queue_turn + write_turn (local extractor), as the task runs it."""
    from memory.models import MemoryTurn
    from memory.writing import queue_turn, write_turn

    timings, statuses = [], {}
    for index, (user_text, assistant_text) in enumerate(conversation.turns):
        resolve_id = turn_id(conversation.user, index)
        queue_turn(
            resolve_id=resolve_id,
            route=ROUTE,
            user=conversation.user,
            user_text=user_text,
            extractor="local",
        )
        MemoryTurn.objects.filter(resolve_id=resolve_id).update(assistant_text=assistant_text)
        started = time.perf_counter()
        turn = write_turn(resolve_id, embedder)
        timings.append((time.perf_counter() - started) * 1000)
        statuses[resolve_id] = turn.status
    return timings, statuses


def turn_id(user: str, turn: int) -> str:
    """A conversation turn's resolve id, which the memories it writes keep as their source."""
    return f"{user}-t{turn:02d}"


def fact_memories(conversation: data.Conversation, fact: data.PlantedFact) -> set[int]:
    """The memories the fact's turn wrote that still hold its value."""
    from memory.models import Memory

    resolve_id = turn_id(conversation.user, fact.turn)
    return {
        memory.pk
        for memory in Memory.objects.filter(user_id=conversation.user, source_request_id=resolve_id)
        if fact.value.lower() in memory.content.lower()
    }


def ask(
    conversation: data.Conversation, fact: data.PlantedFact, style: str, embedder: Any
) -> Question:
    from contextplatform.core.estimation import default_estimator
    from memory.models import Memory
    from memory.selectors import cosine, search_memories

    estimator = default_estimator()
    text = fact.template.question if style == "paraphrased" else fact.template.direct
    targets = fact_memories(conversation, fact)
    vector = embedder.embed_query(text)
    hits = search_memories(
        user_id=conversation.user, query=text, vector=vector, limit=K, min_similarity=-1
    )
    rank = next((i + 1 for i, hit in enumerate(hits) if hit.id in targets), None)
    stored = Memory.objects.filter(user_id=conversation.user, pk__in=targets)
    cosines = [cosine(memory.embedding, vector) for memory in stored]
    question = Question(
        conversation=conversation.user,
        key=fact.template.key,
        value=fact.value,
        style=style,
        question=text,
        stored=bool(targets),
        rank=rank,
        cosine=max(cosines) if cosines else None,
        recalled={},
        injected={},
        injected_tokens={},
        injected_count={},
        history_tokens=sum(estimator.count(part) for pair in conversation.turns for part in pair),
        memories=Memory.objects.filter(user_id=conversation.user).count(),
    )
    for config in CONFIGS:
        recalled, items, notes = through_source(conversation.user, text, config)
        injected = {int(item.metadata["memory_id"]) for item in items}
        question.recalled[config] = bool(recalled & targets)
        question.injected[config] = bool(injected & targets)
        question.injected_tokens[config] = sum(estimator.count(item.content) for item in items)
        question.injected_count[config] = len(items)
        if config == DEFAULTS:
            question.defaults = {
                key: value
                for key, value in notes.items()
                if key.startswith(("min_similarity", "top_k", "embedder"))
            }
    return question


def run_quality(sizes: MemorySizes) -> QualityResult:
    from django_tenants.utils import schema_context

    from memory.models import Memory
    from sources.embedding import get_embedder

    started = time.perf_counter()
    embedder = get_embedder()
    embedder.embed_query("warm-up: load the model before the clock starts")
    conversations = data.conversations(sizes.conversations, sizes.turns, sizes.facts, QUALITY_SEED)
    log(
        f"memory quality: writing {len(conversations)} conversations of {sizes.turns} turns "
        "(queue_turn + write_turn, local extractor) …"
    )
    write_ms: list[float] = []
    statuses: dict[str, str] = {}
    questions: list[Question] = []
    with schema_context(FLOW_TENANT):
        for conversation in conversations:
            timings, turn_status = write_conversation(conversation, embedder)
            write_ms += timings
            statuses.update(turn_status)
        planted = sum(len(c.facts) for c in conversations)
        log(f"memory quality: {planted} planted facts, {len(STYLES)} questions each …")
        for conversation in conversations:
            questions += [
                ask(conversation, fact, style, embedder)
                for fact in conversation.facts
                for style in STYLES
            ]
        written = Memory.objects.filter(user_id__startswith="conv").count()
    extracted: dict[str, tuple[int, int]] = {}
    for question in questions:
        if question.style == STYLES[0]:
            stored, planted = extracted.get(question.key, (0, 0))
            extracted[question.key] = (stored + question.stored, planted + 1)
    return QualityResult(
        conversations=len(conversations),
        turns=sizes.turns,
        facts=sizes.facts,
        questions=questions,
        write_ms=write_ms,
        memories_written=written,
        turn_status=dict(Counter(statuses.values())),
        extracted_keys=extracted,
        runtime_s=time.perf_counter() - started,
        defaults=questions[0].defaults if questions else {},
    )


# The section -------------------------------------------------------------------------------------


def run_memory(quick: bool) -> MemoryResults:
    started = time.perf_counter()
    sizes = QUICK_SIZES if quick else FULL_SIZES
    prepare_flow_tenant()
    write = run_write(sizes)
    quality = run_quality(sizes)
    extraction = run_extraction(
        data.conversations(sizes.conversations, sizes.turns, sizes.facts, QUALITY_SEED)
    )
    extraction.questions = run_questions()
    extraction.superseding = run_superseding()
    scale_tenant = f"{SCALE_TENANT}_quick" if quick else SCALE_TENANT
    ensure_tenant(scale_tenant)
    scale = run_scale(scale_tenant, quick)
    results = MemoryResults(
        date=utc_now(),
        quick=quick,
        write=write,
        scale=scale,
        quality=quality,
        load_average=load_average(),
        extraction=extraction,
    )
    results.runtime_s = time.perf_counter() - started
    return results
