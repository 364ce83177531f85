"""Exact token counts offline: the bundled encodings, which models have one, and the fallback."""

from __future__ import annotations

import pytest

from contextplatform.core.estimation import DEFAULT_ESTIMATOR
from contextplatform.core.exact_tokens import (
    ExactEstimator,
    encoding_name_for,
    exact_estimator_for,
)


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o-mini", "o200k_base"),
        ("gpt-4o-2024-08-06", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("openai/gpt-5", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o1", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo-0125", "cl100k_base"),
        ("upstream-gpt", None),
        ("claude-sonnet-4", None),
        ("o10", None),
        ("gpt-4oops", None),
    ],
)
def test_model_families_map_to_their_encoding(model: str, encoding: str | None) -> None:
    assert encoding_name_for(model) == encoding


def test_counts_are_the_tokenizers_own() -> None:
    # tiktoken's README: "tiktoken is great!" is 6 tokens in cl100k_base.
    assert ExactEstimator("cl100k_base").count("tiktoken is great!") == 6
    assert ExactEstimator("o200k_base").count("hello world") == 2
    assert ExactEstimator("o200k_base").count("") == 0


def test_special_token_text_counts_as_text() -> None:
    # A user may type what looks like a special token; counting must not refuse it.
    assert ExactEstimator("o200k_base").count("say <|endoftext|> now") > 3


def test_a_text_over_the_tokenizers_limit_is_estimated_instead() -> None:
    text = "word " * 250_000
    assert ExactEstimator("o200k_base").count(text) == DEFAULT_ESTIMATOR.count(text)


def test_only_openai_deployments_of_known_families_count_exactly() -> None:
    exact = exact_estimator_for("openai", "gpt-4o-mini")
    assert exact is not None and exact.name == "o200k_base"
    assert exact_estimator_for("anthropic", "gpt-4o-mini") is None
    assert exact_estimator_for("openai", "my-local-llama") is None
