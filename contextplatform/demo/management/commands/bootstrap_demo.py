from __future__ import annotations

import json
import os
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django_tenants.utils import schema_context

from contextplatform.core.errors import ApiError
from contextplatform.demo.defaults import (
    DEMO_COLLECTION,
    DEMO_DOCUMENTS,
    DEMO_RESOLVE_BODY,
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
from contextplatform.routes.configuration.schema import validate_route_spec
from contextplatform.routes.services import upsert_route
from sources.ingestion import DocumentInput, create_collection, submit_documents
from sources.models import ChatSession, Collection, IngestionJob
from sources.services import append_session_messages, put_user_profile
from sources.tasks import enqueue_ingestion
from tenants.admin_users import create_admin_user
from tenants.models import ApiKey, Tenant
from tenants.roles import ROLES
from tenants.services import (
    TenantError,
    create_tenant,
    issue_api_key,
    revoke_api_key,
    set_outbound_allowlist,
)

DEMO_TENANT = "demo"
DEMO_KEY_NAME = "make-run"


def refresh_demo_admins(tenant: Tenant) -> str:
    """One admin user per role, named after it, all with a new password (printed, like the key)."""
    password = secrets.token_urlsafe(12)
    users = get_user_model().objects
    for role in ROLES:
        with schema_context(tenant.schema_name):
            existing = users.filter(username=role).first()
            if existing is not None:
                existing.set_password(password)
                existing.save(update_fields=["password"])
                continue
        create_admin_user(tenant=tenant, username=role, password=password, role=role)
    return password


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
    def ingest_demo_documents() -> IngestionJob:
        collection = Collection.objects.filter(name=DEMO_COLLECTION).first() or create_collection(
            name=DEMO_COLLECTION, description="Demo support knowledge base"
        )
        job = submit_documents(
            collection=collection,
            documents=[
                DocumentInput(id=d["id"], title=d["title"], text=d["text"], metadata=d["metadata"])
                for d in DEMO_DOCUMENTS
            ],
        )
        enqueue_ingestion(job)
        job.refresh_from_db()
        return job

    help = (
        "Create (or refresh) the demo tenant, its support route and sample data; print a fresh key."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        connection.set_schema_to_public()  # tenants are created from the public schema only
        tenant = Tenant.objects.filter(schema_name=DEMO_TENANT).first()
        if tenant is None:
            tenant, _ = create_tenant(name=DEMO_TENANT)
        for old in ApiKey.objects.filter(
            tenant=tenant, name=DEMO_KEY_NAME, revoked_at__isnull=True
        ):
            revoke_api_key(api_key=old)
        issued = issue_api_key(tenant=tenant, name=DEMO_KEY_NAME)
        password = refresh_demo_admins(tenant)
        provider = demo_provider(os.environ)
        deployment_data = demo_deployment(os.environ)
        allow_outbound(tenant, demo_allowlist_entries(deployment_data))
        with schema_context(tenant.schema_name):
            job = self.ingest_demo_documents()
            deployment = save_demo_deployment(deployment_data)
            upsert_route(spec=validate_route_spec(SUPPORT_ROUTE))
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
        connection.set_schema_to_public()
        self.stdout.write(
            f"Demo collection {DEMO_COLLECTION!r}: {len(DEMO_DOCUMENTS)} documents, ingestion job {job.id} "
            f"{job.status}{': ' + job.error if job.error else ''}."
        )
        port = os.environ.get("PORT", "8000")
        body = DEMO_RESOLVE_BODY
        self.stdout.write("")
        self.stdout.write(
            f"Demo tenant {tenant.name!r}: route 'support' with guardrails, profile, history and documents."
        )
        self.stdout.write(f"API key (all scopes, replaced at every start): {issued.plain_key}")
        self.stdout.write("Resolve context for a request:")
        self.stdout.write(
            f"  curl -s http://127.0.0.1:{port}/api/v1/resolve -H 'Authorization: Bearer {issued.plain_key}' "
            f"-H 'Content-Type: application/json' -d '{json.dumps(body)}'"
        )
        self.print_gateway_call(f"http://127.0.0.1:{port}", issued.plain_key, deployment, provider)
        self.stdout.write(
            f"API docs: http://127.0.0.1:{port}/api/docs/   metrics: http://127.0.0.1:{port}/metrics"
        )
        admin = f"http://{tenant.get_primary_domain().domain}:{port}/admin/"
        self.stdout.write(
            f"Tenant admin: {admin}  live dashboard: {admin}live/  users: {', '.join(ROLES)}, "
            f"password (replaced at every start): {password}"
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
