"""Where a read that tolerates lag goes: the read replica (``DATABASE_REPLICA_URL``) when one is
configured, the primary otherwise. The one place that decides; selectors call ``lag_tolerant()``
and read with ``.using(alias)``.

django-tenants sets the request's tenant on ``default`` only (its middleware calls
``connection.set_tenant``); the replica's connection is a second wrapper of the same tenant
engine, so its schema is set here, from ``default``'s, before each read: a tenant never reads
another tenant's rows through the replica whichever tenant the connection served before.

Reads that must see a write just made (a route read back after its PUT, a record right after its
call) never come here: they stay on ``default``.
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections

REPLICA = "replica"


def replica_configured() -> bool:
    return REPLICA in connections.settings


def lag_tolerant() -> str:
    """The alias for a read that may be a moment behind the primary, its schema the request's."""
    if not replica_configured():
        return DEFAULT_DB_ALIAS
    follow_tenant(connections[REPLICA])
    return REPLICA


def follow_tenant(replica: Any) -> None:
    """The replica's connection searches the schema ``default`` searches now."""
    schema = connection.schema_name
    tenant = getattr(connection, "tenant", None)
    if replica.schema_name == schema and getattr(replica, "tenant", None) is tenant:
        return  # already the request's: no new SET
    if tenant is not None and tenant.schema_name == schema:
        replica.set_tenant(tenant, connection.include_public_schema)
    else:
        replica.set_schema(schema, connection.include_public_schema)


class ReplicaRouter:
    """Nothing migrates through the replica: it is the primary's copy. Reads are routed by the
    selectors themselves (``lag_tolerant``), never implicitly."""

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return False if db == REPLICA else None


__all__ = ["REPLICA", "ReplicaRouter", "follow_tenant", "lag_tolerant", "replica_configured"]
