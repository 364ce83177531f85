"""Provider usage and labelled counts through the live gateway: the upstream's reported usage lands
in the replay record beside the estimate (both protocols, streaming and not), the deployment's
calibration follows the provider's ratio and then labels and scales the resolve's estimates, and
an OpenAI model of a known family is counted exactly."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from typing import Any

import anthropic
import bpe_openai
import openai
import pytest

from contextplatform.core.estimation import HeuristicEstimator
from contextplatform.deployments.calibration import next_ratio
from tests.gateway.conftest import RULE, Gateway, unique
from tests.upstream import LoopbackUpstream

QUESTION = "How many tokens does this question take?"


def openai_client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.openai_base_url, api_key=gateway.key, max_retries=0)


def anthropic_client(gateway: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.server, api_key=gateway.key, max_retries=0)


def messages() -> list[Any]:
    return [{"role": "user", "content": QUESTION}]


def recorded_tokens(gateway: Gateway, resolve_id: str) -> dict[str, Any]:
    """The record's ``tokens`` once the provider's usage is in it."""
    return dict(
        gateway.recorded(resolve_id, lambda record: "provider" in record["tokens"])["tokens"]
    )


def deployment(gateway: Gateway, name: str) -> dict[str, Any]:
    with gateway.api() as api:
        response = api.get(f"/api/v1/deployments/{name}")
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.fixture
def own_route(gateway: Gateway) -> Iterator[tuple[str, str]]:
    """A route with a deployment of its own (no calibration yet), removed after the test; the
    deployment's model is one no exact tokenizer knows, so its counts are estimated."""
    name = unique("usage")
    yield from _route(gateway, name, model="loopback-model")


@pytest.fixture
def exact_route(gateway: Gateway) -> Iterator[tuple[str, str]]:
    yield from _route(gateway, unique("exact"), model="gpt-4o-mini")


def _route(gateway: Gateway, name: str, *, model: str) -> Iterator[tuple[str, str]]:
    body = {
        "name": name,
        "protocol": "openai",
        "base_url": gateway.upstream.openai_base_url,
        "model": model,
    }
    rules = {"type": "skill_guardrails", "name": "rules", "texts": [RULE]}
    route = {"name": name, "model": {"upstream": name}, "context": {"sources": [rules]}}
    with gateway.api() as api:
        assert api.post("/api/v1/deployments", json=body).status_code == 201
        assert api.post("/api/v1/routes", json=route).status_code == 201
        try:
            yield name, name
        finally:
            api.delete(f"/api/v1/routes/{name}")
            api.delete(f"/api/v1/deployments/{name}")


# --- usage in the replay record ------------------------------------------------------------------


def test_openai_completion_usage_is_recorded_beside_the_estimate(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    raw = openai_client(gateway).chat.completions.with_raw_response.create(
        model=gateway.openai_route, messages=messages()
    )
    completion = raw.parse()
    assert completion.usage is not None

    tokens = recorded_tokens(gateway, raw.headers["x-context-resolve-id"])
    assert tokens["provider"] == {
        "input": completion.usage.prompt_tokens,
        "output": completion.usage.completion_tokens,
    }
    assert tokens["label"] in {"estimated", "provider_calibrated"}
    assert tokens["after"] > 0 and tokens["estimator"].startswith("heuristic")


def test_openai_stream_usage_is_asked_for_and_hidden_from_a_client_that_did_not(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    raw = openai_client(gateway).chat.completions.with_raw_response.create(
        model=gateway.openai_route, messages=messages(), stream=True
    )
    chunks = list(raw.parse())
    assert all(chunk.usage is None for chunk in chunks)
    assert all(chunk.choices for chunk in chunks)  # the usage chunk has none
    assert "".join(c.choices[0].delta.content or "" for c in chunks).startswith("seen ")
    assert upstream.last.body["stream_options"] == {"include_usage": True}

    tokens = recorded_tokens(gateway, raw.headers["x-context-resolve-id"])
    assert tokens["provider"]["input"] > 0 and tokens["provider"]["output"] > 0


def test_openai_stream_usage_reaches_a_client_that_asked(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    raw = openai_client(gateway).chat.completions.with_raw_response.create(
        model=gateway.openai_route,
        messages=messages(),
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [chunk.usage for chunk in raw.parse() if chunk.usage is not None]
    assert len(usage) == 1

    tokens = recorded_tokens(gateway, raw.headers["x-context-resolve-id"])
    assert tokens["provider"] == {
        "input": usage[0].prompt_tokens,
        "output": usage[0].completion_tokens,
    }


def test_anthropic_message_usage_is_recorded(gateway: Gateway, upstream: LoopbackUpstream) -> None:
    raw = anthropic_client(gateway).messages.with_raw_response.create(
        model=gateway.anthropic_route, max_tokens=100, messages=messages()
    )
    message = raw.parse()
    tokens = recorded_tokens(gateway, raw.headers["x-context-resolve-id"])
    assert tokens["provider"] == {
        "input": message.usage.input_tokens,
        "output": message.usage.output_tokens,
    }


def test_anthropic_stream_usage_is_recorded(gateway: Gateway, upstream: LoopbackUpstream) -> None:
    raw = anthropic_client(gateway).messages.with_raw_response.create(
        model=gateway.anthropic_route, max_tokens=100, messages=messages(), stream=True
    )
    events = list(raw.parse())
    start = next(e for e in events if e.type == "message_start")
    delta = next(e for e in events if e.type == "message_delta")

    tokens = recorded_tokens(gateway, raw.headers["x-context-resolve-id"])
    assert tokens["provider"] == {
        "input": start.message.usage.input_tokens,
        "output": delta.usage.output_tokens,
    }


# --- calibration ---------------------------------------------------------------------------------


def observed(tokens: dict[str, Any]) -> float:
    """Provider tokens per heuristic token, as the record shows them."""
    estimate = tokens["after"] / tokens.get("calibration", 1.0)
    return float(tokens["provider"]["input"]) / estimate


def test_calibration_follows_the_providers_ratio_and_labels_the_estimates(
    gateway: Gateway, upstream: LoopbackUpstream, own_route: tuple[str, str]
) -> None:
    route, deployment_name = own_route
    assert deployment(gateway, deployment_name)["calibration"] is None
    client = openai_client(gateway)
    expected: float | None = None
    labels, ratios, calibrations = [], [], []
    for _ in range(5):
        raw = client.chat.completions.with_raw_response.create(model=route, messages=messages())
        tokens = recorded_tokens(gateway, raw.headers["x-context-resolve-id"])
        labels.append(tokens["label"])
        ratios.append(observed(tokens))
        expected = next_ratio(expected, ratios[-1])
        calibrations.append(deployment(gateway, deployment_name)["calibration"])
        # The exponentially weighted average of what the provider reported.
        assert calibrations[-1] == pytest.approx(expected, rel=1e-6)

    assert labels[0] == "estimated"
    assert set(labels[1:]) == {"provider_calibrated"}
    # From 1 toward the provider's ratio, one step each answer.
    provider_ratio = sum(ratios) / len(ratios)
    steps = [1.0, *calibrations]
    toward = 1 if provider_ratio > 1 else -1
    assert all(toward * (later - earlier) > 0 for earlier, later in itertools.pairwise(steps))
    assert abs(calibrations[-1] - provider_ratio) < abs(calibrations[0] - provider_ratio)
    assert deployment(gateway, deployment_name)["calibration_samples"] == 5


def test_a_calibrated_route_scales_its_budget_estimates(
    gateway: Gateway, upstream: LoopbackUpstream, own_route: tuple[str, str]
) -> None:
    route, deployment_name = own_route
    raw = openai_client(gateway).chat.completions.with_raw_response.create(
        model=route, messages=messages()
    )
    # The calibration moves in the background, with the replay record: read once it is written.
    recorded_tokens(gateway, raw.headers["x-context-resolve-id"])
    ratio = deployment(gateway, deployment_name)["calibration"]
    assert ratio is not None and ratio != 1.0

    request = {"model": route, "messages": messages()}
    with gateway.api() as api:
        response = api.post("/api/v1/resolve", json={"route": route, "request": request})
    assert response.status_code == 200, response.text
    tokens = response.json()["tokens"]
    assert tokens["label"] == "provider_calibrated"
    assert tokens["calibration"] == pytest.approx(ratio, rel=1e-6)
    compact = json.dumps(request, ensure_ascii=False, separators=(",", ":"))
    assert tokens["before"] == math.ceil(HeuristicEstimator().count(compact) * ratio)


# --- exact counts --------------------------------------------------------------------------------


# bpe-openai reads its bundled files with a deprecated importlib.resources call.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_an_openai_model_of_a_known_family_is_counted_exactly(
    gateway: Gateway, upstream: LoopbackUpstream, exact_route: tuple[str, str]
) -> None:
    route, deployment_name = exact_route
    request = {"model": route, "messages": messages()}
    with gateway.api() as api:
        response = api.post("/api/v1/resolve", json={"route": route, "request": request})
    assert response.status_code == 200, response.text
    tokens = response.json()["tokens"]
    compact = json.dumps(request, ensure_ascii=False, separators=(",", ":"))
    expected = len(bpe_openai.get_encoding("o200k_base").encode_ordinary(compact))
    assert tokens["label"] == "exact" and tokens["estimator"] == "o200k_base"
    assert tokens["before"] == expected

    raw = openai_client(gateway).chat.completions.with_raw_response.create(
        model=route, messages=messages()
    )
    recorded = recorded_tokens(gateway, raw.headers["x-context-resolve-id"])
    assert recorded["label"] == "exact" and recorded["provider"]["input"] > 0
    # Exact counts need no calibration, and do not move the heuristic's.
    assert deployment(gateway, deployment_name)["calibration"] is None
