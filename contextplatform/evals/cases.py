"""What an evaluation set is: the body of ``PUT /api/v1/routes/{name}/evals`` (and the admin's JSON),
validated into cases, each with what it expects to see kept."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from contextplatform.core.errors import invalid_request
from contextplatform.core.validation import parse

MAX_CASES = 500
SLUG = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"


class Expect(BaseModel):
    model_config = ConfigDict(extra="forbid")

    documents: list[str] = Field(default_factory=list, max_length=100)
    memories_containing: list[str] = Field(default_factory=list, max_length=100)
    text_containing: list[str] = Field(default_factory=list, max_length=100)

    @field_validator("documents", "memories_containing", "text_containing")
    @classmethod
    def _non_empty(cls, values: list[str]) -> list[str]:
        for value in values:
            if not value.strip():
                raise ValueError("must not hold an empty string")
            if len(value) > 1000:
                raise ValueError("each entry holds at most 1000 characters")
        return values

    @model_validator(mode="after")
    def _something(self) -> Expect:
        if not (self.documents or self.memories_containing or self.text_containing):
            raise ValueError("name at least one of documents, memories_containing, text_containing")
        return self

    def as_dict(self) -> dict[str, list[str]]:
        return {key: value for key, value in self.model_dump().items() if value}


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=SLUG)
    query: str = Field(max_length=20_000)
    user: str | None = Field(default=None, max_length=200)
    session: str | None = Field(default=None, max_length=200)
    expect: Expect

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    def as_dict(self) -> dict[str, Any]:
        """The case as it reads back (``EvalCase.as_dict``)."""
        case: dict[str, Any] = {"id": self.id, "query": self.query}
        if self.user:
            case["user"] = self.user
        if self.session:
            case["session"] = self.session
        return {**case, "expect": self.expect.as_dict()}


class CaseSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cases: list[Case] = Field(max_length=MAX_CASES)


def parse_cases(data: Any) -> list[Case]:
    """The cases of a body, or a 400 naming the first field at fault (a repeated id included)."""
    cases = parse(CaseSet, data).cases
    seen: set[str] = set()
    for index, case in enumerate(cases):
        if case.id in seen:
            raise invalid_request(
                f"cases[{index}].id: {case.id!r} is used by an earlier case; ids are unique",
                f"cases[{index}].id",
            )
        seen.add(case.id)
    return cases
