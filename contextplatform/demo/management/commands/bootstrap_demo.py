from __future__ import annotations

import json
import os
import secrets
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django_tenants.utils import schema_context

from contextplatform.core.errors import ApiError
from contextplatform.demo.credentials import (
    Stored,
    credentials_file,
    database_identity,
    read_stored,
    rotation_asked,
    write_stored,
)
from contextplatform.demo.defaults import (
    DEMO_COLLECTION,
    DEMO_DOCUMENTS,
    DEMO_EVAL_CASES,
    DEMO_MANUALS,
    DEMO_MANUALS_COLLECTION,
    DEMO_MEMORIES,
    DEMO_RESOLVE_BODY,
    DEMO_USER,
    SUPPORT_ROUTE,
    anthropic_snippet,
    demo_allowlist_entries,
    demo_deployment,
    demo_provider,
    gateway_curl,
    openai_snippet,
)
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.services import parse_deployment, upsert_deployment
from contextplatform.evals.cases import parse_cases
from contextplatform.evals.selectors import cases_of
from contextplatform.evals.services import replace_cases, run_changed
from contextplatform.routes.configuration.schema import validate_route_spec
from contextplatform.routes.models import Route
from contextplatform.routes.services import upsert_route
from memory.models import Memory
from memory.services import create_memory
from sources.embedding import get_embedder
from sources.ingestion import DocumentInput, create_collection, submit_documents
from sources.models import ChatSession, Collection, IngestionJob
from sources.services import append_session_messages, put_user_profile
from sources.tasks import enqueue_ingestion
from tenants.admin_users import create_admin_user
from tenants.models import ApiKey, Tenant
from tenants.roles import ROLES
from tenants.scopes import ALL_SCOPES
from tenants.services import (
    TenantError,
    create_tenant,
    hash_key,
    issue_api_key,
    revoke_api_key,
    set_outbound_allowlist,
)

DEMO_TENANT = "demo"
DEMO_KEY_NAME = "make-run"
MIN_CHOSEN_KEY_CHARS = 20
REAL_KEY_HINT = (
    "A key of your own, with only the scopes it needs: .venv/bin/python manage.py "
    "create_api_key demo --scopes resolve,memory.read"
)


def refresh_demo_admins(tenant: Tenant, password: str) -> None:
    """One admin user per role, named after it, all with ``password`` (printed, like the key);
    a user whose password is already that one is left as it is."""
    users = get_user_model().objects
    for role in ROLES:
        with schema_context(tenant.schema_name):
            existing = users.filter(username=role).first()
            if existing is not None:
                if not existing.check_password(password):
                    existing.set_password(password)
                    existing.save(update_fields=["password"])
                continue
        try:
            create_admin_user(tenant=tenant, username=role, password=password, role=role)
        except TenantError as error:  # a DEMO_ADMIN_PASSWORD the validators refuse
            raise CommandError(f"cannot create the demo admin {role!r}: {error}") from None


def chosen(variable: str) -> str | None:
    value = os.environ.get(variable, "").strip()
    return value or None


def checked_chosen_key(plain: str) -> str:
    if len(plain) < MIN_CHOSEN_KEY_CHARS or any(c.isspace() for c in plain):
        raise CommandError(
            f"DEMO_API_KEY must be at least {MIN_CHOSEN_KEY_CHARS} characters with no spaces"
        )
    return plain


def checked_chosen_password(password: str) -> str:
    try:
        validate_password(password)
    except ValidationError as error:
        raise CommandError(f"DEMO_ADMIN_PASSWORD: {' '.join(error.messages)}") from None
    return password


def live_demo_key(tenant: Tenant, plain: str | None) -> ApiKey | None:
    """The tenant's active key whose plain text is ``plain``, if the database still has it."""
    if not plain:
        return None
    return ApiKey.objects.filter(
        tenant=tenant, key_hash=hash_key(plain), revoked_at__isnull=True
    ).first()


def demo_key(tenant: Tenant, wanted: str | None, *, chosen: bool) -> str:
    """The demo key: ``wanted`` (the key kept in the file, or ``DEMO_API_KEY`` when ``chosen``)
    when the database has it as an active key of the tenant (its scopes brought up to every
    scope); a chosen key it does not have is registered, a kept one replaced by a new key.
    Other keys of earlier starts are revoked, so one demo key works at a time."""
    current = live_demo_key(tenant, wanted)
    plain = wanted
    if current is None:
        if chosen and wanted and ApiKey.objects.filter(key_hash=hash_key(wanted)).exists():
            # Revoked, or another tenant's: never brought back or shared.
            raise CommandError("DEMO_API_KEY is a revoked key or another tenant's key")
        # A kept key the database does not have (wiped, or rotated elsewhere) is not trusted:
        # a new one replaces it. A chosen one is registered as it is.
        issued = issue_api_key(
            tenant=tenant, name=DEMO_KEY_NAME, plain_key=wanted if chosen else None
        )
        current, plain = issued.api_key, issued.plain_key
    elif sorted(current.scopes) != sorted(ALL_SCOPES):
        current.scopes = list(ALL_SCOPES)
        current.save(update_fields=["scopes"])
    for old in ApiKey.objects.filter(tenant=tenant, name=DEMO_KEY_NAME, revoked_at__isnull=True):
        if old.pk != current.pk:
            revoke_api_key(api_key=old)
    assert plain is not None
    return plain


def seed_demo_memories() -> int:
    """The demo user's memories, each written once: a start that finds its text leaves it."""
    embedder = None
    created = 0
    for memory in DEMO_MEMORIES:
        if Memory.objects.filter(user_id=DEMO_USER, content=memory["content"]).exists():
            continue
        embedder = embedder or get_embedder()
        create_memory(
            user_id=DEMO_USER,
            content=memory["content"],
            kind=memory.get("kind", "fact"),
            metadata={"demo": True},
            embedder=embedder,
            observed_at=datetime.fromisoformat(memory["observed_at"]),
        )
        created += 1
    return created


def seed_demo_eval_cases(route: Route) -> None:
    """The route's evaluation set, written when it differs, then run unless its latest run
    measured the route as it is now (a restart adds no cases and no second run)."""
    cases = parse_cases({"cases": DEMO_EVAL_CASES})
    if cases_of(route) != [case.as_dict() for case in cases]:
        replace_cases(route=route, cases=cases)
    run_changed([route.pk])


def allow_outbound(tenant: Tenant, entries: list[str]) -> None:
    """The demo tenant's outbound allow-list is what its deployment needs and nothing wider (the
    gateway's guard refuses loopback and private addresses otherwise): ``entries`` replace what
    an earlier start granted, the whole loopback host of older versions included."""
    if tenant.outbound_allowlist == entries:
        return
    try:
        set_outbound_allowlist(tenant=tenant, entries=entries)
    except TenantError as error:  # e.g. an OPENAI_BASE_URL whose host is not a host name
        raise CommandError(f"cannot allow the demo deployment's address: {error}") from None


def save_demo_deployment(data: dict[str, Any]) -> Deployment:
    """The demo deployment as ``data`` says, its key replaced (or cleared for the stand-in)."""
    try:
        spec = parse_deployment(data, prefix="demo deployment")
    except ApiError as error:  # e.g. an OPENAI_BASE_URL that is not a URL
        raise CommandError(f"cannot create the demo deployment: {error.message}") from None
    return upsert_deployment(spec=spec, api_key=spec.api_key)


def describe_deployment(deployment: Deployment, provider: str) -> str:
    """One line on where the demo's calls go; never the key itself."""
    if provider == "standin":
        return (
            f"Demo deployment {deployment.name!r}: the local stand-in model at "
            f"{deployment.base_url} (not a real LLM: it quotes the context it receives; make run "
            "starts it). Set OPENAI_API_KEY or ANTHROPIC_API_KEY for a real model."
        )
    variable = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
    return (
        f"Demo deployment {deployment.name!r}: {deployment.protocol} model {deployment.model!r} "
        f"at {deployment.base_url} (key from {variable}, stored encrypted)."
    )


class Command(BaseCommand):
    @staticmethod
    def ingest(name: str, description: str, documents: list[dict[str, Any]]) -> IngestionJob:
        collection = Collection.objects.filter(name=name).first() or create_collection(
            name=name, description=description
        )
        job = submit_documents(
            collection=collection,
            documents=[
                DocumentInput(id=d["id"], title=d["title"], text=d["text"], metadata=d["metadata"])
                for d in documents
            ],
        )
        enqueue_ingestion(job)
        job.refresh_from_db()
        return job

    def ingest_demo_documents(self) -> IngestionJob:
        self.ingest(DEMO_MANUALS_COLLECTION, "Demo product manuals", DEMO_MANUALS)
        return self.ingest(DEMO_COLLECTION, "Demo support knowledge base", DEMO_DOCUMENTS)

    help = (
        "Create (or refresh) the demo tenant, its support route and sample data; print its key "
        "and admin password, kept across starts (--rotate or DEMO_ROTATE=1 replaces both)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rotate",
            action="store_true",
            help="replace the kept demo key and admin password (as DEMO_ROTATE=1 does)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        connection.set_schema_to_public()  # tenants are created from the public schema only
        tenant = Tenant.objects.filter(schema_name=DEMO_TENANT).first()
        if tenant is None:
            tenant, _ = create_tenant(name=DEMO_TENANT, capture_content=True)
        elif not tenant.capture_content:
            # The replay records keep the requests, so the demo's records can be read and rerun.
            tenant.capture_content = True
            tenant.save(update_fields=["capture_content"])
        path = credentials_file(Path(settings.BASE_DIR), os.environ)
        database = database_identity(connection.settings_dict)
        rotate = bool(options.get("rotate")) or rotation_asked(os.environ)
        stored = Stored(None, None) if rotate else read_stored(path, database)
        chosen_key = chosen("DEMO_API_KEY")
        chosen_password = chosen("DEMO_ADMIN_PASSWORD")
        key = demo_key(
            tenant,
            checked_chosen_key(chosen_key) if chosen_key else stored.api_key,
            chosen=chosen_key is not None,
        )
        password = (
            checked_chosen_password(chosen_password)
            if chosen_password
            else stored.admin_password or secrets.token_urlsafe(12)
        )
        refresh_demo_admins(tenant, password)
        write_stored(path, database, tenant.schema_name, Stored(key, password))
        provider = demo_provider(os.environ)
        deployment_data = demo_deployment(os.environ)
        allow_outbound(tenant, demo_allowlist_entries(deployment_data))
        with schema_context(tenant.schema_name):
            job = self.ingest_demo_documents()
            deployment = save_demo_deployment(deployment_data)
            route = upsert_route(spec=validate_route_spec(SUPPORT_ROUTE))
            seed_demo_memories()
            put_user_profile(
                user_id="u_123",
                attributes={"name": "Ada", "tier": "premium", "joined_at": "2025-04-01"},
            )
            if not ChatSession.objects.filter(key="s_9", user_id="u_123").exists():
                append_session_messages(
                    session_key="s_9",
                    user_id="u_123",
                    messages=[
                        {
                            "role": "user",
                            "content": "I bought headphones on the 3rd and they crackle.",
                        },
                        {
                            "role": "assistant",
                            "content": "Sorry to hear that. Is it both ear cups or one?",
                        },
                        {"role": "user", "content": "Only the left one, since yesterday."},
                        {
                            "role": "assistant",
                            "content": "Thanks. You are within the 30-day window.",
                        },
                    ],
                )
            seed_demo_eval_cases(route)
        connection.set_schema_to_public()
        self.stdout.write(
            f"Demo collection {DEMO_COLLECTION!r}: {len(DEMO_DOCUMENTS)} documents, ingestion job {job.id} "
            f"{job.status}{': ' + job.error if job.error else ''}."
        )
        port = os.environ.get("PORT", "8000")
        body = DEMO_RESOLVE_BODY
        self.stdout.write("")
        self.stdout.write(
            f"Demo tenant {tenant.name!r}: route 'support' with guardrails, profile, history, "
            f"documents ({DEMO_COLLECTION}), {DEMO_USER}'s memories (recalled, and written after "
            f"each turn), compression of tool outputs (recoverable) and a lazy search over "
            f"{DEMO_MANUALS_COLLECTION}; replay records keep the requests."
        )
        kept = f"kept in {path}; DEMO_ROTATE=1 make run replaces it"
        self.stdout.write(f"API key (all scopes, {kept}): {key}")
        self.stdout.write(f"  export KEY={key}")
        self.stdout.write("  " + REAL_KEY_HINT)
        self.stdout.write("Resolve context for a request:")
        self.stdout.write(
            f"  curl -s http://127.0.0.1:{port}/api/v1/resolve -H 'Authorization: Bearer {key}' "
            f"-H 'Content-Type: application/json' -d '{json.dumps(body)}'"
        )
        self.print_gateway_call(f"http://127.0.0.1:{port}", key, deployment, provider)
        self.stdout.write(
            f"API docs: http://127.0.0.1:{port}/api/docs/   metrics: http://127.0.0.1:{port}/metrics"
        )
        admin = f"http://{tenant.get_primary_domain().domain}:{port}/admin/"
        self.stdout.write(
            f"Tenant admin: {admin}  live dashboard: {admin}live/  users: {', '.join(ROLES)}, "
            f"password (kept like the key): {password}"
        )
        self.stdout.write("")

    def print_gateway_call(
        self, server: str, key: str, deployment: Deployment, provider: str
    ) -> None:
        protocol = deployment.protocol
        self.stdout.write(describe_deployment(deployment, provider))
        endpoint = "/v1/messages" if protocol == "anthropic" else "/v1/chat/completions"
        self.stdout.write(f"Call the model through the gateway ({endpoint}) with curl:")
        self.stdout.write("  " + gateway_curl(server, key, protocol))
        client = "anthropic" if protocol == "anthropic" else "openai"
        snippet = anthropic_snippet if protocol == "anthropic" else openai_snippet
        self.stdout.write(f"or with the official {client} client (pip install {client}):")
        self.stdout.write(snippet(server, key))
