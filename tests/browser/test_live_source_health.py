"""The live dashboard marks a source that raises a health alert: at page load from the health
rows, and again as new resolves arrive on the stream. Leaves a screenshot at 1,280 x 800 in
var/screenshots/ to look at."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser.conftest import AdminUsers, TenantApi, log_in, tenant_url, unique
from tests.browser.test_live_dashboard import guardrails, refused_search

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
FAILING_AFTER = 5  # the failing rule's minimum of failed requests


def test_a_failing_source_is_flagged_at_load_and_as_events_arrive(
    server: str, page: Page, admin_users: AdminUsers, acme_http: TenantApi
) -> None:
    user = admin_users.create("acme")
    rules, search, route = unique("rules"), unique("search"), unique("health")
    acme_http.create_route(route, [guardrails(rules), refused_search(search)])
    for _ in range(FAILING_AFTER):
        acme_http.resolve(route)

    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(page, tenant_url(server, "acme"), user)
    page.goto(f"{tenant_url(server, 'acme')}/admin/live/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")

    flagged = page.locator(f'#live-sources tr[data-route="{route}"][data-source="{search}"]')
    expect(flagged).to_have_attribute("data-alert", "failing")
    expect(flagged.locator(".live-alert")).to_have_text("failing")
    healthy = page.locator(f'#live-sources tr[data-route="{route}"][data-source="{rules}"]')
    expect(healthy.locator(".live-healthy")).to_have_text("healthy")
    expect(healthy).not_to_have_attribute("data-alert", "failing")

    # A second route starts failing while the page is open: flagged without a reload.
    later, broken = unique("later"), unique("broken")
    acme_http.create_route(later, [refused_search(broken)])
    for _ in range(FAILING_AFTER):
        acme_http.resolve(later)
    row = page.locator(f'#live-sources tr[data-route="{later}"][data-source="{broken}"]')
    expect(row.locator(".live-alert")).to_have_text("failing", timeout=15000)

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#live-sources").scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "live-source-health.png"))
