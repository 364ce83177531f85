"""Each provider's chat request in full (pydantic): OpenAI Chat Completions messages and their
content parts and tool calls, Anthropic Messages system, messages and content blocks. A body that
breaks its provider's shape is refused with a 400 naming the field (``messages[1].content[0].text``)
before anything reaches the model, instead of the model's own 400 after the context was built and
the budget held.

What each shape documents is checked; what it does not name passes on as it is (``extra`` allowed:
the providers add fields, and a block or part type this module does not know is checked for its
``type`` only), so the official clients' bodies are never refused for something newer than this
module. Union members are told apart by a discriminator, so an error names the member's field, not
every member of the union; the tags are written ``<...>`` so the error's path leaves them out
(``core/validation.py``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
)

OTHER = "<other>"


class Passthrough(BaseModel):
    model_config = ConfigDict(extra="allow")


def tag(name: str) -> str:
    return f"<{name}>"


def _by_type(known: frozenset[str]) -> Any:
    """The discriminator of a union of typed members: the member's ``type`` when this module
    knows it, else the catch-all member (checked for a ``type`` string only)."""

    def discriminate(value: Any) -> str:
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        return tag(kind) if isinstance(kind, str) and kind in known else OTHER

    return Discriminator(discriminate)


def _text_or_list(value: Any) -> str:
    return tag("text") if isinstance(value, str) else tag("list")


class OtherPart(Passthrough):
    type: str


# --- OpenAI Chat Completions --------------------------------------------------------------------


class OpenAITextPart(Passthrough):
    type: Literal["text"]
    text: str


class OpenAIImageURL(Passthrough):
    url: str


class OpenAIImagePart(Passthrough):
    type: Literal["image_url"]
    image_url: OpenAIImageURL


class OpenAIAudioPart(Passthrough):
    type: Literal["input_audio"]
    input_audio: dict[str, Any]


class OpenAIFilePart(Passthrough):
    type: Literal["file"]
    file: dict[str, Any]


class OpenAIRefusalPart(Passthrough):
    type: Literal["refusal"]
    refusal: str


OPENAI_PARTS = frozenset({"text", "image_url", "input_audio", "file", "refusal"})
OpenAIPart = Annotated[
    Annotated[OpenAITextPart, Tag(tag("text"))]
    | Annotated[OpenAIImagePart, Tag(tag("image_url"))]
    | Annotated[OpenAIAudioPart, Tag(tag("input_audio"))]
    | Annotated[OpenAIFilePart, Tag(tag("file"))]
    | Annotated[OpenAIRefusalPart, Tag(tag("refusal"))]
    | Annotated[OtherPart, Tag(OTHER)],
    _by_type(OPENAI_PARTS),
]
OpenAIContent = Annotated[
    Annotated[str, Tag(tag("text"))] | Annotated[list[OpenAIPart], Tag(tag("list"))],
    Discriminator(_text_or_list),
]


class OpenAIFunction(Passthrough):
    name: str
    arguments: str


class OpenAIFunctionCall(Passthrough):
    id: str
    type: Literal["function"] = "function"
    function: OpenAIFunction


class OpenAICustom(Passthrough):
    name: str
    input: str


class OpenAICustomCall(Passthrough):
    id: str
    type: Literal["custom"]
    custom: OpenAICustom


def _call_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return tag("custom") if kind == "custom" else tag("function")


OpenAIToolCall = Annotated[
    Annotated[OpenAIFunctionCall, Tag(tag("function"))]
    | Annotated[OpenAICustomCall, Tag(tag("custom"))],
    Discriminator(_call_kind),
]


class OpenAIMessage(Passthrough):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: OpenAIContent | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[OpenAIToolCall] | None = None


class OpenAISystemMessage(OpenAIMessage):
    role: Literal["system", "developer"]
    content: OpenAIContent


class OpenAIUserMessage(OpenAIMessage):
    role: Literal["user"]
    content: OpenAIContent


class OpenAIToolMessage(OpenAIMessage):
    role: Literal["tool"]
    content: OpenAIContent
    tool_call_id: str


class OpenAIFunctionMessage(OpenAIMessage):
    role: Literal["function"]
    name: str


OPENAI_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "function",
}


def _openai_role(value: Any) -> str:
    role = value.get("role") if isinstance(value, dict) else getattr(value, "role", None)
    return tag(OPENAI_ROLES.get(role, "any")) if isinstance(role, str) else tag("any")


OpenAIAnyMessage = Annotated[
    Annotated[OpenAISystemMessage, Tag(tag("system"))]
    | Annotated[OpenAIUserMessage, Tag(tag("user"))]
    | Annotated[OpenAIMessage, Tag(tag("assistant"))]
    | Annotated[OpenAIToolMessage, Tag(tag("tool"))]
    | Annotated[OpenAIFunctionMessage, Tag(tag("function"))]
    | Annotated[OpenAIMessage, Tag(tag("any"))],  # an unknown role: refused at ``role``
    Discriminator(_openai_role),
]


class OpenAIStreamOptions(Passthrough):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class OpenAIToolChoice(Passthrough):
    type: str


class OpenAIResponseFormat(Passthrough):
    type: str


OpenAIStop = Annotated[
    Annotated[str, Tag(tag("text"))] | Annotated[list[str], Tag(tag("list"))],
    Discriminator(_text_or_list),
]


class OpenAIChatRequest(Passthrough):
    """The fields the gateway reads or sends on, with the types and ranges OpenAI enforces (its
    API reference, the ``openai`` client's ``completion_create_params``); ``null`` is "unset",
    as OpenAI takes it."""

    model: str | None = None
    messages: list[OpenAIAnyMessage] = Field(min_length=1)
    stream: bool | None = None
    stream_options: OpenAIStreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int | None = Field(default=None, ge=1, le=128)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    seed: int | None = None
    stop: OpenAIStop | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | OpenAIToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: OpenAIResponseFormat | None = None
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None

    @field_validator("stream_options")
    @classmethod
    def stream_options_need_a_stream(
        cls, options: OpenAIStreamOptions | None, info: ValidationInfo
    ) -> OpenAIStreamOptions | None:
        """OpenAI refuses them on a call that does not stream (``stream`` is checked first)."""
        if options is not None and info.data.get("stream") is not True:
            raise ValueError("only allowed when stream is true")
        return options


# --- Anthropic Messages -------------------------------------------------------------------------


class AnthropicTextBlock(Passthrough):
    type: Literal["text"]
    text: str


class AnthropicSource(Passthrough):
    type: str


class AnthropicImageBlock(Passthrough):
    type: Literal["image"]
    source: AnthropicSource


class AnthropicDocumentBlock(Passthrough):
    type: Literal["document"]
    source: AnthropicSource


class AnthropicToolUseBlock(Passthrough):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


RESULT_BLOCKS = frozenset({"text", "image", "document"})
AnthropicResultBlock = Annotated[
    Annotated[AnthropicTextBlock, Tag(tag("text"))]
    | Annotated[AnthropicImageBlock, Tag(tag("image"))]
    | Annotated[AnthropicDocumentBlock, Tag(tag("document"))]
    | Annotated[OtherPart, Tag(OTHER)],
    _by_type(RESULT_BLOCKS),
]
AnthropicResultContent = Annotated[
    Annotated[str, Tag(tag("text"))] | Annotated[list[AnthropicResultBlock], Tag(tag("list"))],
    Discriminator(_text_or_list),
]


class AnthropicToolResultBlock(Passthrough):
    type: Literal["tool_result"]
    tool_use_id: str
    content: AnthropicResultContent | None = None
    is_error: bool | None = None


class AnthropicThinkingBlock(Passthrough):
    type: Literal["thinking"]
    thinking: str
    signature: str


class AnthropicRedactedThinkingBlock(Passthrough):
    type: Literal["redacted_thinking"]
    data: str


ANTHROPIC_BLOCKS = frozenset(
    {"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"}
)
AnthropicBlock = Annotated[
    Annotated[AnthropicTextBlock, Tag(tag("text"))]
    | Annotated[AnthropicImageBlock, Tag(tag("image"))]
    | Annotated[AnthropicDocumentBlock, Tag(tag("document"))]
    | Annotated[AnthropicToolUseBlock, Tag(tag("tool_use"))]
    | Annotated[AnthropicToolResultBlock, Tag(tag("tool_result"))]
    | Annotated[AnthropicThinkingBlock, Tag(tag("thinking"))]
    | Annotated[AnthropicRedactedThinkingBlock, Tag(tag("redacted_thinking"))]
    | Annotated[OtherPart, Tag(OTHER)],
    _by_type(ANTHROPIC_BLOCKS),
]
AnthropicContent = Annotated[
    Annotated[str, Tag(tag("text"))] | Annotated[list[AnthropicBlock], Tag(tag("list"))],
    Discriminator(_text_or_list),
]
AnthropicSystem = Annotated[
    Annotated[str, Tag(tag("text"))] | Annotated[list[AnthropicTextBlock], Tag(tag("list"))],
    Discriminator(_text_or_list),
]


class AnthropicMessage(Passthrough):
    role: Literal["user", "assistant"]
    content: AnthropicContent


class AnthropicMetadata(Passthrough):
    user_id: str | None = None


class AnthropicToolChoice(Passthrough):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class AnthropicThinking(Passthrough):
    type: str
    budget_tokens: int | None = Field(default=None, ge=1)


class AnthropicChatRequest(Passthrough):
    """The fields the gateway reads or sends on, with the types and ranges Anthropic enforces
    (its API reference, the ``anthropic`` client's ``message_create_params``). ``max_tokens`` is
    optional here: the resolve rewrites a body its caller completes before sending it."""

    model: str | None = None
    system: AnthropicSystem | None = None
    messages: list[AnthropicMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    stream: bool | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    stop_sequences: list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: AnthropicToolChoice | None = None
    thinking: AnthropicThinking | None = None
    metadata: AnthropicMetadata | None = None


class AnthropicCallRequest(AnthropicChatRequest):
    """A body the gateway sends on to Anthropic as it is: the Messages API requires
    ``max_tokens``, so a body without it is refused here rather than by Anthropic."""

    max_tokens: int = Field(ge=1)
