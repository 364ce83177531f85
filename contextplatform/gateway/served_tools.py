"""The tools the gateway answers itself for one call, and answering them.

``vsr_context_retrieve`` is reserved when compression kept originals back for this request: a
call returns one from the recovery store, which checks that this request issued the key for this
route and user, that it has not expired and that the request has retrievals left. Each lazy
source's ``search_<source>`` tool runs that source for the model's query. A call that cannot be
served (an unknown key, no retrievals left, arguments that are not what the tool takes) is
answered with the reason, so the model can go on without it; every call is recorded for the
replay record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compression.recovery import RecoveryError, retrieve
from compression.rewrite import RETRIEVE_TOOL_NAME
from contextplatform.gateway.tool_calls import ServedCall, ToolCall
from contextplatform.resolve.resolver import Resolution
from contextplatform.resolve.use_cases import search_source
from sources.base import ContextSource

# At most this many rounds of served calls per client request, whatever the model asks: a model
# that keeps calling gets its reserved calls taken out of the last answer instead.
MAX_ROUNDS = 4
MAX_CALLS_PER_ROUND = 8


@dataclass
class ServedTools:
    """What one gateway call serves in process, and the record of what it served."""

    resolution: Resolution
    user: str | None
    capture_content: bool
    retrieve: bool = False
    lazy: dict[str, ContextSource] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    rounds: int = 0

    @property
    def names(self) -> frozenset[str]:
        return frozenset([*([RETRIEVE_TOOL_NAME] if self.retrieve else []), *self.lazy])

    def __bool__(self) -> bool:
        return self.retrieve or bool(self.lazy)

    @property
    def fail_closed(self) -> bool:
        """A follow-up that fails is an error for the client (else the answer goes without it)."""
        spec = self.resolution.spec
        compress = spec.context.compress if spec is not None else None
        return compress is not None and compress.failure_mode == "fail_closed"

    def may_continue(self) -> bool:
        return self.rounds < MAX_ROUNDS

    def serve_round(self, calls: list[ToolCall]) -> list[ServedCall]:
        """Answer one answer's reserved calls (on the tenant's database thread)."""
        self.rounds += 1
        served: list[ServedCall] = []
        for index, call in enumerate(calls):
            if index >= MAX_CALLS_PER_ROUND:
                content = f"refused: at most {MAX_CALLS_PER_ROUND} calls per answer"
                served.append(self._noted(call, content, {"status": "refused"}))
                continue
            served.append(self._serve(call))
        return served

    def _serve(self, call: ToolCall) -> ServedCall:
        if call.name == RETRIEVE_TOOL_NAME:
            return self._retrieve(call)
        return self._search(call, self.lazy[call.name])

    def _noted(self, call: ToolCall, content: str, record: dict[str, Any]) -> ServedCall:
        self.records.append({"tool": call.name, "round": self.rounds, **record})
        return ServedCall(call=call, content=content)

    def _retrieve(self, call: ToolCall) -> ServedCall:
        key = (call.arguments or {}).get("key")
        if not isinstance(key, str) or not key:
            return self._noted(
                call, "error: expected the argument key", {"status": "invalid_arguments"}
            )
        try:
            original = retrieve(
                request_id=self.resolution.id,
                key=key,
                route=self.resolution.route,
                user=self.user,
            )
        except RecoveryError as error:
            return self._noted(call, f"error: {error.message}", {"status": error.code, "key": key})
        record = {"status": "served", "key": key, "bytes": len(original.encode())}
        return self._noted(call, original, record)

    def _search(self, call: ToolCall, source: ContextSource) -> ServedCall:
        query = (call.arguments or {}).get("query")
        request = self.resolution.context_request
        if not isinstance(query, str) or not query.strip() or request is None:
            return self._noted(
                call, "error: expected the argument query", {"status": "invalid_arguments"}
            )
        result = search_source(source, query, request, self.resolution.counting.estimator)
        record = result.record(call.name, query, self.capture_content)
        record.pop("tool")
        return self._noted(call, result.content, record)


def served_tools(resolution: Resolution, user: str | None, capture_content: bool) -> ServedTools:
    issued = resolution.compression.get("recovery_keys")
    return ServedTools(
        resolution=resolution,
        user=user,
        capture_content=capture_content,
        retrieve=isinstance(issued, int) and issued > 0,
        lazy=dict(resolution.lazy_tools),
    )


__all__ = ["MAX_ROUNDS", "ServedTools", "served_tools"]
