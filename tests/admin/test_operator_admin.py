"""The operators' pages of a tenant's admin: routes with their sources inline (stored as the route's
own layer), errors next to the field, Preview (a real resolve, never recorded), recipes and tenant
defaults, and the knowledge base with ingestion progress. Real PostgreSQL, the real login page."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django_tenants.utils import schema_context

from contextplatform.replay.models import ReplayRecord
from contextplatform.routes.models import Recipe, Route, TenantDefaults
from sources.ingestion import DocumentInput, submit_documents
from sources.models import Collection, IngestionJob
from tests.admin.conftest import ACME_HOST, PASSWORD, signed_in
from tests.admin.forms import form_data
from tests.conftest import ApiClient, TenantFixture, admin_object_url

ROUTES = "/admin/routing/route/"
RULES_ROW = {
    "name": "rules",
    "type": "skill_guardrails",
    "enabled": "on",
    "priority": "100",
    "texts": "Be kind.\nNever promise refunds.",
    "ORDER": "1",
}
HISTORY_ROW = {
    "name": "history",
    "type": "recent_messages",
    "enabled": "on",
    "on_failure": "warn",
    "settings": '{"last_n_turns": 4}',
    "ORDER": "2",
}
RULES = {
    "name": "rules",
    "type": "skill_guardrails",
    "priority": 100,
    "texts": ["Be kind.", "Never promise refunds."],
}
HISTORY = {"name": "history", "type": "recent_messages", "on_failure": "warn", "last_n_turns": 4}


@pytest.fixture
def operator(admin_client_for: Callable[[str], Client]) -> Client:
    return admin_client_for("superuser")


def sources_data(rows: list[dict[str, str]], initial: int = 0) -> dict[str, str]:
    data = {
        "sources-TOTAL_FORMS": str(len(rows)),
        "sources-INITIAL_FORMS": str(initial),
        "sources-MIN_NUM_FORMS": "0",
        "sources-MAX_NUM_FORMS": "32",
    }
    for index, row in enumerate(rows):
        data.update({f"sources-{index}-{key}": value for key, value in row.items()})
    return data


def route_form(
    name: str = "support", rows: list[dict[str, str]] | None = None, **fields: str
) -> dict[str, str]:
    data = {
        "name": name,
        "description": "Customer support",
        "recipe": "",
        "model_name": "",
        "context_window": "32000",
        "max_output_tokens": "1024",
        "upstream": "",
        "enabled": "",
        "injection_mode": "",
        "budget_max_tokens": "",
        "budget_reserve_output_tokens": "",
        "budget_context_tokens": "",
        "compress": "",
        **sources_data(rows if rows is not None else [RULES_ROW, HISTORY_ROW]),
    }
    data.update(fields)
    return data


def stored_route(name: str = "support") -> Route | None:
    with schema_context("acme"):
        return Route.objects.select_related("recipe").filter(name=name).first()


def effective(name: str = "support") -> dict[str, Any]:
    with schema_context("acme"):
        route = Route.objects.select_related("recipe").get(name=name)
        return route.spec().context.model_dump(mode="json")


def set_defaults(context: dict[str, Any]) -> None:
    with schema_context("acme"):
        TenantDefaults.objects.update_or_create(pk=1, defaults={"context": context})


def add_route(client: Client, **fields: Any) -> Any:
    return client.post(f"{ROUTES}add/", route_form(**fields))


def change_url(route: Route) -> str:
    return admin_object_url(Route, route.pk)


def field_errors(response: Any) -> dict[str, list[str]]:
    """The route form's errors by field, and each source row's as ``sources[i].field``."""
    form = response.context["adminform"].form
    errors = {name: list(messages) for name, messages in form.errors.items()}
    for index, row in enumerate(form.sources.forms):
        for name, messages in row.errors.items():
            errors[f"sources[{index}].{name}"] = list(messages)
    return errors


def cell_error(html: str, field: str) -> str:
    """The error rendered in a source row's cell (next to the field), as the page shows it."""
    match = re.search(
        rf'<td class="field-{field}"><label[^>]*>[^<]*</label><ul class="errorlist[^"]*"[^>]*>'
        r"<li>([^<]*)</li>",
        html,
    )
    assert match, f"no error shown next to {field}"
    return match.group(1)


# --- routes: sources inline, the route's own layer ------------------------------------------------


def test_a_route_added_with_two_sources_stores_its_own_layer_and_inherits_the_rest(
    acme: TenantFixture, operator: Client
) -> None:
    set_defaults({"budget": {"context_tokens": 1234}, "injection": {"mode": "system_prompt"}})
    response = add_route(operator)
    assert response.status_code == 302, field_errors(response)

    route = stored_route()
    assert route is not None
    assert route.context == {"sources": [RULES, HISTORY]}  # only what the operator wrote
    assert route.model == {
        "name": None,
        "context_window": 32000,
        "max_output_tokens": 1024,
        "upstream": None,
    }
    context = effective()
    assert context["budget"]["context_tokens"] == 1234
    assert context["injection"]["mode"] == "system_prompt"
    assert [s["priority"] for s in context["sources"]] == [100, 60]  # history: the kind's default

    set_defaults({"budget": {"context_tokens": 999}})  # later changes of the defaults reach it
    assert effective()["budget"]["context_tokens"] == 999
    assert effective()["injection"]["mode"] == "tool_role"

    listing = operator.get(ROUTES).content.decode()
    assert "support" in listing and "rules (100), history (60)" in listing


def test_explicit_fields_are_written_and_blank_ones_inherit(
    acme: TenantFixture, operator: Client
) -> None:
    set_defaults({"budget": {"max_tokens": 20000, "context_tokens": 500}})
    response = add_route(
        operator,
        rows=[RULES_ROW],
        enabled="true",
        injection_mode="system_prompt",
        budget_reserve_output_tokens="auto",
        budget_context_tokens="800",
        target_history_mode="extractive",
        target_history_min_tokens="400",
        compress='{"match": {"recall": {"method": "bm25"}}}',
    )
    assert response.status_code == 302, field_errors(response)
    assert stored_route().context == {
        "enabled": True,
        "sources": [RULES],
        "compress": {
            "match": {"recall": {"method": "bm25"}},
            "targets": {"history": {"mode": "extractive", "min_tokens": 400}},
        },
        "budget": {"reserve_output_tokens": "auto", "context_tokens": 800},
        "injection": {"mode": "system_prompt"},
    }
    context = effective()
    assert context["budget"] == {
        "max_tokens": 20000,
        "reserve_output_tokens": "auto",
        "context_tokens": 800,
        "session_max_tokens": None,
    }
    assert context["compress"]["targets"]["history"]["min_tokens"] == 400


def test_stored_targets_fill_their_fields_and_a_resubmit_keeps_them(
    acme: TenantFixture, acme_api: ApiClient, operator: Client
) -> None:
    compress = {
        "mode": "always",
        "targets": {
            "tool_outputs": {"mode": "recoverable", "min_tokens": 3000, "target_tokens": 900},
            "current_user": {"mode": "truncate"},
        },
    }
    route = {
        "name": "support",
        "context": {"sources": [RULES], "compress": compress},
    }
    assert acme_api.post("/api/v1/routes", route).status_code == 201
    html = operator.get(change_url(stored_route())).content.decode()
    form = form_data(html, "route_form")
    assert form["target_tool_outputs_mode"] == ["recoverable"]
    assert form["target_tool_outputs_min_tokens"] == ["3000"]
    assert form["target_current_user_mode"] == ["truncate"]
    assert form["target_history_mode"] == [""]  # not written: inherited
    assert json.loads(form["compress"][0]) == {"mode": "always"}
    assert operator.post(change_url(stored_route()), form).status_code == 302
    assert stored_route().context["compress"] == compress


def test_inherit_sources_writes_no_sources(acme: TenantFixture, operator: Client) -> None:
    set_defaults({"sources": [RULES]})
    response = add_route(operator, rows=[HISTORY_ROW], inherit_sources="on")
    assert response.status_code == 302, field_errors(response)
    assert stored_route().context == {}
    assert [s["name"] for s in effective()["sources"]] == ["rules"]
    assert "rules (100) (inherited)" in operator.get(ROUTES).content.decode()


def test_resubmitting_the_change_page_keeps_the_layer_and_a_priority_can_change(
    acme: TenantFixture, operator: Client
) -> None:
    assert add_route(operator, budget_context_tokens="700").status_code == 302
    route = stored_route()
    before = route.context
    page = operator.get(change_url(route))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="sources-0-priority"' in html and "Preview" in html
    assert "Add another source" in html and 'name="sources-__prefix__-type"' in html

    data = form_data(html, "route_form")
    assert operator.post(change_url(route), data).status_code == 302
    assert stored_route().context == before  # a save without changes writes the same layer

    data["sources-1-priority"] = ["5"]
    assert operator.post(change_url(route), data).status_code == 302
    sources = stored_route().context["sources"]
    assert sources[1] == {**HISTORY, "priority": 5} and sources[0] == RULES

    data["sources-0-DELETE"] = ["on"]
    assert operator.post(change_url(route), data).status_code == 302
    assert [s["name"] for s in stored_route().context["sources"]] == ["history"]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"sources-0-priority": "-3"}, "sources[0].priority", "greater than or equal to 0"),
        ({"sources-1-on_failure": "explode"}, "sources[1].on_failure", "Select a valid choice"),
        ({"sources-1-timeout_ms": "0"}, "sources[1].timeout_ms", "greater than or equal to 1"),
        ({"sources-1-settings": '{"bogus": 1}'}, "sources[1].settings", "bogus: unknown field"),
        ({"sources-1-settings": '{"last_n_turns": 0}'}, "sources[1].settings", "last_n_turns:"),
        ({"sources-1-settings": '{"priority": 3}'}, "sources[1].settings", "its own column"),
        ({"sources-1-texts": "x"}, "sources[1].texts", "has no texts"),
        ({"sources-1-name": "rules"}, "sources[1].name", "duplicate source name"),
        ({"sources-0-type": "nope"}, "sources[0].type", "Select a valid choice"),
        (
            {"budget_max_tokens": "-5"},
            "budget_max_tokens",
            "max_tokens must be 'auto' or a positive",
        ),
        ({"budget_max_tokens": "lots"}, "budget_max_tokens", "auto or a whole number"),
        ({"budget_context_tokens": "0"}, "budget_context_tokens", "greater than or equal to 1"),
        ({"context_window": "100"}, "context_window", "greater than or equal to 256"),
        ({"max_output_tokens": "64000"}, "max_output_tokens", "lower than context_window"),
        ({"compress": '{"targets": {}}'}, "compress", "their own fields above"),
        (
            {"target_history_min_tokens": "100", "target_history_target_tokens": "200"},
            "target_history_target_tokens",
            "target_tokens must be lower than min_tokens",
        ),
        ({"target_history_mode": "truncate"}, "target_history_mode", "Select a valid choice"),
        ({"target_rag_min_tokens": "0"}, "target_rag_min_tokens", "greater than or equal to 1"),
        ({"compress": "[1]"}, "compress", "JSON object"),
        ({"name": "no spaces allowed"}, "name", "should match pattern"),
    ],
)
def test_a_bad_value_is_reported_next_to_its_field_and_nothing_is_stored(
    acme: TenantFixture, operator: Client, change: dict[str, str], field: str, message: str
) -> None:
    response = operator.post(f"{ROUTES}add/", {**route_form(), **change})
    assert response.status_code == 200
    errors = field_errors(response)
    assert any(message in text for text in errors.get(field, [])), errors
    assert "Please correct the error" in response.content.decode()
    if field.startswith("sources["):
        shown = cell_error(response.content.decode(), field.split(".")[1])
        assert message.replace("'", "&#x27;") in shown or message in shown
    with schema_context("acme"):
        assert not Route.objects.exists()


def test_a_bad_change_keeps_the_stored_route(acme: TenantFixture, operator: Client) -> None:
    assert add_route(operator).status_code == 302
    route = stored_route()
    data = form_data(operator.get(change_url(route)).content.decode(), "route_form")
    data["sources-0-priority"] = ["-1"]
    response = operator.post(change_url(route), data)
    assert response.status_code == 200
    assert "greater than or equal to 0" in cell_error(response.content.decode(), "priority")
    assert stored_route().context == route.context


def test_an_inherited_bad_value_is_shown_where_the_route_can_override_it(
    acme: TenantFixture, operator: Client
) -> None:
    with schema_context("acme"):  # e.g. written before a rule was tightened
        recipe = Recipe.objects.create(name="old", context={"budget": {"max_tokens": -1}})
    refused = add_route(operator, recipe=str(recipe.pk))
    assert refused.status_code == 200
    assert "positive number" in " ".join(field_errors(refused)["budget_max_tokens"])
    response = add_route(operator, recipe=str(recipe.pk), budget_max_tokens="5000")
    assert response.status_code == 302, field_errors(response)
    assert stored_route().recipe.name == "old"
    assert stored_route().context["budget"] == {"max_tokens": 5000}


# --- Preview ------------------------------------------------------------------------------------


def test_preview_shows_the_report_and_stores_no_replay_record(
    acme: TenantFixture, acme_api: ApiClient, operator: Client
) -> None:
    long_rules = {
        "name": "manual",
        "type": "skill_guardrails",
        "enabled": "on",
        "priority": "10",
        "texts": " ".join(["A very long operating manual sentence."] * 60),
        "ORDER": "2",
    }
    response = add_route(operator, rows=[RULES_ROW, long_rules], budget_context_tokens="40")
    assert response.status_code == 302, field_errors(response)
    route = stored_route()
    with schema_context("acme"):
        records = ReplayRecord.objects.count()

    preview_url = f"{ROUTES}{route.pk}/preview/"
    assert operator.get(preview_url).status_code == 200
    shown = operator.post(preview_url, {"message": "Where is my parcel?", "user": "u1"})
    assert shown.status_code == 200
    report = shown.context["report"]
    assert report is not None, shown.context["form"].errors
    assert [(s["name"], s["status"]) for s in report["sources"]] == [
        ("rules", "ok"),
        ("manual", "ok"),
    ]
    decisions = {(item["source"], item["kept"], item["reason"]) for item in report["items"]}
    assert ("rules", True, "kept") in decisions and ("manual", False, "over_budget") in decisions
    assert report["budget"]["context"] == 40
    assert report["tokens"]["after"] > report["tokens"]["before"]
    html = shown.content.decode()
    for text in ("over_budget", "dropped", "kept", "skill_guardrails", "Compression report"):
        assert text in html
    assert "Be kind." in html  # the request as the model would receive it
    with schema_context("acme"):
        assert ReplayRecord.objects.count() == records

    # The same request through the API is recorded: the preview's silence is not an accident.
    resolved = acme_api.post(
        "/api/v1/resolve",
        {"route": "support", "request": {"messages": [{"role": "user", "content": "hi"}]}},
    )
    assert resolved.status_code == 200, resolved.content
    with schema_context("acme"):
        assert ReplayRecord.objects.count() == records + 1


def test_a_preview_leaves_the_users_memories_as_they_were(
    acme: TenantFixture, acme_api: ApiClient, operator: Client
) -> None:
    """A recalled memory gains strength when resolve uses it, never when a preview does."""
    memory_row = {
        "name": "memories",
        "type": "memory",
        "enabled": "on",
        "settings": '{"match": {"recall": {"top_k": 5, "min_similarity": 0.1}}}',
        "ORDER": "1",
    }
    assert add_route(operator, rows=[memory_row]).status_code == 302
    created = acme_api.post("/api/v1/users/u1/memories", {"content": "I live in Porto"})
    assert created.status_code == 201, created.content

    def strength() -> tuple[float, Any]:
        with schema_context("acme"):
            from memory.models import Memory

            memory = Memory.objects.get(pk=created.json()["id"])
            return memory.strength, memory.last_used_at

    before = strength()
    preview_url = f"{ROUTES}{stored_route().pk}/preview/"
    shown = operator.post(preview_url, {"message": "Where do I live?", "user": "u1"})
    assert [(i["source"], i["kept"]) for i in shown.context["report"]["items"]] == [
        ("memories", True)
    ]
    assert strength() == before
    request = {"messages": [{"role": "user", "content": "Where do I live?"}]}
    resolved = acme_api.post(
        "/api/v1/resolve", {"route": "support", "user": "u1", "request": request}
    )
    assert resolved.status_code == 200, resolved.content
    assert strength()[0] > before[0]


def test_preview_takes_a_raw_body_and_reports_a_bad_one(
    acme: TenantFixture, operator: Client
) -> None:
    assert add_route(operator).status_code == 302
    preview_url = f"{ROUTES}{stored_route().pk}/preview/"
    body = '{"model": "m", "messages": [{"role": "user", "content": "hello"}]}'
    shown = operator.post(preview_url, {"body": body, "format": "openai"})
    assert shown.context["report"]["status"] == "ok"
    assert operator.post(preview_url, {}).context["form"].non_field_errors()
    bad = operator.post(preview_url, {"body": '{"messages": "nope"}'})
    assert bad.context["report"] is None
    assert "request.messages" in " ".join(bad.context["form"].non_field_errors())
    too_big = operator.post(preview_url, {"message": "word " * 40_000})
    assert too_big.context["report"] is None


def test_a_user_who_may_only_view_routes_can_neither_save_nor_preview(
    acme: TenantFixture, operator: Client
) -> None:
    """Preview runs the route's real sources (outbound calls, judges): it needs the change right."""
    assert add_route(operator).status_code == 302
    route = stored_route()
    with schema_context("acme"):
        viewer = get_user_model().objects.create_user("viewer", "", PASSWORD, is_staff=True)
        viewer.user_permissions.add(Permission.objects.get(codename="view_route"))
    connection.set_schema_to_public()
    client = signed_in("viewer", ACME_HOST)
    page = client.get(change_url(route)).content.decode()
    assert 'name="sources-0-priority"' not in page and "/preview/" not in page
    assert "Add another source" not in page
    assert "rules (100), history (60)" in page
    assert client.post(f"{ROUTES}{route.pk}/preview/", {"message": "hi"}).status_code == 403
    data = form_data(operator.get(change_url(route)).content.decode(), "route_form")
    data["sources-0-priority"] = ["1"]
    assert client.post(change_url(route), data).status_code == 403
    assert stored_route().context == route.context


# --- recipes and tenant defaults -------------------------------------------------------------------


def test_tenant_defaults_are_checked_as_the_import_checks_them(
    acme: TenantFixture, operator: Client
) -> None:
    url = "/admin/routing/tenantdefaults/add/"
    bad = operator.post(url, {"context": '{"budget": {"max_tokens": -1}}'})
    assert bad.status_code == 200
    assert "max_tokens must be 'auto' or a positive number" in " ".join(
        bad.context["adminform"].form.errors["context"]
    )
    legacy = operator.post(url, {"context": '{"rag": {"enabled": true}}'})
    assert legacy.context["adminform"].form.errors["context"]
    with schema_context("acme"):
        assert not TenantDefaults.objects.exists()
    assert operator.post(url, {"context": '{"budget": {"context_tokens": 300}}'}).status_code == 302
    with schema_context("acme"):
        assert TenantDefaults.current_context() == {"budget": {"context_tokens": 300}}
    assert operator.get(url).status_code == 403  # one row only


def test_a_recipe_change_that_breaks_a_route_on_it_is_refused(
    acme: TenantFixture, operator: Client
) -> None:
    add = operator.post(
        "/admin/routing/recipe/add/", {"name": "house", "context": '{"sources": []}'}
    )
    assert add.status_code == 302
    with schema_context("acme"):
        recipe = Recipe.objects.get(name="house")
    assert add_route(operator, recipe=str(recipe.pk), inherit_sources="on").status_code == 302
    # A route inheriting a history source with on_failure: block is fine; a memory one is not.
    broken = '{"sources": [{"type": "memory", "on_failure": "block"}]}'
    refused = operator.post(admin_object_url(Recipe, recipe.pk), {"context": broken})
    assert refused.status_code == 200
    text = " ".join(refused.context["adminform"].form.errors["context"])
    assert "on_failure" in text and "never refuses the request" in text
    with schema_context("acme"):
        assert Recipe.objects.get(pk=recipe.pk).context == {"sources": []}
    bad_name = operator.post("/admin/routing/recipe/add/", {"name": "a b", "context": ""})
    assert "not a valid recipe name" in " ".join(bad_name.context["adminform"].form.errors["name"])
    good = '{"sources": [{"type": "skill_guardrails", "texts": ["House rules."]}]}'
    assert operator.post(admin_object_url(Recipe, recipe.pk), {"context": good}).status_code == 302
    assert [s["type"] for s in effective()["sources"]] == ["skill_guardrails"]


# --- knowledge base -------------------------------------------------------------------------------


def test_collections_show_counts_and_ingestion_progress(
    acme: TenantFixture, acme_api: ApiClient, operator: Client
) -> None:
    assert acme_api.post("/api/v1/collections", {"name": "handbook"}).status_code == 201
    documents = [
        {"id": "returns", "text": "Returns are accepted within thirty days of delivery."},
        {"id": "shipping", "text": "Parcels ship within two working days."},
    ]
    ingested = acme_api.post("/api/v1/collections/handbook/documents", {"documents": documents})
    assert ingested.status_code in (200, 202), ingested.content
    listing = operator.get("/admin/sources/collection/").content.decode()
    assert "handbook" in listing and "done 2/2 (100%)" in listing
    with schema_context("acme"):
        collection = Collection.objects.get(name="handbook")
        queued = submit_documents(
            collection=collection, documents=[DocumentInput(id="faq", text="Ask us anything.")]
        )
    connection.set_schema_to_public()
    listing = operator.get("/admin/sources/collection/").content.decode()
    assert "queued 0/1 (0%)" in listing
    page = operator.get(admin_object_url(Collection, collection.pk)).content.decode()
    assert queued.id in page and "done 2/2 (100%)" in page

    job = operator.get(admin_object_url(IngestionJob, queued.id))
    assert job.status_code == 200 and "queued 0/1 (0%)" in job.content.decode()
    documents_page = operator.get(f"/admin/sources/document/?collection__id__exact={collection.pk}")
    assert all(d in documents_page.content.decode() for d in ("returns", "shipping", "faq"))
    assert operator.post(admin_object_url(IngestionJob, queued.id, "delete")).status_code == 403

    created = operator.post(
        "/admin/sources/collection/add/", {"name": "bad name!", "description": ""}
    )
    assert "should match pattern" in " ".join(created.context["adminform"].form.errors["name"])


# --- tenant isolation ----------------------------------------------------------------------------


def test_acme_admin_never_lists_globex_routes_or_collections(
    acme: TenantFixture, globex_api: ApiClient, operator: Client
) -> None:
    route = {"name": "globex-only", "context": {"sources": [RULES]}}
    assert globex_api.post("/api/v1/routes", route).status_code == 201
    assert globex_api.post("/api/v1/collections", {"name": "globex-docs"}).status_code == 201
    assert add_route(operator, name="acme-route").status_code == 302
    routes = operator.get(ROUTES).content.decode()
    assert "acme-route" in routes and "globex-only" not in routes
    assert "globex-docs" not in operator.get("/admin/sources/collection/").content.decode()
    with schema_context("globex"):
        assert Route.objects.filter(name="acme-route").count() == 0


def test_every_bad_value_of_one_save_is_shown_next_to_its_field(
    acme: TenantFixture, operator: Client
) -> None:
    """One save reports every problem found (the API's envelope names the first)."""
    response = operator.post(
        f"{ROUTES}add/",
        route_form(
            budget_max_tokens="-5",
            target_history_min_tokens="100",
            target_history_target_tokens="200",
            **{
                "sources-0-settings": '{"bogus": 1}',
                "sources-1-settings": '{"last_n_turns": 0}',
            },
        ),
    )
    assert response.status_code == 200
    errors = field_errors(response)
    assert "max_tokens must be 'auto' or a positive" in " ".join(errors["budget_max_tokens"])
    assert "lower than min_tokens" in " ".join(errors["target_history_target_tokens"])
    assert "bogus: unknown field" in " ".join(errors["sources[0].settings"])
    assert "last_n_turns:" in " ".join(errors["sources[1].settings"])
    assert errors["__all__"].count("Correct the sources below.") == 1
    with schema_context("acme"):
        assert not Route.objects.exists()


def test_blank_target_fields_show_what_they_inherit(acme: TenantFixture, operator: Client) -> None:
    set_defaults({"compress": {"targets": {"history": {"mode": "extractive", "min_tokens": 5000}}}})
    html = operator.get(f"{ROUTES}add/").content.decode()
    history_mode = re.search(r'<select name="target_history_mode".*?</select>', html, re.S)
    assert history_mode and (
        '<option value="" selected>inherit: extractive, from the tenant defaults</option>'
        in history_mode.group(0)
    )
    assert re.search(r'name="target_history_min_tokens"[^>]*placeholder="5000"', html) or re.search(
        r'placeholder="5000"[^>]*name="target_history_min_tokens"', html
    )
    assert re.search(
        r'placeholder="2500"[^>]*name="target_history_target_tokens"', html
    ) or re.search(r'name="target_history_target_tokens"[^>]*placeholder="2500"', html)
    tool_mode = re.search(r'<select name="target_tool_outputs_mode".*?</select>', html, re.S)
    assert tool_mode and "inherit: extractive, platform default" in tool_mode.group(0)
    # A preserve target keeps its content whole: no thresholds are shown for it.
    rag_mode = re.search(r'<select name="target_rag_mode".*?</select>', html, re.S)
    assert rag_mode and "inherit: preserve, platform default" in rag_mode.group(0)
    rag_from = re.search(r'<input[^>]*name="target_rag_min_tokens"[^>]*>', html)
    assert rag_from and "placeholder" not in rag_from.group(0)


def test_without_a_compress_block_beneath_the_targets_inherit_no_compression(
    acme: TenantFixture, operator: Client
) -> None:
    set_defaults({})
    html = operator.get(f"{ROUTES}add/").content.decode()
    tool_mode = re.search(r'<select name="target_tool_outputs_mode".*?</select>', html, re.S)
    assert tool_mode and '<option value="" selected>inherit (no compression)</option>' in (
        tool_mode.group(0)
    )
    assert "2000" not in re.search(
        r'<input[^>]*name="target_tool_outputs_min_tokens"[^>]*>', html
    ).group(0)  # type: ignore[union-attr]


def test_an_inherited_target_names_the_recipe_it_comes_from(
    acme: TenantFixture, operator: Client
) -> None:
    set_defaults({"compress": {"targets": {"history": {"mode": "extractive"}}}})
    with schema_context("acme"):
        recipe = Recipe.objects.create(
            name="house",
            context={"compress": {"targets": {"rag": {"mode": "recoverable", "min_tokens": 900}}}},
        )
    assert add_route(operator, recipe=str(recipe.pk)).status_code == 302
    route = stored_route()
    assert route is not None
    html = operator.get(change_url(route)).content.decode()
    rag_mode = re.search(r'<select name="target_rag_mode".*?</select>', html, re.S)
    assert rag_mode and "inherit: recoverable, from recipe house" in rag_mode.group(0)
    history_mode = re.search(r'<select name="target_history_mode".*?</select>', html, re.S)
    assert history_mode and "inherit: extractive, from the tenant defaults" in history_mode.group(0)
    assert re.search(r'<input[^>]*name="target_rag_min_tokens"[^>]*placeholder="900"', html)


def test_a_fallback_list_shows_as_one_choice_and_a_save_keeps_it(
    acme: TenantFixture, acme_api: ApiClient, operator: Client
) -> None:
    for name in ("fb-main", "fb-backup"):
        deployment = {
            "name": name,
            "protocol": "openai",
            "base_url": "https://api.openai.com/v1",
            "model": "gpt-4o-mini",
        }
        assert acme_api.post("/api/v1/deployments", deployment).status_code == 201
    route = {"name": "support", "model": {"upstream": ["fb-main", "fb-backup"]}}
    assert acme_api.post("/api/v1/routes", route).status_code == 201
    html = operator.get(change_url(stored_route())).content.decode()
    assert "fb-main → fb-backup (fallbacks, set through the API)" in html
    form = form_data(html, "route_form")
    assert form["upstream"] == ["fb-main,fb-backup"]
    assert operator.post(change_url(stored_route()), form).status_code == 302
    assert stored_route().model["upstream"] == ["fb-main", "fb-backup"]
    form["upstream"] = ["fb-backup"]  # one deployment chosen in the select replaces the list
    assert operator.post(change_url(stored_route()), form).status_code == 302
    assert stored_route().model["upstream"] == "fb-backup"


def test_the_prompt_cache_box_round_trips(acme_api: ApiClient, operator: Client) -> None:
    route = {"name": "support", "model": {"prompt_cache": True, "context_window": 64000}}
    assert acme_api.post("/api/v1/routes", route).status_code == 201
    form = form_data(operator.get(change_url(stored_route())).content.decode(), "route_form")
    assert form["prompt_cache"] == ["on"]
    assert operator.post(change_url(stored_route()), form).status_code == 302
    assert stored_route().model["prompt_cache"] is True
    del form["prompt_cache"]  # the box unticked
    assert operator.post(change_url(stored_route()), form).status_code == 302
    assert "prompt_cache" not in stored_route().model  # off is the default: not stored
    assert stored_route().model["context_window"] == 64000


def test_a_pool_balance_reads_back_in_the_route_form_and_is_validated_there(
    acme: TenantFixture, acme_api: ApiClient, operator: Client
) -> None:
    for name in ("lb-a", "lb-b"):
        deployment = {
            "name": name,
            "protocol": "openai",
            "base_url": "https://api.openai.com/v1",
            "model": "gpt-4o-mini",
        }
        assert acme_api.post("/api/v1/deployments", deployment).status_code == 201
    balance = {"strategy": "weighted", "weights": {"lb-a": 3.0, "lb-b": 1.0}}
    route = {"name": "support", "model": {"upstream": ["lb-a", "lb-b"], "balance": balance}}
    assert acme_api.post("/api/v1/routes", route).status_code == 201
    html = operator.get(change_url(stored_route())).content.decode()
    form = form_data(html, "route_form")
    assert json.loads(form["balance"][0]) == balance
    assert operator.post(change_url(stored_route()), form).status_code == 302
    assert stored_route().model["balance"] == balance  # a save keeps it as it is

    form["balance"] = ['{"strategy": "weighted", "weights": {"lb-c": 2}}']
    refused = operator.post(change_url(stored_route()), form)
    assert refused.status_code == 200
    assert "which model.upstream does not list" in " ".join(field_errors(refused)["balance"])
    form["balance"] = ['{"strategy": "least_busy"}']
    assert operator.post(change_url(stored_route()), form).status_code == 302
    assert stored_route().model["balance"] == {"strategy": "least_busy"}
    form["balance"] = [""]
    assert operator.post(change_url(stored_route()), form).status_code == 302
    assert "balance" not in stored_route().model
