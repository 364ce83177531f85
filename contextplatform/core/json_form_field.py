"""The admin's JSON fields under the boundary's limits (core/text_limits.py): nesting past 64
levels, a number jsonb and the renderer do not round-trip (NaN, an infinity, an integer past
64 bits, ``1e20``) and spoilt text are a form error naming where they are, as the REST API's 400
names them; never a row that fails every later read, nor a RecursionError."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput

from contextplatform.core.text_limits import DEPTH_PROBLEM, find_bad_value


class BoundedJSONField(forms.JSONField):
    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:  # shown again as it was typed, beside the error to_python gives
            return InvalidJSONInput(data)

    def to_python(self, value: Any) -> Any:
        try:
            converted = super().to_python(value)
        except RecursionError:  # the standard library's parser, thousands of levels deep
            raise ValidationError(DEPTH_PROBLEM, code="invalid") from None
        if isinstance(converted, dict | list) and (found := find_bad_value(converted)):
            raise ValidationError(found.message, code="invalid")
        return converted


__all__ = ["BoundedJSONField"]
