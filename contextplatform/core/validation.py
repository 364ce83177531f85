"""Typed validation of request bodies with pydantic; the first error becomes the envelope."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from contextplatform.core.errors import ApiError, together

ModelT = TypeVar("ModelT", bound=BaseModel)

_MESSAGES = {
    "extra_forbidden": "unknown field",
    "missing": "field required",
    # pydantic names the model's class ("a valid dictionary or instance of ..."): ours, not the
    # caller's vocabulary.
    "model_type": "Input should be an object",
}


_BRANCH_TYPES = {"str", "int", "float", "bool", "bytes", "list", "dict", "none"}


def _is_branch_tag(part: Any) -> bool:
    """A union member's name in a location, e.g. ``str`` or ``list[dict[str,any]]``, or a
    discriminated member's tag, written ``<text>`` for this (protocols/provider_shapes.py)."""
    text = str(part)
    internal = text.startswith(("function-", "tagged-union", "literal[")) or (
        text.startswith("<") and text.endswith(">")
    )
    return internal or text in _BRANCH_TYPES or "[" in text


def location_path(loc: tuple[Any, ...], prefix: str = "") -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _is_branch_tag(part):
            continue  # pydantic's internal union branch names say nothing to the caller
        else:
            path = f"{path}.{part}" if path else str(part)
    return path


def describe(error: ValidationError, prefix: str = "") -> tuple[str, str | None]:
    return describe_one(error.errors(include_url=False)[0], prefix)


def describe_one(detail: ErrorDetails, prefix: str = "") -> tuple[str, str | None]:
    param = location_path(tuple(detail["loc"]), prefix) or None
    message = _MESSAGES.get(detail["type"], detail["msg"])
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return (f"{param}: {message}" if param else message), param


def validation_error(error: ValidationError, prefix: str = "") -> ApiError:
    """The first error for the envelope; the first error of every other field in ``also`` (a
    union reports one error per member: the first says enough)."""
    found: dict[str | None, ApiError] = {}
    for detail in error.errors(include_url=False):
        message, param = describe_one(detail, prefix)
        found.setdefault(param, ApiError("invalid_request", message, status=400, param=param))
    return together(list(found.values()))


def parse(
    model: type[ModelT], data: Any, *, prefix: str = "", context: dict[str, Any] | None = None
) -> ModelT:
    """Validate ``data`` against ``model`` or raise the API's ``invalid_request``."""
    if not isinstance(data, dict):
        raise ApiError(
            "invalid_request",
            f"{prefix + ': ' if prefix else ''}expected a JSON object",
            param=prefix or None,
        )
    try:
        return model.model_validate(
            data, strict=True, context=context
        )  # JSON has types: "10" is no integer
    except ValidationError as error:
        raise validation_error(error, prefix) from None
