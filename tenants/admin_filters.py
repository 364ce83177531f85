"""Free-text list filters of the tenant admin's lists (replay records, memories): an exact user
id, and a time range of creation (from / to)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, time, timedelta
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime


class InputFilter(admin.ListFilter):
    """A text box in the filter sidebar; submitting it keeps the other filters."""

    template = "admin/input_filter.html"
    parameter_name: str = ""
    placeholder: str = ""

    def __init__(self, request: HttpRequest, params: dict[str, Any], model: Any, model_admin: Any):
        super().__init__(request, params, model, model_admin)
        if self.parameter_name in params:
            self.used_parameters[self.parameter_name] = params.pop(self.parameter_name)[-1]

    def value(self) -> str:
        return (self.used_parameters.get(self.parameter_name) or "").strip()

    def has_output(self) -> bool:
        return True

    def expected_parameters(self) -> list[str]:
        return [self.parameter_name]

    def choices(self, changelist: ChangeList) -> Iterator[dict[str, Any]]:
        others = changelist.get_filters_params()
        others.pop(self.parameter_name, None)
        yield {
            "value": self.value(),
            "placeholder": self.placeholder,
            "hidden": [(name, value) for name, values in others.items() for value in values],
            "clear": changelist.get_query_string(remove=[self.parameter_name]),
        }

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if not value:
            return queryset
        try:
            return self.filter(queryset, value)
        except ValidationError as error:  # the changelist answers with its "?e=1" error page
            raise IncorrectLookupParameters(error) from error

    def filter(self, queryset: QuerySet, value: str) -> QuerySet:
        raise NotImplementedError


class UserIdFilter(InputFilter):
    title = "user id"
    parameter_name = "user"
    placeholder = "exact user id"

    def filter(self, queryset: QuerySet, value: str) -> QuerySet:
        return queryset.filter(user_id=value)


def parse_moment(value: str, *, end_of_day: bool) -> datetime:
    """``2026-01-31`` or an ISO date-time; a bare date ``to`` means the end of that day."""
    day = parse_date(value)
    if day is not None:
        moment = datetime.combine(day + timedelta(days=1) if end_of_day else day, time.min)
    else:
        moment = parse_datetime(value)
        if moment is None:
            raise ValidationError(f"{value!r} is not a date (YYYY-MM-DD) or an ISO date-time")
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment


class CreatedFromFilter(InputFilter):
    title = "time from"
    parameter_name = "from"
    placeholder = "YYYY-MM-DD[ HH:MM]"

    def filter(self, queryset: QuerySet, value: str) -> QuerySet:
        return queryset.filter(created_at__gte=parse_moment(value, end_of_day=False))


class CreatedToFilter(InputFilter):
    title = "time to"
    parameter_name = "to"
    placeholder = "YYYY-MM-DD[ HH:MM]"

    def filter(self, queryset: QuerySet, value: str) -> QuerySet:
        if parse_date(value) is not None:  # up to the end of that day
            return queryset.filter(created_at__lt=parse_moment(value, end_of_day=True))
        return queryset.filter(created_at__lte=parse_moment(value, end_of_day=False))
