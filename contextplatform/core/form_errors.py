"""Where a validation error (an ApiError naming a field such as ``context.budget.max_tokens``)
belongs on an admin form, and its message in the form's own words."""

from __future__ import annotations

import re
from collections.abc import Callable

from contextplatform.core.errors import ApiError

_LEADING_NAME = re.compile(r"([A-Za-z_]+)\b")


def error_text(error: ApiError) -> str:
    """The message without its leading ``param:`` (the form shows it next to the field)."""
    if error.param and error.message.startswith(f"{error.param}: "):
        return error.message[len(error.param) + 2 :]
    return error.message


def is_under(param: str, base: str) -> bool:
    return param == base or param.startswith((f"{base}.", f"{base}["))


def below(param: str, base: str, text: str) -> str:
    """``text`` prefixed by where ``param`` lies below ``base``, if anywhere (``targets.rag.mode:
    ...`` for an error in a compress JSON field)."""
    rest = param[len(base) :].lstrip(".") if is_under(param, base) else param
    return f"{rest}: {text}" if rest else text


def leading_name(text: str) -> str | None:
    match = _LEADING_NAME.match(text)
    return match.group(1) if match else None


def refined_param(param: str, text: str, known: Callable[[str], bool]) -> str:
    """A check over a whole object names its field in words (``max_tokens must be ...`` under
    ``context.budget``): point at that field when the form has it."""
    name = leading_name(text)
    if name is not None and known(f"{param}.{name}"):
        return f"{param}.{name}"
    return param
