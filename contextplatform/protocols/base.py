"""What a provider's protocol is to the platform: one object per wire format (OpenAI Chat
Completions, Anthropic Messages; OpenAI Responses would be a third), which owns everything that
differs between them, so that the rest of the platform asks it instead of branching on a name:

* the request: its shape (``provider_shapes``), its output limit, where it names the user, how a
  stream is asked to report usage;
* the injection: how a system block and a tool exchange are written into a request;
* a request's history: the tool calls an assistant message holds, the tool results a message
  carries, which content parts are plain text;
* tool calls: finding them in an answer, the follow-up that carries their results, the answer
  without the gateway's own calls, the usage of several calls added up;
* usage in the provider's own shape, and error bodies as its clients read them;
* streams: what an event says (text, the end), the answer a stream assembles, an error event;
* the kernel's client (``core/llm.py``): the endpoint, the headers, a request, the answer's text.

Pure: no I/O, no Django, no import of the platform's apps or kernel. An error is a
``ProtocolError``, which callers translate into their own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from contextplatform.protocols.sse import sse
from contextplatform.protocols.stream_rounds import StreamRound
from contextplatform.protocols.streamed_calls import StreamedCall, ToolDelta
from contextplatform.protocols.tools import MessageCall, MessageResult, ServedCall, ToolCall
from contextplatform.protocols.usage import ProviderUsage

# The names a deployment's configuration may give (the registry's keys).
ProtocolName = Literal["openai", "anthropic"]
Messages = Sequence[Mapping[str, str]]

# Anthropic's documented error types per status; OpenAI's clients read the status only, so the
# OpenAI shape carries the same types and the platform's own code beside them.
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
}
SERVER_ERROR_TYPE = "api_error"


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, SERVER_ERROR_TYPE if status >= 500 else "invalid_request_error")


class ProtocolError(Exception):
    """An answer or request that does not have the shape its protocol gives it."""


class ProviderProtocol(ABC):
    """One provider's wire format. A third (OpenAI Responses) implements every abstract method
    and is added to the registry (``protocols/registry.py``)."""

    name: ClassVar[str]
    # Where a request names its end user (a 400 names this field).
    user_field: ClassVar[str]
    # The token fields of its ``usage`` object; every call of a turn adds to them.
    usage_fields: ClassVar[tuple[str, ...]]
    # Whether a stream reports usage only when the request asks for it.
    stream_usage_on_request: ClassVar[bool] = False

    # How the ids of the tool calls the platform injects begin: the provider's own id style, and
    # ``vsr_`` to tell them from the model's.
    injected_id_prefix: ClassVar[str]

    # The path of its endpoint (the gateway's, and the one its SDK calls under the server root).
    path: ClassVar[str]

    # ------------------------------------------------------------------ requests

    @abstractmethod
    def request_shape(self, *, for_call: bool = False) -> type[BaseModel]:
        """The pydantic model of a request (``for_call``: one the gateway sends on as it is)."""

    @abstractmethod
    def max_tokens_of(self, request: BaseModel) -> int | None:
        """The output limit a parsed request sets."""

    @abstractmethod
    def body_user(self, body: Mapping[str, Any]) -> Any:
        """The end user the body names (``user_field``), as the body holds it."""

    @abstractmethod
    def output_limit_field(self, model: str) -> str:
        """The output limit field a body that names none is given, for ``model``."""

    @abstractmethod
    def published_overhead(self, model: str, body: Mapping[str, Any]) -> int:
        """The input tokens the provider adds to ``body`` beyond its text, as it publishes."""

    def required_headers(self) -> dict[str, str]:
        """Headers every call needs (lowercase names; a caller's own value wins)."""
        return {}

    @abstractmethod
    def credentials(self, api_key: str | None) -> dict[str, str]:
        """The header carrying ``api_key`` (lowercase name), none without a key."""

    def with_stream_usage(self, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The body to forward for a stream, and whether the usage event it then carries must be
        hidden from the client (the gateway asked for it, the client did not)."""
        return body, False

    # ------------------------------------------------------------------ injection

    @abstractmethod
    def inject_system(self, body: dict[str, Any], section: str) -> dict[str, Any]:
        """``body`` with ``section`` added to its system prompt (in place)."""

    def injected_call_id(self, digest: str) -> str:
        """The id of an injected tool call, in the provider's id style."""
        return f"{self.injected_id_prefix}{digest}"

    @abstractmethod
    def tool_exchange(
        self, call_id: str, name: str, arguments: dict[str, Any], result: str
    ) -> list[dict[str, Any]]:
        """The messages of one call of ``name`` and its ``result``."""

    @abstractmethod
    def tool_definition(
        self, name: str, description: str, schema: dict[str, Any]
    ) -> dict[str, Any]:
        """A tool offered to the model, with ``schema`` for its arguments."""

    def declare_tools(self, body: dict[str, Any], names: Sequence[str], description: str) -> None:
        """Declare tools whose calls were injected, when the provider refuses undeclared ones
        (none by default: a declaration would offer the model a tool it might call)."""
        return None

    # ------------------------------------------------------------------ a request's history

    # The types of a message's content parts that hold plain text (the others are media, files,
    # tool calls and results, thinking).
    text_part_types: ClassVar[frozenset[str]]

    @abstractmethod
    def message_calls(self, message: Mapping[str, Any]) -> list[MessageCall]:
        """The tool calls an assistant message holds, in order (a call without an id left out)."""

    @abstractmethod
    def result_ids(self, message: Mapping[str, Any]) -> list[str]:
        """The ids of the calls whose results ``message`` carries."""

    @abstractmethod
    def message_results(self, message: Mapping[str, Any]) -> list[MessageResult]:
        """The tool results ``message`` carries, in order, each with where its content is."""

    # ------------------------------------------------------------------ tool calls

    @abstractmethod
    def tool_calls(self, payload: Mapping[str, Any]) -> list[ToolCall]:
        """Every tool call of an answer, in order."""

    @abstractmethod
    def follow_up_messages(
        self, payload: Mapping[str, Any], served: Sequence[ServedCall]
    ) -> list[dict[str, Any]]:
        """The model's turn (its text and the served calls) and one result per served call."""

    @abstractmethod
    def without_reserved(
        self, payload: dict[str, Any], reserved: Collection[str]
    ) -> dict[str, Any]:
        """The answer with the calls of ``reserved`` tools taken out; a short text saying context
        could not be retrieved, and a plain stop, when nothing else is left."""

    @abstractmethod
    def streamed_call(self, call_id: str, name: str, arguments: str) -> dict[str, Any]:
        """A call assembled from a stream, as a non-streaming answer holds it."""

    @abstractmethod
    def stream_round(
        self, reserved: Collection[str], *, client_wants_usage: bool = True
    ) -> StreamRound:
        """The reader of a stream whose calls of ``reserved`` tools the gateway serves: what
        passes to the client, what is held until the turn ends (``stream_rounds``)."""

    @abstractmethod
    def turn(self, text: str, calls: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """An answer in the non-streaming shape with ``text`` and ``calls``."""

    def summed_usage(self, usages: Sequence[Any]) -> dict[str, Any] | None:
        """The usage of several calls as one ``usage`` object (the last call's other fields
        kept), or None when no call reported any."""
        reported = [usage for usage in usages if isinstance(usage, dict)]
        if not reported:
            return None
        total: dict[str, Any] = dict(reported[-1])
        for name in self.usage_fields:
            counts = [u.get(name) for u in reported]
            numbers = [c for c in counts if isinstance(c, int) and not isinstance(c, bool)]
            if numbers:
                total[name] = sum(numbers)
        return total

    # ------------------------------------------------------------------ usage and errors

    @abstractmethod
    def usage_in_shape(self, usage: ProviderUsage) -> dict[str, int]:
        """``usage`` as the provider's own ``usage`` object."""

    @abstractmethod
    def error_body(
        self, status: int, code: str, message: str, param: str | None = None
    ) -> dict[str, Any]:
        """An error as the provider's clients read it."""

    def error_event(self, body: dict[str, Any]) -> bytes:
        """An error inside a stream (the provider's SDK raises it)."""
        return sse(body)

    # ------------------------------------------------------------------ streams

    @abstractmethod
    def stream_text(self, event: Mapping[str, Any]) -> str | None:
        """The answer's text an event carries."""

    def stream_ends(self, event: Mapping[str, Any]) -> bool:
        """Whether an event (a JSON object) ends the answer; ``[DONE]`` always does."""
        return False

    @abstractmethod
    def answer_output(self, payload: Mapping[str, Any]) -> Any:
        """What of an answer is the model's output (its count is the output's estimate)."""

    def stream_tool_deltas(self, event: Mapping[str, Any]) -> list[ToolDelta]:
        """The pieces of the answer's tool calls an event carries (none by default)."""
        return []

    @abstractmethod
    def streamed_response(
        self, text: str, tool_calls: Sequence[StreamedCall] = ()
    ) -> dict[str, Any]:
        """A stream's answer, assembled, in the non-streaming shape, its tool calls included."""

    # ------------------------------------------------------------------ the kernel's client

    @abstractmethod
    def endpoint(self, base_url: str, *, sdk_base_url: bool = False) -> str:
        """Where a call goes: ``base_url`` is the server's root, or (``sdk_base_url``) what the
        provider's SDK takes as its base URL."""

    @abstractmethod
    def headers(self, api_key: str | None, extra: Mapping[str, str]) -> dict[str, str]:
        """A call's headers: the key where the provider reads it, ``extra`` kept."""

    def chat_request(
        self,
        model: str,
        messages: Messages,
        *,
        json_mode: bool,
        max_tokens: int | None,
        temperature: float = 0,
    ) -> dict[str, Any]:
        """A request asking ``model`` to answer ``messages`` (role and content strings)."""
        fields = self.chat_fields(messages, json_mode=json_mode, max_tokens=max_tokens)
        return {"model": model, "temperature": temperature, **fields}

    @abstractmethod
    def chat_fields(
        self, messages: Messages, *, json_mode: bool, max_tokens: int | None
    ) -> dict[str, Any]:
        """What of such a request the provider shapes its own way: the messages (and where the
        system prompt goes), the output limit, how the answer is asked to be JSON."""

    @abstractmethod
    def answer_text(self, payload: Any) -> str:
        """The text of a non-streaming answer; a ProtocolError when it has none."""


__all__ = [
    "ERROR_TYPES",
    "Messages",
    "ProtocolError",
    "ProtocolName",
    "ProviderProtocol",
    "error_type",
]
