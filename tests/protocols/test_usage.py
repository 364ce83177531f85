"""The provider's usage read from answers and streams of both providers (pure)."""

from __future__ import annotations

from contextplatform.protocols.usage import (
    ProviderUsage,
    StreamUsage,
    is_usage_chunk,
    uncalibrated_input,
    usage_from_response,
    usage_of,
    with_provider_usage,
)


def test_openai_usage() -> None:
    payload = {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}}
    assert usage_from_response(payload) == ProviderUsage(input=12, output=3)


def test_anthropic_usage_counts_cached_input_as_input() -> None:
    usage = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 5,
        "cache_read_input_tokens": 100,
        "output_tokens": 7,
    }
    assert usage_of(usage) == ProviderUsage(input=115, output=7, cached_input=100, cache_write=5)


def test_no_usage_or_a_broken_one_is_none() -> None:
    assert usage_from_response({"choices": []}) is None
    assert usage_from_response(["not", "an", "object"]) is None
    assert usage_of({"prompt_tokens": "12"}) is None
    assert usage_of({"prompt_tokens": True}) is None
    assert usage_of(None) is None


def test_openai_stream_usage_is_the_final_chunk() -> None:
    stream = StreamUsage()
    stream.feed({"choices": [{"delta": {"content": "hi"}}], "usage": None})
    assert stream.usage is None
    final = {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 2}}
    assert is_usage_chunk(final)
    assert not is_usage_chunk({"choices": [{"delta": {}}], "usage": None})
    stream.feed(final)
    assert stream.usage == ProviderUsage(input=40, output=2)


def test_anthropic_stream_usage_from_start_and_delta() -> None:
    stream = StreamUsage()
    stream.feed(
        {"type": "message_start", "message": {"usage": {"input_tokens": 30, "output_tokens": 1}}}
    )
    stream.feed({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}})
    assert stream.usage == ProviderUsage(input=30, output=1)
    stream.feed({"type": "message_delta", "usage": {"output_tokens": 9}})
    assert stream.usage == ProviderUsage(input=30, output=9)


def test_usage_in_each_providers_shape() -> None:
    usage = ProviderUsage(input=5, output=2)
    assert usage.in_shape_of("openai") == {
        "prompt_tokens": 5,
        "completion_tokens": 2,
        "total_tokens": 7,
    }
    assert usage.in_shape_of("anthropic") == {"input_tokens": 5, "output_tokens": 2}


def test_the_record_keeps_both_counts_and_the_estimate_behind_a_calibrated_one() -> None:
    tokens = {"before": 90, "after": 110, "estimator": "heuristic", "label": "estimated"}
    recorded = with_provider_usage(tokens, ProviderUsage(input=100, output=4))
    assert recorded["provider"] == {"input": 100, "output": 4}
    assert recorded["after"] == 110 and recorded["label"] == "estimated"
    assert uncalibrated_input(tokens) == 110.0
    calibrated = {**tokens, "label": "provider_calibrated", "calibration": 0.5}
    assert uncalibrated_input(calibrated) == 220.0
    assert uncalibrated_input({**tokens, "label": "exact"}) is None


def test_openai_usage_reads_cached_prompt_tokens() -> None:
    usage = {
        "prompt_tokens": 2000,
        "completion_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 1536},
    }
    assert usage_of(usage) == ProviderUsage(input=2000, output=10, cached_input=1536)
    assert usage_of(usage).as_dict() == {"input": 2000, "output": 10, "cached_input": 1536}


def test_anthropic_stream_keeps_cached_counts_from_message_start() -> None:
    stream = StreamUsage()
    start = {"input_tokens": 4, "cache_read_input_tokens": 900, "output_tokens": 1}
    stream.feed({"type": "message_start", "message": {"usage": start}})
    stream.feed({"type": "message_delta", "usage": {"output_tokens": 12}})
    assert stream.usage == ProviderUsage(input=904, output=12, cached_input=900)


def test_the_usage_of_several_calls_sums_their_cached_input_too() -> None:
    """A tool loop's answer carries the usage of every call: the cached reads (OpenAI's
    ``prompt_tokens_details``, Anthropic's cache fields) are summed like the rest."""
    from contextplatform.protocols.registry import protocol_for

    openai_calls = [
        {
            "prompt_tokens": 100,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 64},
        },
        {
            "prompt_tokens": 150,
            "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 128},
        },
    ]
    total = protocol_for("openai").summed_usage(openai_calls)
    assert usage_of(total) == ProviderUsage(input=250, output=12, cached_input=192)
    assert protocol_for("openai").summed_usage([{"prompt_tokens": 3, "completion_tokens": 1}]) == {
        "prompt_tokens": 3,
        "completion_tokens": 1,
    }
    anthropic_calls = [
        {"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 90},
        {"input_tokens": 20, "output_tokens": 3, "cache_creation_input_tokens": 40},
    ]
    total = protocol_for("anthropic").summed_usage(anthropic_calls)
    assert usage_of(total) == ProviderUsage(input=160, output=5, cached_input=90, cache_write=40)
