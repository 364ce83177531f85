"""Every page and action of a tenant's admin, for every role.

The pages come from the admin registry itself (``admin.site._registry``), so a page registered
later is covered automatically, and fails here until its model is classified in ``EXPECTED`` and
has a ``SAMPLES`` factory. Rights are what the admin must let a role do on a tenant's host:
``v`` view, ``a`` add, ``c`` change, ``d`` delete.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import models
from django.test import Client
from django.urls import URLPattern, URLResolver, reverse
from django.utils import timezone
from django_tenants.utils import schema_context

from contextplatform import urls as tenant_urls
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.services import create_deployment, parse_deployment
from contextplatform.replay.models import ReplayRecord
from contextplatform.routes.models import Recipe, Route, TenantDefaults
from memory.services import create_memory
from sources.embedding import get_embedder
from sources.ingestion import create_collection
from sources.mcp.services import create_server, parse_server
from sources.models import (
    ChatMessage,
    ChatSession,
    Collection,
    Document,
    IngestionJob,
    McpServer,
    UserProfile,
)
from tenants.models import ApiKey, Tenant, TenantApiKey
from tests.admin.conftest import ACME_HOST, PLATFORM_HOST, make_user, signed_in
from tests.admin.forms import form_data

ROLES = ("operator", "auditor", "memory_manager", "superuser")


def rights(*, operator: str = "", auditor: str = "", memory_manager: str = "", superuser: str = ""):
    return {
        "operator": operator,
        "auditor": auditor,
        "memory_manager": memory_manager,
        "superuser": superuser,
    }


EVERYTHING = "vacd"
EXPECTED: dict[str, dict[str, str]] = {
    "routing.route": rights(operator=EVERYTHING, auditor="v", superuser=EVERYTHING),
    "deployments.deployment": rights(operator=EVERYTHING, auditor="v", superuser=EVERYTHING),
    "sources.mcpserver": rights(operator=EVERYTHING, auditor="v", superuser=EVERYTHING),
    "routing.recipe": rights(operator=EVERYTHING, auditor="v", superuser=EVERYTHING),
    # One row per tenant, never deleted (writing {} resets it); added only while missing.
    "routing.tenantdefaults": rights(operator="vc", auditor="v", superuser="vc"),
    # The audit trail: nobody adds, changes or deletes it, superusers included.
    "routing.replayrecord": rights(operator="v", auditor="v", superuser="v"),
    "sources.userprofile": rights(operator=EVERYTHING, superuser=EVERYTHING),
    "sources.chatsession": rights(operator=EVERYTHING, superuser=EVERYTHING),
    # Ingestion writes documents and jobs: the admin adds and edits collections, deletes documents.
    "sources.collection": rights(operator="vac", auditor="v", superuser="vac"),
    "sources.document": rights(operator="vd", superuser="vd"),
    "sources.ingestionjob": rights(operator="v", auditor="v", superuser="v"),
    # Operators look a user's memories up; memory managers also add, change and erase them.
    "memory.memory": rights(operator="v", memory_manager=EVERYTHING, superuser=EVERYTHING),
    # The tenant's own admin users and groups: its superusers only.
    "auth.user": rights(superuser=EVERYTHING),
    "auth.group": rights(superuser=EVERYTHING),
    # Platform models: served on the platform host only, to nobody on a tenant's host.
    "tenants.tenant": rights(),
    "tenants.apikey": rights(),
    # The tenant's own API keys: its superusers only (a key is a credential to everything its
    # scopes name); revoked, never deleted.
    "tenants.tenantapikey": rights(superuser="vac"),
}

# Custom ModelAdmin URLs (by URL name): the right on their model that opens them.
CUSTOM_VIEWS: dict[str, str] = {
    # Preview runs the route's real sources (outbound calls, judges): operators only.
    "routing_route_preview": "c",
    # Trying a draft reruns recorded requests against it (sources, judges): likewise.
    "routing_route_try_draft": "c",
    # Re-run resolves a record's request again (sources, judges); the API asks replay.read.
    "routing_replayrecord_rerun": "v",
    # The arms compared: what the route's records already show whoever may view the route.
    "routing_route_variants": "v",
    # The route's evaluation: seen by whoever sees the route; its cases edited and run by those
    # who may change it.
    "routing_route_evaluation": "v",
    # Test connection calls the server with the tenant's stored headers: those who may change it.
    "sources_mcpserver_test_connection": "c",
    "auth_user_password_change": "c",
}

# Views of the tenant host's admin outside the ModelAdmins (by URL name): "staff" = any staff user.
# The live page's health rows show what the page itself shows: its sources' outcomes.
# "model:right": what the role may do to that model decides (the playground calls a route's
# deployment, and spends: those who may change routes).
SITE_VIEWS: dict[str, str] = {
    "live-dashboard": "staff",
    "live-health": "staff",
    "spend-dashboard": "staff",
    "playground": "routing.route:c",
}

# Fields an add form needs that the change form of the sample does not show.
ADD_FORM_EXTRAS: dict[str, dict[str, str]] = {
    "auth.user": {"password1": "x-new-password-1", "password2": "x-new-password-1"},
}


def sample_route() -> Route:
    rules = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}
    return Route.objects.create(name="sample-route", context={"sources": [rules]})


def sample_replay() -> ReplayRecord:
    return ReplayRecord.objects.create(
        id="rsv_sample",
        route="sample-route",
        status="ok",
        format="openai",
        created_at=timezone.now(),
        duration_ms=3.5,
        sources=[{"name": "rules", "type": "skill_guardrails", "status": "ok", "ms": 0.1}],
    )


def sample_collection() -> Collection:
    return create_collection(name="sample-collection", description="FAQ")


def sample_document() -> Document:
    return Document.objects.create(
        collection=sample_collection(),
        external_id="refunds",
        title="Refunds",
        text="Refunds take five days.",
        content_hash="0" * 64,
    )


def sample_job() -> IngestionJob:
    return IngestionJob.objects.create(id="job_sample", collection=sample_collection(), total=1)


def sample_session() -> ChatSession:
    session = ChatSession.objects.create(key="s_sample", user_id="u_sample")
    ChatMessage.objects.create(session=session, seq=1, role="user", content="hi", text="hi")
    return session


def sample_deployment() -> Deployment:
    spec = parse_deployment(
        {
            "name": "sample-deployment",
            "protocol": "openai",
            "base_url": "https://models.example.com/v1",
            "model": "gpt-4o-mini",
            "api_key": "sk-sample-secret",
            "headers": {"OpenAI-Organization": "org-sample"},
        }
    )
    return create_deployment(spec=spec)


def sample_mcp_server() -> McpServer:
    spec = parse_server(
        {
            "name": "sample-mcp",
            "url": "http://127.0.0.1:9/mcp",
            "headers": {"Authorization": "Bearer sample-secret"},
        }
    )
    return create_server(spec=spec)


SAMPLES: dict[str, Callable[[], models.Model]] = {
    "deployments.deployment": sample_deployment,
    "sources.mcpserver": sample_mcp_server,
    "routing.route": sample_route,
    "routing.recipe": lambda: Recipe.objects.create(
        name="sample-recipe", context={"budget": {"context_tokens": 2000}}
    ),
    "routing.tenantdefaults": lambda: TenantDefaults.objects.create(context={}),
    "routing.replayrecord": sample_replay,
    "sources.collection": sample_collection,
    "sources.document": sample_document,
    "sources.ingestionjob": sample_job,
    "sources.userprofile": lambda: UserProfile.objects.create(
        user_id="u_sample", attributes={"plan": "gold"}
    ),
    "sources.chatsession": sample_session,
    "memory.memory": lambda: create_memory(
        user_id="u_sample", content="likes green tea", embedder=get_embedder()
    ),
    "auth.user": lambda: get_user_model().objects.create_user("sample_user", "", "x-password-1"),
    "auth.group": lambda: Group.objects.create(name="sample group"),
    "tenants.tenant": lambda: Tenant.objects.get(schema_name="acme"),
    "tenants.apikey": lambda: ApiKey.objects.filter(tenant__schema_name="acme").first(),
    "tenants.tenantapikey": lambda: TenantApiKey.objects.filter(tenant__schema_name="acme").first(),
}


def key_of(model: type[models.Model]) -> str:
    return f"{model._meta.app_label}.{model._meta.model_name}"


REGISTRY: dict[str, tuple[type[models.Model], admin.ModelAdmin]] = {
    key_of(model): (model, model_admin) for model, model_admin in admin.site._registry.items()
}
CASES = [(role, model) for model in sorted(REGISTRY) for role in ROLES]


def allowed(model: str, role: str) -> str:
    assert model in EXPECTED, f"{model} has an admin page but no row in EXPECTED: classify it"
    return EXPECTED[model][role]


def sample(model: str) -> models.Model:
    assert model in SAMPLES, f"{model} has an admin page but no SAMPLES factory"
    with schema_context("acme"):
        return SAMPLES[model]()


def admin_url(model: str, view: str, obj: models.Model | None = None) -> str:
    app_label, model_name = model.split(".")
    args = [quote(obj.pk)] if obj is not None else []
    return reverse(f"admin:{app_label}_{model_name}_{view}", args=args)


def stored(model: str, obj: models.Model) -> str | None:
    """The row as stored (its repr: vectors compare as text), or None when it is gone."""
    with schema_context("acme"):
        rows = list(REGISTRY[model][0]._default_manager.filter(pk=obj.pk).values())
    return repr(rows[0]) if rows else None


def row_count(model: str) -> int:
    with schema_context("acme"):
        return REGISTRY[model][0]._default_manager.count()


def case(
    role: str, model: str, admin_client_for: Callable[[str], Client]
) -> tuple[str, Client, models.Model]:
    """The role's rights on the model, a client signed in with the role, and a sample object."""
    return allowed(model, role), admin_client_for(role), sample(model)


# --- every page is classified ------------------------------------------------------------------


def test_every_admin_page_is_classified() -> None:
    unclassified = sorted(set(REGISTRY) - set(EXPECTED))
    assert not unclassified, (
        f"admin pages without expectations (add them to EXPECTED): {unclassified}"
    )
    stale = sorted(set(EXPECTED) - set(REGISTRY))
    assert not stale, f"EXPECTED names models that have no admin page: {stale}"
    assert set(SAMPLES) >= set(REGISTRY), sorted(set(REGISTRY) - set(SAMPLES))
    for model, row in EXPECTED.items():
        assert set(row) == set(ROLES), model
        assert set("".join(row.values())) <= set("vacd"), model


# --- the standard pages ------------------------------------------------------------------------

VIEW_NEEDS = {"changelist": "v", "add": "a", "change": "v", "history": "v", "delete": "d"}


@pytest.mark.parametrize(("role", "model"), CASES)
def test_standard_pages_open_only_with_the_right(
    role: str, model: str, admin_client_for: Callable[[str], Client]
) -> None:
    may, client, obj = case(role, model, admin_client_for)
    for view, needs in VIEW_NEEDS.items():
        url = admin_url(model, view, None if view in ("changelist", "add") else obj)
        status = client.get(url).status_code
        want = 200 if needs in may else 403
        assert status == want, f"{role} GET {view} of {model} ({url}): {status}, expected {want}"


@pytest.mark.parametrize("role", ROLES)
def test_the_index_lists_exactly_the_pages_a_role_may_open(
    role: str, admin_client_for: Callable[[str], Client]
) -> None:
    response = admin_client_for(role).get("/admin/")
    assert response.status_code == 200
    listed = {
        f"{app['app_label']}.{entry['object_name'].lower()}"
        for app in response.context["app_list"]
        for entry in app["models"]
    }
    assert listed == {model for model in REGISTRY if allowed(model, role)}


# --- writes: allowed ones store, forbidden ones store nothing ------------------------------------


def change_form(reader: Client, model: str, obj: models.Model) -> dict[str, list[str]]:
    page = reader.get(admin_url(model, "change", obj))
    if page.status_code != 200:  # nobody may open it here: any body will do
        return {}
    return form_data(page.content.decode(), f"{model.split('.')[1]}_form")


def add_form(
    reader: Client, model: str, obj: models.Model, change_data: dict[str, list[str]]
) -> dict[str, list[str]]:
    """The add form filled in with the sample's values, as an operator would retype them."""
    page = reader.get(admin_url(model, "add"))
    if page.status_code != 200:
        return {}
    blank = form_data(page.content.decode(), f"{model.split('.')[1]}_form")
    own_fields = {name for name in blank if "-" not in name}  # inline formsets stay blank
    data = {
        name: values if name not in own_fields else change_data.get(name, values)
        for name, values in blank.items()
    }
    for name in own_fields - change_data.keys():  # read-only once created, e.g. a memory's user
        if hasattr(obj, name):
            data[name] = [str(getattr(obj, name))]
    for name, value in ADD_FORM_EXTRAS.get(model, {}).items():
        data[name] = [value]
    return data


def errors_of(response: Any) -> str:
    context = response.context or {}
    form = context.get("adminform")
    return str(form.form.errors) if form is not None else response.content.decode()[:500]


@pytest.mark.parametrize(("role", "model"), CASES)
def test_writes_store_only_with_the_right(
    role: str, model: str, admin_client_for: Callable[[str], Client]
) -> None:
    may, client, obj = case(role, model, admin_client_for)
    reader = client if role == "superuser" else admin_client_for("superuser")
    change_data = change_form(reader, model, obj)
    add_data = add_form(reader, model, obj, change_data)

    before = stored(model, obj)
    response = client.post(admin_url(model, "change", obj), change_data)
    if "c" in may:
        assert response.status_code == 302, errors_of(response)
    else:
        assert response.status_code == 403, f"{role} changed {model}: {response.status_code}"
        assert stored(model, obj) == before

    response = client.post(admin_url(model, "delete", obj), {"post": "yes"})
    if "d" in may:
        assert response.status_code == 302 and stored(model, obj) is None
    else:
        assert response.status_code == 403, f"{role} deleted {model}: {response.status_code}"
        assert stored(model, obj) is not None

    if "a" in may and stored(model, obj) is not None:
        with schema_context("acme"):
            obj.delete()  # so that the same values may be added again
    count = row_count(model)
    response = client.post(admin_url(model, "add"), add_data)
    if "a" in may:
        assert response.status_code == 302, errors_of(response)
        assert row_count(model) == count + 1
    else:
        assert response.status_code == 403, f"{role} added {model}: {response.status_code}"
        assert row_count(model) == count


# --- actions -------------------------------------------------------------------------------------

PERMISSION_RIGHT = {"view": "v", "add": "a", "change": "c", "delete": "d"}


def action_rights(model: str) -> dict[str, str]:
    """Every action of the model's admin and the rights it needs (all must declare them)."""
    needs = {}
    for function, name, _ in REGISTRY[model][1]._get_base_actions():
        declared = getattr(function, "allowed_permissions", None)
        assert declared, f"action {name!r} of {model} must declare allowed_permissions"
        unknown = set(declared) - set(PERMISSION_RIGHT)
        assert not unknown, f"action {name!r} of {model}: classify permissions {unknown}"
        needs[name] = "".join(PERMISSION_RIGHT[p] for p in declared)
    return needs


@pytest.mark.parametrize(("role", "model"), CASES)
def test_actions_are_offered_and_run_only_with_the_right(
    role: str, model: str, admin_client_for: Callable[[str], Client]
) -> None:
    may, client, obj = case(role, model, admin_client_for)
    needs = action_rights(model)
    page = client.get(admin_url(model, "changelist"))
    offered = set()
    if page.status_code == 200 and page.context.get("action_form") is not None:
        offered = {name for name, _ in page.context["action_form"].fields["action"].choices if name}
    expected = (
        {name for name, need in needs.items() if set(need) <= set(may)} if "v" in may else set()
    )
    assert offered == expected, f"{role} on {model}"

    for name in sorted(set(needs) - offered):
        before, count = stored(model, obj), row_count(model)
        client.post(
            admin_url(model, "changelist"),
            {"action": name, "_selected_action": [str(obj.pk)], "index": "0", "post": "yes"},
        )
        assert stored(model, obj) == before, f"{role} ran {name} on {model}"
        assert row_count(model) == count, f"{role} ran {name} on {model}"


# --- custom admin views --------------------------------------------------------------------------

STANDARD_SUFFIXES = ("changelist", "add", "history", "delete", "change")


def custom_model_views() -> list[tuple[str, str, bool]]:
    """(model, URL name, takes an object id) of every ModelAdmin URL beyond the standard ones."""
    found = []
    for model, (_, model_admin) in sorted(REGISTRY.items()):
        prefix = model.replace(".", "_")
        for pattern in model_admin.get_urls():
            if str(pattern.pattern) == "<path:object_id>/":  # the standard redirect to change/
                continue
            assert pattern.name, f"{model}: name the admin URL {pattern.pattern}"
            if pattern.name in {f"{prefix}_{suffix}" for suffix in STANDARD_SUFFIXES}:
                continue
            found.append((model, pattern.name, bool(pattern.pattern.converters)))
    return found


CUSTOM_CASES = [(role, *view) for view in custom_model_views() for role in ROLES]


def test_every_custom_view_is_classified() -> None:
    names = {name for _, name, _ in custom_model_views()}
    assert names == set(CUSTOM_VIEWS), (
        f"classify in CUSTOM_VIEWS: {sorted(names ^ set(CUSTOM_VIEWS))}"
    )


@pytest.mark.parametrize(("role", "model", "name", "takes_object"), CUSTOM_CASES)
def test_custom_views_open_only_with_the_right(
    role: str, model: str, name: str, takes_object: bool, admin_client_for: Callable[[str], Client]
) -> None:
    assert name in CUSTOM_VIEWS, f"classify {name} in CUSTOM_VIEWS"
    args = [quote(sample(model).pk)] if takes_object else []
    status = admin_client_for(role).get(reverse(f"admin:{name}", args=args)).status_code
    want = 200 if CUSTOM_VIEWS[name] in allowed(model, role) else 403
    assert status == want, f"{role} GET {name}: {status}, expected {want}"


def site_views() -> set[str]:
    """Named URLs of the tenant host's admin outside the ModelAdmins and Django's own views."""
    builtin = {
        "index",
        "login",
        "logout",
        "password_change",
        "password_change_done",
        "autocomplete",
        "jsi18n",
        "view_on_site",
        "app_list",
    }
    names = {p.name for p in admin.site.get_urls() if isinstance(p, URLPattern)} - builtin - {None}
    for entry in tenant_urls.urlpatterns:
        outside_site = not (isinstance(entry, URLResolver) and entry.app_name == "admin")
        if str(entry.pattern).startswith("admin/") and outside_site:
            names.add(entry.name)
    return names


def test_every_site_view_is_classified() -> None:
    assert site_views() == set(SITE_VIEWS)


@pytest.mark.parametrize(("role", "name"), [(r, n) for n in sorted(SITE_VIEWS) for r in ROLES])
def test_site_views(role: str, name: str, admin_client_for: Callable[[str], Client]) -> None:
    need = SITE_VIEWS[name]
    model, _, right = need.partition(":")
    url = reverse(name)
    want = 200 if need == "staff" or right in allowed(model, role) else 403
    assert admin_client_for(role).get(url).status_code == want
    anonymous = Client(HTTP_HOST=ACME_HOST).get(url)
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]


# --- users are per tenant; tenant pages never show on the platform host ---------------------------


def test_a_user_of_acme_cannot_sign_in_to_globex(acme: Any, globex: Any) -> None:
    make_user(acme.tenant, "acme_operator", "operator")
    refused = Client(HTTP_HOST="globex.localhost").post(
        "/admin/login/", {"username": "acme_operator", "password": "a-long-enough-password"}
    )
    assert refused.status_code == 200 and refused.context["form"].errors
    client = signed_in("acme_operator", ACME_HOST)
    assert client.get("/admin/routing/route/").status_code == 200
    elsewhere = client.get("/admin/routing/route/", HTTP_HOST="globex.localhost")
    assert elsewhere.status_code == 302 and "/admin/login/" in elsewhere["Location"]


@pytest.mark.parametrize("role", ROLES)
def test_tenant_users_cannot_sign_in_on_the_platform_host(acme: Any, role: str) -> None:
    make_user(acme.tenant, f"acme_{role}", role)
    client = Client(HTTP_HOST=PLATFORM_HOST)
    refused = client.post(
        "/admin/login/", {"username": f"acme_{role}", "password": "a-long-enough-password"}
    )
    assert refused.status_code == 200 and refused.context["form"].errors
    tenant_session = signed_in(f"acme_{role}", ACME_HOST)
    for model in REGISTRY:
        if model.startswith(("auth.", "tenants.")):
            continue
        page = tenant_session.get(admin_url(model, "changelist"), HTTP_HOST=PLATFORM_HOST)
        assert page.status_code == 302 and "/admin/login/" in page["Location"], model


def test_platform_staff_see_no_tenant_page_on_the_platform_host(db: Any) -> None:
    get_user_model().objects.create_superuser("platform_root", "", "a-long-enough-password")
    client = signed_in("platform_root", PLATFORM_HOST)
    listed = {app["app_label"] for app in client.get("/admin/").context["app_list"]}
    assert listed == {"auth", "tenants"}
    for model in REGISTRY:
        if model.startswith(("auth.", "tenants.")):
            continue
        for view in ("changelist", "add"):
            status = client.get(admin_url(model, view)).status_code
            assert status == 403, f"platform {view} of {model}: {status}"
