"""An operator raises a source's priority in the route's change page, previews, and sees the
source that was dropped for lack of budget kept in the report."""

from __future__ import annotations

from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import AdminUsers, TenantApi, log_in, tenant_url, unique

# Two guardrail texts of about 60 tokens each under a 100-token context budget: one fits.
TEXT = "Answer politely and stay on the topic of the customer's order. " * 6


def guardrails(name: str, priority: int) -> dict[str, object]:
    return {"type": "skill_guardrails", "name": name, "priority": priority, "texts": [TEXT]}


def preview(page: Page, message: str) -> Locator:
    """Runs the Preview page's form; the rows of the report's items table."""
    page.fill("#id_message", message)
    page.click(".preview-form input[type=submit]")
    expect(page.locator(".preview-report")).to_be_visible()
    return page.locator("#preview-items tbody tr")


def test_an_operator_raises_a_priority_and_the_preview_shows_the_change(
    server: str, page: Page, admin_users: AdminUsers, acme_http: TenantApi
) -> None:
    route, first, second = unique("priorities"), unique("policy"), unique("tone")
    sources = [guardrails(first, 100), guardrails(second, 50)]
    acme_http.create_route(route, sources, context={"budget": {"context_tokens": 100}})
    operator = admin_users.create("acme", role="operator")
    tenant = tenant_url(server, "acme")
    log_in(page, tenant, operator)

    page.goto(f"{tenant}/admin/routing/route/")
    page.get_by_role("link", name=route, exact=True).click()
    change_url = page.url
    page.get_by_role("link", name="Preview").click()
    items = preview(page, "Where is my order?")
    expect(items.filter(has_text=first)).to_contain_text("kept")
    expect(items.filter(has_text=second)).to_contain_text("dropped")

    page.goto(change_url)
    row = page.locator("tr.form-row").filter(has=page.locator(f'input[value="{second}"]'))
    row.locator("input[name$='-priority']").fill("200")
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist .success")).to_be_visible()
    page.get_by_role("link", name="Preview").click()
    items = preview(page, "Where is my order?")
    expect(items.filter(has_text=second)).to_contain_text("kept")
    expect(items.filter(has_text=second)).to_contain_text("200")
    expect(items.filter(has_text=first)).to_contain_text("dropped")

    sources = {
        s["name"]: s["priority"] for s in acme_http.route(route)["effective_context"]["sources"]
    }
    assert sources == {first: 100, second: 200}


def test_an_operator_adds_two_sources_in_one_save(
    server: str, page: Page, admin_users: AdminUsers, acme_http: TenantApi
) -> None:
    route, first, second = unique("grown"), unique("house-rules"), unique("tone")
    acme_http.create_route(route, [guardrails(unique("existing"), 10)])
    operator = admin_users.create("acme", role="operator")
    tenant = tenant_url(server, "acme")
    log_in(page, tenant, operator)

    page.goto(f"{tenant}/admin/routing/route/")
    page.get_by_role("link", name=route, exact=True).click()
    rows = page.locator(".route-sources tbody tr.form-row")
    expect(rows).to_have_count(2)  # the stored source and one empty row
    add = page.get_by_role("button", name="Add another source")
    add.click()
    add.click()
    expect(rows).to_have_count(4)
    for index, (name, priority) in ((2, (first, 70)), (3, (second, 40))):
        page.fill(f"#id_sources-{index}-name", name)
        page.select_option(f"#id_sources-{index}-type", "skill_guardrails")
        page.fill(f"#id_sources-{index}-priority", str(priority))
        page.fill(f"#id_sources-{index}-texts", f"Rule of {name}.")
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist .success")).to_be_visible()

    stored = acme_http.route(route)["effective_context"]["sources"]
    assert [(s["name"], s["priority"], s["texts"]) for s in stored[1:]] == [
        (first, 70, [f"Rule of {first}."]),
        (second, 40, [f"Rule of {second}."]),
    ]


def test_the_route_page_fits_a_laptop_screen_and_shows_long_texts_whole(
    server: str, page: Page, admin_users: AdminUsers, acme_http: TenantApi
) -> None:
    """At 1,280 px the route page scrolls down only; a long guardrail text and a source's other
    settings are shown in full, not cut off in a small box."""
    route, rules = unique("laptop"), unique("rules")
    long_text = TEXT * 2
    rag = {
        "type": "rag",
        "name": unique("kb"),
        "backend": "external_api",
        "backend_config": {"endpoint": "https://search.example.com/v1/search"},
    }
    long_rules = {**guardrails(rules, 10), "texts": [long_text, "Never promise refunds."]}
    acme_http.create_route(route, [long_rules, rag])
    operator = admin_users.create("acme", role="operator")
    tenant = tenant_url(server, "acme")
    page.set_viewport_size({"width": 1280, "height": 900})
    log_in(page, tenant, operator)
    page.goto(f"{tenant}/admin/routing/route/")
    page.get_by_role("link", name=route, exact=True).click()
    expect(page.locator(".route-sources tbody tr.form-row")).to_have_count(3)

    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    for selector in ("#id_sources-0-texts", "#id_sources-1-settings"):
        box = page.locator(selector)
        expect(box).to_be_visible()
        shown = box.evaluate("(area) => area.scrollHeight <= area.clientHeight + 1")
        assert shown, f"{selector} hides part of what it holds"
    label = page.locator("td.field-texts > label").first
    expect(label).to_have_text("Guardrail texts")
    # No compress block beneath the route: a blank target inherits no compression.
    expect(page.locator("#id_target_tool_outputs_mode option[value='']")).to_have_text(
        "inherit (no compression)"
    )
