"""OpenTelemetry export of ``POST /api/v1/resolve`` to a real OTLP/HTTP receiver on loopback: the
``resolve`` root span, a child per source fetch (a timed-out, a failed and a kept one), the
compress span, the tenant and route as attributes, and nothing of the request's or the sources'
text anywhere in what is exported. With no endpoint set, no provider and nothing sent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from contextplatform.core import tracing
from tests.conftest import ApiClient
from tests.otlp_receiver import Receiver, otlp_receiver
from tests.resolve import source_kinds_for_tests  # noqa: F401  (registers the test kinds)
from tests.resolve.api.test_resolve import chat, make_route, resolved

# Planted in the request, the route's texts and the sources' items: it must never be exported.
PLANTED = "QUOKKA-PLANTED-7f3a91"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as receiver, pytest.MonkeyPatch.context() as env:
        env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        env.setenv("OTEL_SERVICE_NAME", "context-platform-under-test")
        assert tracing.configure() is not None
        try:
            yield receiver
        finally:
            env.undo()
            tracing.configure()  # back to no provider (flushed and shut down)


def flushed(receiver: Receiver) -> Receiver:
    assert tracing.force_flush()
    return receiver


def test_a_resolve_exports_its_stages_as_spans_without_any_content(
    acme_api: ApiClient, receiver: Receiver
) -> None:
    make_route(
        acme_api,
        "traced",
        [
            {"type": "skill_guardrails", "name": "rules", "texts": [f"Be kind. {PLANTED}"]},
            {
                "type": "test_sleep",
                "name": "docs",
                "items": [f"first {PLANTED}", f"second {PLANTED}"],
            },
            {"type": "test_hang", "name": "stuck", "timeout_ms": 100},
            {"type": "test_sleep", "name": "broken", "fail": True},
        ],
    )
    report = resolved(acme_api, "traced", chat(f"Where is my parcel? {PLANTED}"))
    flushed(receiver)

    [root] = receiver.named("resolve")
    assert root.parent_id == ""  # the root of a REST resolve
    assert root.service == "context-platform-under-test"
    assert root.attributes["context.tenant"] == "acme"
    assert root.attributes["context.route"] == "traced"
    assert root.attributes["context.resolve_id"] == report["id"]
    assert root.attributes["context.mode"] == "live"
    assert root.attributes["context.tokens_after"] > root.attributes["context.tokens_before"] > 0

    children = receiver.children(root)
    fetches = {s.attributes["context.source.name"]: s for s in children if s.name == "source.fetch"}
    assert set(fetches) == {"rules", "docs", "stuck", "broken"}
    assert {s.trace_id for s in receiver.trace_of(root)} == {root.trace_id}

    stuck = fetches["stuck"].attributes
    assert stuck["context.source.type"] == "test_hang"
    assert stuck["context.source.status"] == "timeout"
    assert stuck["context.source.timeout"] is True
    assert stuck["context.source.items"] == stuck["context.source.kept"] == 0
    assert stuck["context.source.latency_ms"] >= 100  # cut at its deadline, not before
    assert fetches["stuck"].end_ns - fetches["stuck"].start_ns >= 100_000_000
    assert fetches["stuck"].status == Status.STATUS_CODE_ERROR

    docs = fetches["docs"].attributes
    assert docs["context.source.type"] == "test_sleep"
    assert docs["context.source.status"] == "ok"
    assert docs["context.source.timeout"] is False
    assert docs["context.source.items"] == docs["context.source.kept"] == 2
    assert fetches["docs"].status != Status.STATUS_CODE_ERROR

    assert fetches["rules"].attributes["context.source.kept"] == 1
    assert fetches["broken"].attributes["context.source.status"] == "failed"
    assert fetches["broken"].attributes["context.source.timeout"] is False
    for fetch in fetches.values():  # each inside the resolve, timed as it ran
        assert root.start_ns <= fetch.start_ns <= fetch.end_ns <= root.end_ns

    [compress] = [s for s in children if s.name == "compress"]
    assert compress.attributes["context.compression.applied"] is False
    assert compress.attributes["context.compression.tokens_before"] > 0

    assert receiver.bodies
    for body in receiver.bodies:  # spans, attributes, events, resource: nothing of the text
        assert PLANTED.encode() not in body
        assert b"Where is my parcel" not in body
        assert b"Be kind" not in body


def test_a_refused_resolve_is_traced_too(acme_api: ApiClient, receiver: Receiver) -> None:
    make_route(
        acme_api,
        "traced-refused",
        [{"type": "test_hang", "name": "gate", "timeout_ms": 100, "on_failure": "block"}],
    )
    response = acme_api.post(
        "/api/v1/resolve", {"route": "traced-refused", "request": chat(PLANTED)}
    )
    assert response.status_code == 503, response.content
    flushed(receiver)
    [root] = receiver.named("resolve")
    assert root.attributes["context.route"] == "traced-refused"
    [gate] = [s for s in receiver.children(root) if s.name == "source.fetch"]
    assert gate.attributes["context.source.timeout"] is True
    for body in receiver.bodies:
        assert PLANTED.encode() not in body


def test_without_an_endpoint_no_provider_is_installed_and_nothing_is_sent(
    acme_api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    with otlp_receiver() as receiver:
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
        assert tracing.configure() is None
        assert not tracing.enabled()
        make_route(acme_api, "untraced", [{"type": "skill_guardrails", "texts": ["Be kind."]}])
        resolved(acme_api, "untraced")
        with tracing.span("anything") as span:
            assert span is None
        assert tracing.force_flush()
        assert receiver.bodies == []
