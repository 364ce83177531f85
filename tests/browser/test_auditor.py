"""An auditor reads a route in the tenant's admin and can change nothing."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.conftest import AdminUsers, TenantApi, log_in, tenant_url, unique

RULES = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}
DESCRIPTION = "kept as the operator wrote it"
POST_FORM = """async ([url, fields]) => {
    const response = await fetch(url, {method: "POST", body: new URLSearchParams(fields)});
    return {status: response.status, text: await response.text()};
}"""


def test_an_auditor_sees_a_route_read_only_and_cannot_save_it(
    server: str, page: Page, admin_users: AdminUsers, acme_http: TenantApi
) -> None:
    route = unique("audited")
    acme_http.create_route(route, [RULES], description=DESCRIPTION)
    auditor = admin_users.create("acme", role="auditor")
    tenant = tenant_url(server, "acme")
    log_in(page, tenant, auditor)

    page.goto(f"{tenant}/admin/routing/route/")
    page.get_by_role("link", name=route, exact=True).click()
    expect(page.locator("h1")).to_have_text("View route")
    form = page.locator("#route_form")
    expect(form).to_contain_text(DESCRIPTION)
    expect(form.locator("[name=_save], [name=_continue], [name=_addanother]")).to_have_count(0)
    expect(form.locator("input:not([type=hidden]), textarea, select")).to_have_count(0)
    expect(page.locator("a.deletelink, a.addlink")).to_have_count(0)

    # The server refuses what the page does not offer: the browser posts the form's fields with
    # its session and a valid CSRF token.
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    fields = {"csrfmiddlewaretoken": token, "name": route, "description": "an auditor's edit"}
    refused = page.evaluate(POST_FORM, [page.url, fields])
    assert refused["status"] == 403, refused["text"]
    assert "CSRF" not in refused["text"]  # refused for the missing right, not for the form
    add_page = page.goto(f"{tenant}/admin/routing/route/add/")
    assert add_page is not None and add_page.status == 403
    assert acme_http.route(route)["description"] == DESCRIPTION


def test_the_replay_list_fits_a_laptop_screen_and_names_each_outcome(
    server: str, page: Page, admin_users: AdminUsers, acme_http: TenantApi
) -> None:
    """At 1,280 px every column of the replay list is in view (the table does not scroll
    sideways), and a memory source that found nothing is "empty", not failed."""
    route = unique("listed")
    memory = {"type": "memory", "name": "mem", "timeout_ms": 30_000}  # a cold embedder is slow
    acme_http.create_route(route, [RULES, memory])
    report = acme_http.resolve(route)
    assert [s["status"] for s in report["sources"]] == ["ok", "empty"]
    auditor = admin_users.create("acme", role="auditor")
    tenant = tenant_url(server, "acme")
    page.set_viewport_size({"width": 1280, "height": 900})
    log_in(page, tenant, auditor)

    page.goto(f"{tenant}/admin/routing/replayrecord/?route={route}")
    row = page.locator("#result_list tbody tr").first
    expect(row.locator("td.field-source_outcomes")).to_have_text("2 sources; empty: mem")
    expect(row.locator("td.field-kept_items")).to_have_text("1 / 1")
    results = page.locator(".results")
    fits = results.evaluate("(box) => box.scrollWidth <= box.clientWidth")
    assert fits, "the replay list scrolls sideways at 1,280 px"
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280

    row.locator("th.field-id a").click()
    assert f"/admin/routing/replayrecord/{report['id']}/change/" in page.url  # the id as it is
    expect(page.locator("body")).not_to_contain_text("Raw JSON")
    expect(page.locator('[data-table="Compression"]')).to_contain_text("why not applied")
