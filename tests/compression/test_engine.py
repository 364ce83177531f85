"""The compression engine on whole requests of both providers: examples and properties.

The requests, hand-built and generated, come from ``tests/compression/strategies.py``."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from compression import text as textops
from compression.config import CompressConfig
from compression.engine import (
    JUDGE_VIEW_TOKENS,
    RETRIEVE_TOOL_NAME,
    CompressionFailed,
    CompressionResult,
    ContextLengthExceeded,
    Provenance,
    block_bm25,
    compress_request,
    judge_deployment,
    recovery_key,
    uses_judge,
)
from compression.rewrite import read_at
from compression.segments import parse_segments
from compression.text import OMISSION_MARKER
from contextplatform.core.estimation import HeuristicEstimator, count_json
from contextplatform.resolve.compression_stage import JUDGE_READS_CHARACTERS
from tests.compression.conversations import (
    FILE_ARGUMENTS,
    REFUND_ANSWER,
    REFUND_LINE,
    REFUND_QUESTION,
    file_read,
    service_log,
)
from tests.compression.strategies import (
    ANTHROPIC_IMAGE,
    BUDGET_SHARE,
    IMAGE_URL,
    NEEDLE,
    anthropic_tool_request,
    compress_config,
    conversation,
    injected,
    log,
    long_question,
    openai_tool_request,
    render_anthropic,
    render_openai,
    three_outputs,
)

ESTIMATOR = HeuristicEstimator()
BIG = 1_000_000


class MemoryRecovery:
    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[list[tuple[str, str]]] = []
        self.fail = fail

    def store(self, originals: Sequence[tuple[str, str]]) -> None:
        if self.fail is not None:
            raise self.fail
        self.calls.append(list(originals))


def cfg(**data: Any) -> CompressConfig:
    return CompressConfig.model_validate(data)


def compress(body: dict[str, Any], chat_format: str = "openai", **kwargs: Any) -> CompressionResult:
    config = kwargs.pop("config", None) or CompressConfig()
    kwargs.setdefault("max_input_tokens", BIG)
    kwargs.setdefault("estimator", ESTIMATOR)
    return compress_request(body, chat_format, config, **kwargs)  # type: ignore[arg-type]


# --- tool outputs --------------------------------------------------------------------------------


def test_openai_tool_output_is_compressed_and_keeps_what_its_call_asks_for() -> None:
    body = openai_tool_request(log(600, needle_at=311))
    original = copy.deepcopy(body)
    result = compress(body)
    assert result.applied and result.skip_reason is None
    assert result.quality == "budget_met" and result.trigger == "item_threshold"
    assert result.tokens_after < result.tokens_before
    assert result.tokens_after == count_json(result.body, ESTIMATOR)
    compressed = result.body["messages"][3]["content"]
    assert NEEDLE in compressed and OMISSION_MARKER in compressed
    [report] = result.blocks
    assert (report.message_index, report.block_index, report.kind) == (3, 0, "tool_output")
    assert report.mode == "extractive" and report.target_tokens == 1000
    assert report.final_tokens <= 1000 < report.original_tokens
    assert result.omitted_chunks == report.omitted_chunks > 0
    assert body == original  # the input is never touched
    assert result.body["messages"][:3] == original["messages"][:3]
    assert result.body["tools"] == original["tools"]


def test_the_query_of_a_tool_output_is_its_call_and_the_latest_user_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []
    real = textops.compress_extractive

    def spy(text: str, query: str, target: int, estimator: Any) -> Any:
        seen.append(query)
        return real(text, query, target, estimator)

    monkeypatch.setattr(textops, "compress_extractive", spy)
    compress(openai_tool_request(log(600), arguments='{"order": 4242}'))
    compress(anthropic_tool_request(log(600)), "anthropic")
    question = "What is the vault code for order 4242?"
    assert seen == [
        f'read_vault_log {{"order": 4242}} {question}',
        f'read_vault_log {{"order":4242}} {question}',
    ]


# --- issue 13: the one line about the user's question, at a small target ------------------------


def small_target(target: int = 60) -> CompressConfig:
    return cfg(
        targets={"tool_outputs": {"mode": "extractive", "min_tokens": 100, "target_tokens": target}}
    )


def anthropic_file_read(tool_output: str) -> dict[str, Any]:
    return {
        "model": "claude",
        "max_tokens": 256,
        "messages": [
            {"role": "user", "content": REFUND_QUESTION},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_read",
                        "name": "read_file",
                        "input": json.loads(FILE_ARGUMENTS),
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_read", "content": tool_output}
                ],
            },
        ],
    }


def tool_text(result: CompressionResult, chat_format: str) -> str:
    if chat_format == "openai":
        return str(result.body["messages"][3]["content"])
    return str(result.body["messages"][2]["content"][0]["content"])


@pytest.mark.parametrize("chat_format", ["openai", "anthropic"])
@pytest.mark.parametrize("shape", ["text", "json"])
def test_a_240_line_tool_output_keeps_the_line_about_the_question_at_60_tokens(
    chat_format: str, shape: str
) -> None:
    # The call names only a file: before the user's question joined its query, every chunk
    # scored 0, the boundaries alone were kept and the block's score was 0.0.
    log = service_log()
    output = log if shape == "text" else json.dumps({"path": "/srv/app/current.txt", "text": log})
    body = file_read(output) if chat_format == "openai" else anthropic_file_read(output)
    result = compress(body, chat_format, config=small_target())
    assert result.applied and result.quality == "budget_met"
    [report] = result.blocks
    assert report.kind == "tool_output" and report.format == shape
    assert report.final_tokens <= 60 and report.original_tokens > 40 * 60
    assert report.score is not None and report.score > 0
    compressed = tool_text(result, chat_format)
    text = compressed if shape == "text" else json.loads(compressed)["text"]
    assert REFUND_LINE in text.split("\n")


def test_at_100x_the_answering_line_is_kept() -> None:
    log = service_log()
    target = ESTIMATOR.count(log) // 100
    result = compress(file_read(log), config=small_target(target))
    assert result.applied and result.blocks[0].final_tokens <= target
    assert REFUND_LINE in result.body["messages"][3]["content"].split("\n")


def test_a_block_scores_by_the_question_where_its_call_shares_no_term() -> None:
    with_needle, without = file_read(service_log()), file_read(service_log(needle_at=None))
    score = compress(with_needle, config=small_target()).blocks[0].score
    assert score is not None and score > 0
    # The other refunds in the log share the question's terms too, fewer of them.
    baseline = compress(without, config=small_target()).blocks[0].score
    assert baseline is not None and 0 < baseline < score


def test_the_judge_reads_the_chunks_that_match_not_the_beginning() -> None:
    body = file_read(service_log())
    other = file_read(service_log(needle_at=None))["messages"][2:]
    other[0]["tool_calls"][0]["id"] = other[1]["tool_call_id"] = "call_other"
    body["messages"][2:2] = other  # two tool outputs: the judge is called
    read: list[str] = []

    def judge(query: str, texts: list[str]) -> list[float]:
        # As the compress stage's judge: it reads the beginning of each text only.
        seen = [text[:JUDGE_READS_CHARACTERS] for text in texts]
        read.extend(seen)
        return [1.0 if REFUND_ANSWER in text else 0.0 for text in seen]

    result = compress(body, config=small_target(), judge=judge)
    scores = {report.message_index: report.score for report in result.blocks}
    assert scores == {3: 0.0, 5: 1.0}
    assert len(read) == 2 and all(ESTIMATOR.count(text) <= JUDGE_VIEW_TOKENS for text in read)
    assert REFUND_LINE in result.body["messages"][5]["content"].split("\n")


def test_anthropic_tool_result_keeps_its_metadata_and_images() -> None:
    body = anthropic_tool_request(log(600, needle_at=40))
    result = compress(body, "anthropic")
    assert result.applied
    item = result.body["messages"][2]["content"][0]
    original = body["messages"][2]["content"][0]
    assert {k: v for k, v in item.items() if k != "content"} == {
        k: v for k, v in original.items() if k != "content"
    }
    assert item["content"][1] == ANTHROPIC_IMAGE
    assert item["content"][2] == {"type": "text", "text": "end of log"}
    assert NEEDLE in item["content"][0]["text"]
    assert [b.block_index for b in result.blocks] == [0]


def test_openai_array_content_keeps_images() -> None:
    body = openai_tool_request("x")
    body["messages"][3]["content"] = [
        {"type": "text", "text": log(600)},
        IMAGE_URL,
        {"type": "text", "text": "tail"},
    ]
    result = compress(body)
    parts = result.body["messages"][3]["content"]
    assert parts[1] == IMAGE_URL and parts[2] == {"type": "text", "text": "tail"}
    assert len(parts[0]["text"]) < len(body["messages"][3]["content"][0]["text"])


def test_json_tool_output_stays_json_with_the_same_structure() -> None:
    records = [
        {"id": i, "ok": i % 2 == 0, "note": log(12, f"record{i}"), "score": 1.5 * i}
        for i in range(40)
    ]
    body = openai_tool_request(json.dumps(records, indent=1))
    result = compress(body)
    assert result.applied
    [report] = result.blocks
    assert report.format == "json"
    compressed = json.loads(result.body["messages"][3]["content"])
    assert json_shape(compressed) == json_shape(records)


def test_small_tool_outputs_wait_for_min_tokens_in_auto_mode() -> None:
    body = openai_tool_request(log(60))
    result = compress(body)
    assert not result.applied and result.skip_reason == "no_targets"
    assert result.body is body
    always = compress(
        body,
        config=cfg(
            mode="always",
            targets={
                "tool_outputs": {"mode": "extractive", "min_tokens": 200, "target_tokens": 100}
            },
        ),
    )
    assert always.applied and always.trigger == "always"


def test_below_trigger_with_a_numeric_budget() -> None:
    body = openai_tool_request(log(600))
    tokens = count_json(body, ESTIMATOR)
    result = compress(body, max_input_tokens=tokens + 10, numeric_budget=True)
    assert (result.applied, result.skip_reason, result.quality) == (
        False,
        "below_trigger",
        "not_applied",
    )
    assert result.body is body
    over = compress(body, max_input_tokens=tokens - 10, numeric_budget=True)
    assert over.applied and over.trigger == "context_window"


def test_always_mode_ignores_the_numeric_trigger() -> None:
    body = openai_tool_request(log(600))
    result = compress(body, config=cfg(mode="always"), numeric_budget=True)
    assert result.applied and result.trigger == "always"


def test_min_tokens_gate_is_lifted_when_the_request_does_not_fit() -> None:
    body = openai_tool_request(log(100))  # under the default 2000 min_tokens
    tokens = count_json(body, ESTIMATOR)
    result = compress(body, max_input_tokens=tokens - 200)
    assert result.applied and "min_tokens_gate_lifted" in result.warnings
    assert result.tokens_after <= tokens - 200


# --- injected context ----------------------------------------------------------------------------


@pytest.mark.parametrize("chat_format", ["openai", "anthropic"])
def test_rag_and_memory_are_preserved_unless_enabled(chat_format: str) -> None:
    body = injected(chat_format)
    result = compress(body, chat_format)
    assert not result.applied and result.skip_reason == "no_targets"
    rag_only = cfg(targets={"rag": {"mode": "extractive"}})
    result = compress(body, chat_format, config=rag_only)
    assert result.applied
    assert [b.kind for b in result.blocks] == ["rag"]
    both = cfg(targets={"rag": {"mode": "extractive"}, "memory": {"mode": "extractive"}})
    result = compress(body, chat_format, config=both)
    assert sorted(b.kind for b in result.blocks) == ["memory", "rag"]
    assert ids_of(result.body, chat_format) == ids_of(body, chat_format)


@pytest.mark.parametrize("chat_format", ["openai", "anthropic"])
def test_system_prompt_injection_is_never_shortened(chat_format: str) -> None:
    body = injected(chat_format, "system_prompt")
    config = cfg(
        targets={
            "rag": {"mode": "extractive"},
            "memory": {"mode": "extractive"},
            "history": {"mode": "extractive"},
        }
    )
    result = compress(body, chat_format, config=config)
    assert not result.applied and result.body is body
    tokens = count_json(body, ESTIMATOR)
    with pytest.raises(ContextLengthExceeded) as raised:
        compress(body, chat_format, config=config, max_input_tokens=tokens // 2)
    assert (raised.value.tokens, raised.value.budget) == (tokens, tokens // 2)


def test_provenance_ids_make_rag_blocks() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "refunds?"},
            {"role": "tool", "tool_call_id": "rag_x", "content": log(500, "policy")},
        ]
    }
    config = cfg(targets={"rag": {"mode": "extractive"}, "tool_outputs": {"mode": "preserve"}})
    result = compress(body, config=config, provenance=Provenance(rag_call_ids=frozenset({"rag_x"})))
    assert [b.kind for b in result.blocks] == ["rag"]
    assert compress(body, config=config).skip_reason == "no_targets"


# --- ranking -------------------------------------------------------------------------------------


def test_least_relevant_blocks_come_first_and_take_the_budget() -> None:
    body = three_outputs()
    config = cfg(match={"recall": {"method": "bm25"}})
    result = compress(body, config=config, judge=lambda q, t: pytest.fail("lexical only"))
    scores = [b.score for b in result.blocks]
    assert scores == sorted(scores)  # type: ignore[type-var]
    assert all(b.target_tokens == 1000 for b in result.blocks)  # nothing needed: item targets
    tokens = count_json(body, ESTIMATOR)
    needed = 500
    tight = compress(body, config=config, max_input_tokens=tokens - needed)
    first, *rest = tight.blocks
    assert first.target_tokens == first.original_tokens - needed  # it alone covers what is needed
    assert all(b.target_tokens == 1000 for b in rest)


@pytest.mark.parametrize(
    ("match", "judged", "deployment"),
    [
        (None, True, None),
        ({}, True, None),
        ({"recall": {"method": "bm25"}}, False, None),
        ({"judge": {"deployment": "judge-llm"}}, True, "judge-llm"),
        ({"recall": {"method": "bm25"}, "judge": {}}, True, None),
    ],
)
def test_one_rule_says_whether_the_judge_ranks_blocks(
    match: dict[str, Any] | None, judged: bool, deployment: str | None
) -> None:
    config = cfg() if match is None else cfg(match=match)
    assert uses_judge(config) is judged and judge_deployment(config) == deployment
    calls: list[str] = []
    compress(three_outputs(), config=config, judge=lambda q, t: calls.append(q) or [0.5] * len(t))
    assert bool(calls) is judged


def test_one_judge_call_ranks_the_best_by_bm25_and_the_unread_come_last() -> None:
    body = three_outputs()
    calls: list[tuple[str, list[str]]] = []

    def judge(query: str, texts: list[str]) -> list[float]:
        calls.append((query, texts))
        return [0.9, 0.1][: len(texts)]

    config = cfg(match={"judge": {"max_candidates": 2}})
    result = compress(body, config=config, judge=judge)
    assert len(calls) == 1
    query, texts = calls[0]
    assert query == "What is the vault code for the order?"
    assert len(texts) == 2 and texts[0].startswith("vault code order entry")  # best BM25 first
    order = [b.message_index for b in result.blocks]
    index_of = {"rain": 2, "vault": 4, "lunch": 6}
    judged_low = index_of[texts[1].split()[0]]
    unread = ({2, 6} - {judged_low}).pop()
    assert order == [judged_low, 4, unread]  # judged 0.1, judged 0.9, then the one not read
    assert [b.score for b in result.blocks[:2]] == [0.1, 0.9]


def test_a_failing_judge_falls_back_to_lexical_order() -> None:
    def judge(query: str, texts: list[str]) -> list[float]:
        raise TimeoutError

    result = compress(three_outputs(), judge=judge)
    assert result.applied and result.warnings == ["judge_failed:TimeoutError"]
    scores = [b.score for b in result.blocks]
    assert scores == sorted(scores)  # type: ignore[type-var]


# --- recoverable ---------------------------------------------------------------------------------

RECOVERABLE = {
    "targets": {"tool_outputs": {"mode": "recoverable", "min_tokens": 2000, "target_tokens": 1000}}
}


@pytest.mark.parametrize("chat_format", ["openai", "anthropic"])
def test_recoverable_adds_the_retrieve_tool_with_the_issued_keys(chat_format: str) -> None:
    output = log(600, needle_at=99)
    body = (
        openai_tool_request(output) if chat_format == "openai" else anthropic_tool_request(output)
    )
    recovery = MemoryRecovery()
    result = compress(
        body, chat_format, config=cfg(**RECOVERABLE), recovery=recovery, recovery_scope="scope-1"
    )
    key = hashlib.sha256(f"scope-1\x00{output}".encode()).hexdigest()[:24]
    assert result.recovery_keys == [key] == [recovery_key("scope-1", output)]
    assert recovery.calls == [[(key, output)]]
    tool = result.body["tools"][-1]
    assert result.body["tools"][:-1] == body["tools"]
    if chat_format == "openai":
        assert tool["type"] == "function" and tool["function"]["name"] == RETRIEVE_TOOL_NAME
        schema = tool["function"]["parameters"]
        text = result.body["messages"][3]["content"]
    else:
        assert (
            set(tool) == {"name", "description", "input_schema"}
            and tool["name"] == RETRIEVE_TOOL_NAME
        )
        schema = tool["input_schema"]
        text = result.body["messages"][2]["content"][0]["content"][0]["text"]
    assert schema["properties"]["key"]["enum"] == [key] and schema["required"] == ["key"]
    assert text.endswith(
        f"\n[Recovery key={key}. Call vsr_context_retrieve with this key when full context is required.]"
    )
    assert NEEDLE in text


def test_recoverable_json_gets_no_trailer_and_stays_json() -> None:
    records = [{"id": i, "note": log(12, f"record{i}")} for i in range(40)]
    output = json.dumps(records)
    recovery = MemoryRecovery()
    result = compress(openai_tool_request(output), config=cfg(**RECOVERABLE), recovery=recovery)
    text = result.body["messages"][3]["content"]
    assert json_shape(json.loads(text)) == json_shape(records)
    assert result.recovery_keys == [recovery_key("", output)]


def test_recoverable_without_a_store_fails() -> None:
    body = openai_tool_request(log(600))
    with pytest.raises(CompressionFailed, match="unavailable"):
        compress(body, config=cfg(**RECOVERABLE))


def test_recoverable_tool_name_clash_fails() -> None:
    body = openai_tool_request(log(600))
    body["tools"].append({"type": "function", "function": {"name": RETRIEVE_TOOL_NAME}})
    original = copy.deepcopy(body)
    with pytest.raises(CompressionFailed, match=RETRIEVE_TOOL_NAME):
        compress(body, config=cfg(**RECOVERABLE), recovery=MemoryRecovery())
    assert body == original
    anthropic = anthropic_tool_request(log(600))
    anthropic["tools"].append({"name": RETRIEVE_TOOL_NAME, "input_schema": {}})
    with pytest.raises(CompressionFailed):
        compress(anthropic, "anthropic", config=cfg(**RECOVERABLE), recovery=MemoryRecovery())


def test_recoverable_needs_a_tools_list() -> None:
    body = openai_tool_request(log(600))
    body["tools"] = {"not": "a list"}
    with pytest.raises(CompressionFailed, match="list"):
        compress(body, config=cfg(**RECOVERABLE), recovery=MemoryRecovery())


def test_recoverable_per_request_byte_limit() -> None:
    output = log(600)
    config = cfg(**RECOVERABLE, recovery={"max_bytes_per_request": len(output.encode()) - 1})
    recovery = MemoryRecovery()
    with pytest.raises(CompressionFailed, match="per-request"):
        compress(openai_tool_request(output), config=config, recovery=recovery)
    assert recovery.calls == []


def test_a_refusing_store_is_a_compression_failure() -> None:
    body = openai_tool_request(log(600))
    with pytest.raises(CompressionFailed, match="limit"):
        compress(
            body, config=cfg(**RECOVERABLE), recovery=MemoryRecovery(CompressionFailed("limit"))
        )
    with pytest.raises(CompressionFailed, match="OSError"):
        compress(body, config=cfg(**RECOVERABLE), recovery=MemoryRecovery(OSError("down")))


@pytest.mark.parametrize("failure_mode", ["fail_open", "fail_closed"])
def test_failure_mode_is_the_callers_decision(failure_mode: str) -> None:
    config = cfg(**RECOVERABLE, failure_mode=failure_mode)
    with pytest.raises(CompressionFailed):
        compress(openai_tool_request(log(600)), config=config)


def test_a_non_reducing_rewrite_is_reverted() -> None:
    # Shrinking a small block saves less than the recovery tool costs: everything is undone.
    body = openai_tool_request(log(14))
    config = cfg(
        mode="always",
        targets={"tool_outputs": {"mode": "recoverable", "min_tokens": 200, "target_tokens": 150}},
    )
    recovery = MemoryRecovery()
    result = compress(body, config=config, recovery=recovery)
    assert (result.applied, result.skip_reason, result.quality) == (
        False,
        "budget_not_reduced",
        "rejected_non_reducing",
    )
    assert result.body is body and result.tokens_after == result.tokens_before
    assert result.recovery_keys == [] and recovery.calls == []
    assert all(b.final_tokens == b.original_tokens for b in result.blocks)


def test_nothing_to_shrink_is_not_applied() -> None:
    body = openai_tool_request("[not json " + log(600))  # JSON-like but malformed: left alone
    result = compress(body, config=cfg(mode="always"))
    assert (result.applied, result.skip_reason, result.quality) == (
        False,
        "budget_not_reduced",
        "not_applied",
    )


# --- the latest user message and the 400 rule -----------------------------------------------------


@pytest.mark.parametrize("chat_format", ["openai", "anthropic"])
def test_current_user_truncation_keeps_both_ends_just_enough(chat_format: str) -> None:
    body = long_question(chat_format)
    tokens = count_json(body, ESTIMATOR)
    budget = tokens // 2
    with pytest.raises(ContextLengthExceeded):
        compress(body, chat_format, max_input_tokens=budget)
    config = cfg(targets={"current_user": {"mode": "truncate"}})
    result = compress(body, chat_format, config=config, max_input_tokens=budget)
    text = read_at(result.body, ("messages", len(body["messages"]) - 1, "content"))
    assert text.startswith("Please read this carefully.") and text.endswith("What should I do?")
    assert OMISSION_MARKER in text
    assert budget - 60 <= result.tokens_after <= budget  # only as much as the budget needs
    [report] = result.blocks
    assert (report.kind, report.omitted_chunks, report.format) == ("current_user", 1, "truncate")
    untouched = compress(body, chat_format, config=config)
    assert untouched.skip_reason == "no_targets"  # within the budget: never truncated


def test_current_user_is_processed_after_the_other_blocks() -> None:
    body = openai_tool_request(log(600))
    body["messages"].append({"role": "user", "content": "And also: " + log(300, "note")})
    tokens = count_json(body, ESTIMATOR)
    needed = ESTIMATOR.count(log(600)) - 1000 + 1000  # the tool output's saving, and 1000 more
    config = cfg(targets={"current_user": {"mode": "truncate"}})
    result = compress(body, config=config, max_input_tokens=tokens - needed)
    assert [b.kind for b in result.blocks] == ["tool_output", "current_user"]
    tool, user = result.blocks
    assert tool.final_tokens <= 1000
    # The tool output's reduction came first, so the user text lost only about the rest.
    assert 800 < user.original_tokens - user.final_tokens < 1500


def test_protected_overflow_raises_and_leaves_the_request_untouched() -> None:
    body = openai_tool_request(log(600))
    body["messages"][0]["content"] = log(800, "policy")
    original = copy.deepcopy(body)
    tokens = count_json(body, ESTIMATOR)
    with pytest.raises(ContextLengthExceeded) as raised:
        compress(body, max_input_tokens=tokens // 2)
    assert body == original
    assert raised.value.budget == tokens // 2 and raised.value.tokens > raised.value.budget
    assert "context omitted" not in json.dumps(body)


def test_a_request_control_target_that_cannot_be_met_is_partial() -> None:
    body = openai_tool_request(log(600))
    result = compress(body, request_target_tokens=50)
    assert result.applied and result.quality == "budget_partial"
    assert result.target_request_tokens == 50 and result.trigger == "context_window"
    met = compress(body, request_target_tokens=5000)
    assert met.quality == "budget_met" and met.target_request_tokens == 5000


def test_unsupported_shape_is_a_failure() -> None:
    with pytest.raises(CompressionFailed):
        compress({"prompt": "hello"})


# --- properties over generated conversations -----------------------------------------------------


def json_shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: json_shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_shape(item) for item in value]
    return "" if isinstance(value, str) else value


def ids_of(body: dict[str, Any], chat_format: str) -> list[tuple[int, str, str]]:
    found = []
    for index, message in enumerate(body["messages"]):
        for call in message.get("tool_calls") or []:
            found.append((index, "call", call["id"]))
        if "tool_call_id" in message:
            found.append((index, "result", message["tool_call_id"]))
        content = message.get("content")
        for item in content if isinstance(content, list) else []:
            if item.get("type") == "tool_use":
                found.append((index, "call", item["id"]))
            if item.get("type") == "tool_result":
                found.append((index, "result", item["tool_use_id"]))
    return found


def differing_leaves(before: Any, after: Any, path: tuple = ()) -> list[tuple]:
    """Paths where the two trees differ; a structural difference anywhere is reported too."""
    if isinstance(before, dict) and isinstance(after, dict):
        if list(before) != list(after):
            return [(*path, "<keys>")]
        return [
            p for key in before for p in differing_leaves(before[key], after[key], (*path, key))
        ]
    if isinstance(before, list) and isinstance(after, list):
        if len(before) != len(after):
            return [(*path, "<length>")]
        return [
            p
            for i, (a, b) in enumerate(zip(before, after, strict=True))
            for p in differing_leaves(a, b, (*path, i))
        ]
    return [] if before == after and type(before) is type(after) else [path]


def check_result(
    body: dict[str, Any],
    chat_format: str,
    config: CompressConfig,
    result: CompressionResult,
    budget: int,
    recovery: MemoryRecovery,
) -> None:
    tokens_before = count_json(body, ESTIMATOR)
    assert result.tokens_before == tokens_before
    assert result.tokens_after <= tokens_before  # never longer
    assert result.tokens_after == count_json(result.body, ESTIMATOR)
    assert result.tokens_after <= budget
    if not result.applied:
        assert result.body is body and result.recovery_keys == [] and recovery.calls == []
        return
    assert result.tokens_after < tokens_before
    segments = parse_segments(body, chat_format)
    compressible = {
        block.path: block
        for block in segments.blocks
        if config.targets.of({"tool_output": "tool_outputs"}.get(block.kind, block.kind)).mode
        != "preserve"  # type: ignore[arg-type]
    }
    after = copy.deepcopy(result.body)
    if result.recovery_keys:
        tool = after["tools"].pop()
        name = tool["function"]["name"] if chat_format == "openai" else tool["name"]
        schema = tool["function"]["parameters"] if chat_format == "openai" else tool["input_schema"]
        assert name == RETRIEVE_TOOL_NAME
        assert schema["properties"]["key"]["enum"] == result.recovery_keys
        assert [key for key, _ in recovery.calls[0]] == result.recovery_keys
        if "tools" not in body:
            assert after.pop("tools") == []
    # Only compressible text changed; ids, tool calls, images, system text and keys did not.
    changed = differing_leaves(body, after)
    assert all(path in compressible for path in changed), changed
    assert ids_of(after, chat_format) == ids_of(body, chat_format)
    protected = set(segments.protected_messages)
    for path in changed:
        block = compressible[path]
        if block.message_index in protected:
            assert block.kind in {"tool_output", "rag", "memory", "current_user"}
        new_text = read_at(after, path)
        assert new_text.strip() or not block.text.strip()  # never emptied
        assert ESTIMATOR.count(new_text) < ESTIMATOR.count(block.text)
        if block.text.lstrip().startswith(("{", "[")):
            assert json_shape(json.loads(new_text)) == json_shape(json.loads(block.text))
    for index in protected:
        message = body["messages"][index]
        if message.get("role") in {"system", "developer", "assistant"}:
            assert after["messages"][index] == message
    if chat_format == "anthropic":
        assert after.get("system") == body.get("system")


def length_judge(query: str, texts: list[str]) -> list[float]:
    """A deterministic stand-in for the relevance judge."""
    return [(len(text) % 7) / 7 for text in texts]


def run_property(
    spec: dict[str, Any], chat_format: str, config: CompressConfig, share: float, options: tuple
) -> None:
    with_judge, numeric_budget = options
    body = render_openai(spec) if chat_format == "openai" else render_anthropic(spec)
    snapshot = copy.deepcopy(body)
    tokens = count_json(body, ESTIMATOR)
    budget = max(1, int(tokens * share))
    recovery = MemoryRecovery()
    try:
        result = compress_request(
            body,
            chat_format,  # type: ignore[arg-type]
            config,
            max_input_tokens=budget,
            estimator=ESTIMATOR,
            judge=length_judge if with_judge else None,
            recovery=recovery,
            recovery_scope="s",
            numeric_budget=numeric_budget,
        )
    except ContextLengthExceeded as error:
        event("context_length_exceeded")
        assert body == snapshot  # the 400 path rewrites nothing
        assert tokens > budget and error.tokens > error.budget == budget
        assert recovery.calls == []
        return
    assert body == snapshot  # the input is never mutated
    event(f"applied={result.applied} skip={result.skip_reason} quality={result.quality}")
    event(f"kinds={sorted({b.kind for b in result.blocks if b.final_tokens < b.original_tokens})}")
    event(f"recovery={bool(result.recovery_keys)}")
    check_result(body, chat_format, config, result, budget, recovery)


PROPERTY_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY_SETTINGS
@given(conversation(), compress_config(), BUDGET_SHARE, st.tuples(st.booleans(), st.booleans()))
def test_openai_properties(
    spec: dict[str, Any], config: CompressConfig, share: float, options: tuple
) -> None:
    run_property(spec, "openai", config, share, options)


@PROPERTY_SETTINGS
@given(conversation(), compress_config(), BUDGET_SHARE, st.tuples(st.booleans(), st.booleans()))
def test_anthropic_properties(
    spec: dict[str, Any], config: CompressConfig, share: float, options: tuple
) -> None:
    run_property(spec, "anthropic", config, share, options)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation(), st.sampled_from(["openai", "anthropic"]))
def test_a_clashing_retrieve_tool_fails_without_touching_the_request(
    spec: dict[str, Any], chat_format: str
) -> None:
    body = render_openai(spec) if chat_format == "openai" else render_anthropic(spec)
    clash = (
        {"type": "function", "function": {"name": RETRIEVE_TOOL_NAME}}
        if chat_format == "openai"
        else {"name": RETRIEVE_TOOL_NAME}
    )
    body["tools"] = [*body.get("tools", []), clash]
    snapshot = copy.deepcopy(body)
    config = cfg(
        mode="always",
        targets={"tool_outputs": {"mode": "recoverable", "min_tokens": 20, "target_tokens": 5}},
    )
    has_output = any(b.kind == "tool_output" for b in parse_segments(body, chat_format).blocks)
    try:
        compress_request(
            body,
            chat_format,
            config,
            max_input_tokens=BIG,
            estimator=ESTIMATOR,
            recovery=MemoryRecovery(),
        )  # type: ignore[arg-type]
    except CompressionFailed:
        assert has_output
    else:
        assert not has_output
    assert body == snapshot


def test_block_bm25_matches_text_bm25_scores_query_by_query() -> None:
    texts = [log(30, "vault code"), log(20, "lunch menu"), "vault vault order", ""]
    queries = ["vault code", "menu soup", "order vault", "anything"]
    expected = [textops.bm25_scores(query, texts)[i] for i, query in enumerate(queries)]
    assert block_bm25(queries, texts) == pytest.approx(expected, rel=1e-12)
    assert block_bm25(["vault"] * 4, texts) == textops.bm25_scores("vault", texts)


@pytest.mark.parametrize("chat_format", ["openai", "anthropic"])
def test_history_spares_the_latest_turns_and_system_text(chat_format: str) -> None:
    old_user, old_answer = log(300, "question"), log(300, "answer")
    latest_answer, latest_user = log(300, "previous"), log(300, "latest")
    messages = [
        {"role": "user", "content": old_user},
        {"role": "assistant", "content": old_answer},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": latest_answer},
        {"role": "user", "content": latest_user},
    ]
    if chat_format == "openai":
        body: dict[str, Any] = {
            "messages": [{"role": "system", "content": log(300, "rules")}, *messages]
        }
    else:
        body = {"system": log(300, "rules"), "messages": messages}
    config = cfg(
        targets={"history": {"mode": "extractive", "min_tokens": 1000, "target_tokens": 300}}
    )
    result = compress(body, chat_format, config=config)
    offset = 1 if chat_format == "openai" else 0
    assert sorted(b.message_index - offset for b in result.blocks) == [0, 1]
    after = result.body["messages"][offset:]
    assert after[3]["content"] == latest_answer and after[4]["content"] == latest_user
    if chat_format == "openai":
        assert result.body["messages"][0] == body["messages"][0]
    else:
        assert result.body["system"] == body["system"]
    assert len(after[0]["content"]) < len(old_user) and len(after[1]["content"]) < len(old_answer)


def test_a_single_candidate_needs_no_judge() -> None:
    result = compress(
        openai_tool_request(log(600)), judge=lambda q, t: pytest.fail("nothing to order")
    )
    assert result.applied


@pytest.mark.parametrize("answer", [[0.5], [float("nan"), 0.1, 0.2]])
def test_a_judge_answer_of_the_wrong_shape_is_ignored(answer: list[float]) -> None:
    result = compress(three_outputs(), judge=lambda q, t: answer)
    assert result.applied and result.warnings == ["judge_failed:ValueError"]


@pytest.mark.parametrize("chat_format", ["openai", "anthropic"])
def test_recoverable_rag_keeps_its_exchange_paired(chat_format: str) -> None:
    body = injected(chat_format)
    config = cfg(targets={"rag": {"mode": "recoverable"}})
    recovery = MemoryRecovery()
    result = compress(body, chat_format, config=config, recovery=recovery, recovery_scope="r")
    assert [b.kind for b in result.blocks] == ["rag"] and len(result.recovery_keys) == 1
    assert ids_of(result.body, chat_format) == ids_of(body, chat_format)
    names = [
        tool["function"]["name"] if chat_format == "openai" else tool["name"]
        for tool in result.body["tools"]
    ]
    assert names[-1] == RETRIEVE_TOOL_NAME and names[:-1] == [
        tool["name"] for tool in body.get("tools", [])
    ]
