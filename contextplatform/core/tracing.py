"""OpenTelemetry spans of the resolve and of the gateway's calls, exported over OTLP/HTTP when
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set; unset, no SDK
provider is installed and every helper here returns at once (``span`` yields ``None``).

The spans: ``resolve`` (the root of a REST resolve, the child of the gateway call's span on the
gateway), one per source fetch (built once the pack has decided what each source kept, with the
fetch's own start and end), ``compress``, and the call to the model deployment with the GenAI
semantic conventions' attributes. Attributes are names, counts, statuses and times only: never
a prompt, a document, a memory or any text of the user's (a raised error gives its type, not
its message).

The provider is this module's own, not the global one: libraries that trace through the global
API (the MCP SDK does) export nothing of theirs through it. It is built on first use, in the
process that serves (after a server's fork), and flushed when the process exits.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, StatusCode

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
TIMEOUT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
DEFAULT_SERVICE_NAME = "context-platform"
# One export's bound: a collector that does not answer costs the export thread this, never a
# request (spans are queued and sent in the background).
DEFAULT_EXPORT_TIMEOUT_S = 10.0
# The batch processor: sent every second or when 512 spans wait, at most 2048 queued (more are
# dropped, not held in memory), and on exit whatever is left, within the export's bound.
SCHEDULE_DELAY_MS = 1000
MAX_EXPORT_BATCH = 512
MAX_QUEUE = 2048

INSTRUMENTATION = "contextplatform"

Attributes = Mapping[str, str | bool | int | float]


class _State:
    configured = False
    provider: TracerProvider | None = None
    tracer: trace.Tracer = trace.NoOpTracer()


_state = _State()


def configure() -> TracerProvider | None:
    """(Re)build the provider from the environment: an SDK provider exporting over OTLP/HTTP
    when an endpoint is set, none otherwise. A provider built before is shut down (flushed)."""
    shutdown()
    if any(os.environ.get(name) for name in ENDPOINT_VARIABLES):
        _state.provider = _sdk_provider()
        _state.tracer = _state.provider.get_tracer(INSTRUMENTATION)
    _state.configured = True
    return _state.provider


def _sdk_provider() -> TracerProvider:
    # Imported here: without an endpoint the exporter (and requests under it) is never loaded.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    timeout = (
        None if any(os.environ.get(n) for n in TIMEOUT_VARIABLES) else DEFAULT_EXPORT_TIMEOUT_S
    )
    service = os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}), shutdown_on_exit=True
    )
    provider.add_span_processor(
        BatchSpanProcessor(
            # The endpoint, headers and TLS files are the exporter's standard variables.
            OTLPSpanExporter(timeout=timeout),
            schedule_delay_millis=SCHEDULE_DELAY_MS,
            max_export_batch_size=MAX_EXPORT_BATCH,
            max_queue_size=MAX_QUEUE,
            export_timeout_millis=int((timeout or DEFAULT_EXPORT_TIMEOUT_S) * 1000),
        )
    )
    return provider


def shutdown() -> None:
    """Export what is queued and stop (a server's shutdown: a worker stopped by SIGTERM runs no
    ``atexit`` hook). Tracing is off afterwards."""
    if _state.provider is not None:
        _state.provider.shutdown()
    _state.provider, _state.tracer = None, trace.NoOpTracer()


def enabled() -> bool:
    """True when spans are exported (an endpoint is set)."""
    if not _state.configured:
        configure()
    return _state.provider is not None


def force_flush(timeout_millis: int = 10_000) -> bool:
    """Export every span ended so far (tests, a bench); True when there is nothing left."""
    return _state.provider.force_flush(timeout_millis) if _state.provider is not None else True


@contextmanager
def span(
    name: str, attributes: Attributes | None = None, *, kind: SpanKind = SpanKind.INTERNAL
) -> Iterator[Span | None]:
    """A span around the block, current inside it (what starts there is its child); ``None``
    when tracing is off. An exception marks it failed with its type only (``error.type``)."""
    if not enabled():
        yield None
        return
    with _state.tracer.start_as_current_span(
        name,
        kind=kind,
        attributes=attributes,
        record_exception=False,  # its message may quote the request
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as error:
            failed(current, error)
            raise


def start(
    name: str, attributes: Attributes | None = None, *, kind: SpanKind = SpanKind.INTERNAL
) -> Span | None:
    """A span the caller ends (``end``), for work that outlives the block that starts it (a
    stream); the child of the current span. ``None`` when tracing is off."""
    if not enabled():
        return None
    return _state.tracer.start_span(name, kind=kind, attributes=attributes)


def end(current: Span | None, error: BaseException | None = None) -> None:
    if current is None:
        return
    if error is not None:
        failed(current, error)
    current.end()


def failed(current: Span, error: BaseException) -> None:
    current.set_attribute("error.type", type(error).__qualname__)
    current.set_status(StatusCode.ERROR)


def set_attributes(attributes: Attributes) -> None:
    """On the current span (the block's of ``span``), when tracing is on."""
    if _state.provider is not None:
        trace.get_current_span().set_attributes(attributes)


def finished_span(
    name: str, attributes: Attributes, *, started: float, ended: float, error: bool = False
) -> None:
    """A span for work already done, the child of the current span: ``started`` and ``ended``
    are ``time.perf_counter()`` readings (a source's fetch, timed where it ran)."""
    if _state.provider is None:
        return
    now_perf, now_ns = time.perf_counter(), time.time_ns()
    done = _state.tracer.start_span(
        name, attributes=attributes, start_time=now_ns - int((now_perf - started) * 1e9)
    )
    if error:
        done.set_status(StatusCode.ERROR)
    done.end(end_time=now_ns - int((now_perf - ended) * 1e9))


# --- the GenAI semantic conventions (the call to a model deployment) ---------------------------


def model_call_attributes(provider: str, model: str, operation: str = "chat") -> dict[str, str]:
    """A call's attributes before it is sent; its span is named ``"{operation} {model}"``."""
    return {
        "gen_ai.operation.name": operation,
        "gen_ai.system": provider,  # the conventions' name before gen_ai.provider.name
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
    }


def model_answered(
    current: Span | None,
    *,
    response_model: Any = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
) -> None:
    """What the model's answer says of itself: the model that answered and its usage."""
    if current is None:
        return
    if isinstance(response_model, str) and response_model:
        current.set_attribute("gen_ai.response.model", response_model)
    if input_tokens is not None:
        current.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    if output_tokens is not None:
        current.set_attribute("gen_ai.usage.output_tokens", output_tokens)


__all__ = [
    "configure",
    "enabled",
    "end",
    "finished_span",
    "force_flush",
    "model_answered",
    "model_call_attributes",
    "set_attributes",
    "shutdown",
    "span",
    "start",
]
