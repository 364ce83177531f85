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
