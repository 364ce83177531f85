"""A user's profile attributes, read by every resolve of a route with a profile, are kept per
process by tenant schema and user, and dropped in every process when a profile is written, so a
change is never missed for longer than the database notification's trip.

What is kept is read on connections of their own (outside the test's transaction, where nothing
is kept); every test names a user of its own and removes what it wrote."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_tenants.utils import schema_context

from contextplatform.core import config_cache
from sources.models import UserProfile
from sources.selectors import user_attributes
from sources.services import put_user_profile
from tests.core.test_config_cache import heard_since, outside_the_test_transaction


@pytest.fixture
def user(acme: Any, globex: Any) -> Iterator[str]:
    assert config_cache.wait_until_listening()
    name = f"u_kept_{uuid.uuid4().hex[:10]}"
    yield name
    for schema in ("acme", "globex"):
        in_schema(schema, lambda: UserProfile.objects.filter(user_id=name).delete())


def in_schema(schema: str, work: Any) -> Any:
    def run() -> Any:
        with schema_context(schema):
            return work()

    return outside_the_test_transaction(run)


def written(schema: str, user: str, attributes: dict[str, Any]) -> None:
    clears = config_cache._listener.clears
    in_schema(schema, lambda: put_user_profile(user_id=user, attributes=attributes))
    heard_since(clears)  # the write's notification reached this process's listener


def read(schema: str, user: str) -> tuple[dict[str, Any] | None, int]:
    """The attributes, and how many statements read the profile table for them."""

    def counted() -> tuple[dict[str, Any] | None, int]:
        with CaptureQueriesContext(connection) as captured:
            found = user_attributes(user)
        table = UserProfile._meta.db_table
        return found, sum(table in query["sql"] for query in captured.captured_queries)

    return in_schema(schema, counted)  # type: ignore[no-any-return]


def test_a_profile_is_read_once_then_kept_and_a_write_is_seen_at_once(user: str) -> None:
    written("acme", user, {"plan": "gold"})
    assert read("acme", user) == ({"plan": "gold"}, 1)
    assert read("acme", user) == ({"plan": "gold"}, 0)
    written("acme", user, {"plan": "platinum"})
    assert read("acme", user) == ({"plan": "platinum"}, 1)


def test_no_profile_is_kept_too_until_one_is_written(user: str) -> None:
    assert read("acme", user) == (None, 1)
    assert read("acme", user) == (None, 0)
    written("acme", user, {"plan": "silver"})
    assert read("acme", user) == ({"plan": "silver"}, 1)


def test_a_deleted_profile_is_gone_at_once(user: str) -> None:
    written("acme", user, {"plan": "gold"})
    assert read("acme", user)[0] == {"plan": "gold"}
    clears = config_cache._listener.clears
    in_schema("acme", lambda: UserProfile.objects.filter(user_id=user).delete())
    heard_since(clears)
    assert read("acme", user) == (None, 1)


def test_another_tenant_s_user_of_the_same_id_is_never_served_from_the_kept_copy(
    user: str,
) -> None:
    written("acme", user, {"tenant": "acme"})
    written("globex", user, {"tenant": "globex"})
    assert read("acme", user)[0] == {"tenant": "acme"}
    assert read("globex", user)[0] == {"tenant": "globex"}
    assert read("acme", user) == ({"tenant": "acme"}, 0)
    assert read("globex", user) == ({"tenant": "globex"}, 0)


def test_a_caller_changing_what_it_was_given_changes_nothing_kept(user: str) -> None:
    written("acme", user, {"tags": ["a"]})
    first, _ = read("acme", user)
    assert first is not None
    first["tags"].append("b")
    first["plan"] = "changed"
    assert read("acme", user) == ({"tags": ["a"]}, 0)
