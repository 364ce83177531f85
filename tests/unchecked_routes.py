"""A route saved as one whose collection went away after it was saved: validated, but without the
save-time check that the collections it names exist (``routes.services.check_collections``), for
the tests of what resolve does with a missing collection (and of a locked collection table, where
creating the collection would itself hold a lock on the table the test locks)."""

from __future__ import annotations

from typing import Any

from django_tenants.utils import schema_context

from contextplatform.routes.configuration.schema import validate_route_spec
from contextplatform.routes.services import create_route


def save_unchecked(schema: str, route: dict[str, Any]) -> None:
    with schema_context(schema):
        create_route(spec=validate_route_spec(route))
