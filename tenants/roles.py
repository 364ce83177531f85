"""The tenant admin's roles: one Django group per role in every tenant schema, with the model
permissions listed here. The code is the source of truth: every migration of a tenant schema
(``migrate_schemas``, and so every tenant creation) sets each group's permissions to exactly these.

Permissions are named ``app_label.action_model`` strings; this module imports no other app.
"""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig, apps
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Q

ALL = ("view", "add", "change", "delete")
VIEW = ("view",)


def grant(actions: tuple[str, ...], *models: str) -> set[str]:
    """``grant(ALL, "routing.route")`` → {"routing.view_route", "routing.add_route", ...}."""
    granted = set()
    for model in models:
        app_label, model_name = model.split(".")
        granted.update(f"{app_label}.{action}_{model_name}" for action in actions)
    return granted


# Deployments (upstream models) and MCP servers are configuration too; their keys and header
# values are write-only on every page.
CONFIGURATION = (
    "routing.route",
    "routing.recipe",
    "routing.tenantdefaults",
    "deployments.deployment",
    "sources.mcpserver",
)

# Operators configure routes, deployments and the data sources read (profiles, sessions, knowledge base).
# They may read replay records: a replay is how an operator sees what a route actually did, and
# look up a user's memories (what a memory source injected), while only memory managers edit them.
# Ingestion jobs are written by ingestion itself, so operators only watch them.
OPERATOR = (
    grant(ALL, *CONFIGURATION)
    | grant(
        ALL,
        "sources.userprofile",
        "sources.chatsession",
        "sources.chatmessage",
        "sources.collection",
        "sources.document",
    )
    | grant(VIEW, "routing.replayrecord", "sources.ingestionjob", "memory.memory")
)

# Auditors read what was decided and the configuration that decided it, never users' stored data
# (profiles, sessions, documents, memories) and never anything writable.
AUDITOR = grant(
    VIEW, "routing.replayrecord", *CONFIGURATION, "sources.collection", "sources.ingestionjob"
)

MEMORY_MANAGER = grant(ALL, "memory.memory")

ROLES: dict[str, frozenset[str]] = {
    "operator": frozenset(OPERATOR),
    "auditor": frozenset(AUDITOR),
    "memory_manager": frozenset(MEMORY_MANAGER),
}


class UnknownRoleError(ValueError):
    pass


def role_group(role: str, using: str = DEFAULT_DB_ALIAS) -> Group:
    """The role's group in the current schema (created with its permissions if missing)."""
    if role not in ROLES:
        raise UnknownRoleError(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    group = Group.objects.using(using).filter(name=role).first()
    if group is None:
        ensure_role_groups(using)
        group = Group.objects.using(using).get(name=role)
    return group


def permissions_named(names: frozenset[str], using: str) -> list[Permission]:
    wanted = Q(pk__in=[])
    for name in names:
        app_label, codename = name.split(".")
        wanted |= Q(content_type__app_label=app_label, codename=codename)
    found = list(Permission.objects.using(using).filter(wanted).select_related("content_type"))
    missing = names - {f"{p.content_type.app_label}.{p.codename}" for p in found}
    if missing:
        raise ImproperlyConfigured(f"roles name unknown permissions: {', '.join(sorted(missing))}")
    return found


def ensure_role_groups(using: str = DEFAULT_DB_ALIAS) -> None:
    """Create or update every role's group in the current schema (idempotent)."""
    for role, names in ROLES.items():
        group, _ = Group.objects.using(using).get_or_create(name=role)
        group.permissions.set(permissions_named(names, using))


def last_app_with_models() -> AppConfig:
    return [config for config in apps.get_app_configs() if config.models_module is not None][-1]


def create_role_groups_after_migrate(
    sender: AppConfig, using: str = DEFAULT_DB_ALIAS, **kwargs: Any
) -> None:
    """post_migrate handler: runs once per migrated tenant schema, after the last app's signal.

    Django sends post_migrate once per app; auth creates each app's permissions in its own handler,
    which for the last app may run after this one, so the permissions are created here first."""
    from django.contrib.auth.management import create_permissions
    from django_tenants.utils import get_public_schema_name

    schema = getattr(connections[using], "schema_name", None)
    if sender is not last_app_with_models() or schema in (None, get_public_schema_name()):
        return

    for app_config in apps.get_app_configs():
        create_permissions(app_config, verbosity=0, using=using)
    ensure_role_groups(using)
