"""OpenTelemetry export of the gateway's calls: a server of its own with
``OTEL_EXPORTER_OTLP_ENDPOINT`` set to a loopback OTLP/HTTP receiver, called through the official
clients (one answer, one stream) with the loopback upstream billing usage. The server is stopped
before the spans are read: what it still held is flushed as it exits.

The call's span is the parent of the ``resolve`` span and of the call to the deployment, which
carries the GenAI semantic conventions' attributes and the provider's usage; nothing of the
conversation is exported."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.gateway.conftest import Gateway
from tests.live import live_server
from tests.otlp_receiver import ReceivedSpan, Receiver, otlp_receiver
from tests.upstream import LoopbackUpstream

PLANTED = "WOMBAT-PLANTED-51c0de"


def recorded_tokens(gateway: Gateway, resolve_id: str) -> dict[str, Any]:
    """The record's ``tokens`` once the provider's usage is in it."""
    return dict(
        gateway.recorded(resolve_id, lambda record: "provider" in record["tokens"])["tokens"]
    )


def call_span(receiver: Receiver, resolve_id: str) -> ReceivedSpan:
    [call] = [
        s
        for s in receiver.named("gateway.call")
        if s.attributes["context.resolve_id"] == resolve_id
    ]
    return call


def test_gateway_calls_export_the_call_the_resolve_and_the_model_call(
    gateway: Gateway, upstream: LoopbackUpstream
) -> None:
    upstream.bill(hidden_input=11, completion_tokens=7)
    with (
        otlp_receiver() as receiver,
        live_server({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}) as server,
    ):
        client = openai.OpenAI(base_url=f"{server}/v1", api_key=gateway.key, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model=gateway.openai_route,
            messages=[{"role": "user", "content": f"Where is my parcel? {PLANTED}"}],
            user=f"user-{PLANTED}",
        )
        completion = raw.parse()
        answered_id = raw.headers["x-context-resolve-id"]

        streamed = anthropic.Anthropic(base_url=server, api_key=gateway.key, max_retries=0)
        raw_stream = streamed.messages.with_raw_response.create(
            model=gateway.anthropic_route,
            max_tokens=64,
            messages=[{"role": "user", "content": f"And my refund? {PLANTED}"}],
            stream=True,
        )
        streamed_id = raw_stream.headers["x-context-resolve-id"]
        assert list(raw_stream.parse())
        # The stream's call ends after its last event, with the turn's completion.
        assert "provider" in recorded_tokens(gateway, streamed_id)
    # The server has stopped (before the receiver): its batch was flushed as it shut down.

    assert completion.usage is not None
    call = call_span(receiver, answered_id)
    assert call.parent_id == ""
    assert call.kind == Span.SPAN_KIND_SERVER
    assert call.service == "context-platform"  # OTEL_SERVICE_NAME unset
    assert call.attributes["context.tenant"] == "acme"
    assert call.attributes["context.route"] == gateway.openai_route
    assert call.attributes["context.protocol"] == "openai"
    assert call.attributes["context.stream"] is False

    children = {s.name: s for s in receiver.children(call)}
    assert set(children) == {"resolve", "chat upstream-gpt"}
    resolve = children["resolve"]
    assert resolve.attributes["context.resolve_id"] == answered_id
    assert resolve.attributes["context.route"] == gateway.openai_route
    [rules] = [s for s in receiver.children(resolve) if s.name == "source.fetch"]
    assert rules.attributes["context.source.name"] == "rules"
    assert rules.attributes["context.source.kept"] == 1

    model_call = children["chat upstream-gpt"]
    assert model_call.kind == Span.SPAN_KIND_CLIENT
    assert model_call.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "openai",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "upstream-gpt",
        "gen_ai.response.model": "upstream-gpt",
        "gen_ai.usage.input_tokens": completion.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": completion.usage.completion_tokens,
    }
    assert completion.usage.completion_tokens == 7
    assert model_call.start_ns >= resolve.end_ns  # forwarded once resolved

    stream_call = call_span(receiver, streamed_id)
    assert stream_call.attributes["context.stream"] is True
    assert stream_call.attributes["context.protocol"] == "anthropic"
    [stream_model_call] = [s for s in receiver.children(stream_call) if s.name.startswith("chat ")]
    assert stream_model_call.name == "chat upstream-claude"
    assert stream_model_call.attributes["gen_ai.system"] == "anthropic"
    assert stream_model_call.attributes["gen_ai.request.model"] == "upstream-claude"
    assert stream_model_call.attributes["gen_ai.usage.input_tokens"] > 11  # the hidden input too
    assert stream_model_call.attributes["gen_ai.usage.output_tokens"] == 7

    assert receiver.bodies
    for body in receiver.bodies:
        assert PLANTED.encode() not in body
        assert b"Where is my parcel" not in body
        assert b"GATEWAY-RULE" not in body  # the route's guardrail text
