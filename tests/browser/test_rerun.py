"""An auditor re-runs a replay record from its page: the record and its request resolved again
against the route as it is now, side by side, and what changed. A screenshot at 1,280 x 800 is
left in var/screenshots/ (git-ignored) to look at."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import AdminUsers, TenantApi, log_in, tenant_url, unique
from tests.browser.test_admin_look import VIEWPORT, shot

RULES = {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]}
TONE = {"type": "skill_guardrails", "name": "tone", "texts": ["Answer in one short paragraph."]}


@pytest.fixture
def capturing(in_database: Callable[[Callable[[], Any]], Any]) -> Iterator[None]:
    """acme keeps each request's content (committed: the server is another process). Saved, not
    ``update()``d: the save's signal tells the server to drop the acme tenant it keeps with its
    API key, which an earlier test on the same server may have left there with capture off."""

    def capture(on: bool) -> None:
        from tenants.models import Tenant

        tenant = Tenant.objects.get(schema_name="acme")
        tenant.capture_content = on
        tenant.save(update_fields=["capture_content"])

    in_database(lambda: capture(True))
    yield
    in_database(lambda: capture(False))


def test_an_auditor_reruns_a_record_against_the_route_as_it_is_now(
    server: str, page: Page, admin_users: AdminUsers, acme_http: TenantApi, capturing: None
) -> None:
    route = unique("rerun")
    acme_http.create_route(route, [RULES, TONE])
    record = acme_http.resolve(route, "Where is my parcel?")["id"]
    # The route changed since: the tone source is gone.
    changed = acme_http.client.patch(
        f"/api/v1/routes/{route}", json={"context": {"sources": [RULES]}}
    )
    assert changed.status_code == 200, changed.text
    auditor = admin_users.create("acme", role="auditor")
    tenant = tenant_url(server, "acme")
    page.set_viewport_size(VIEWPORT)
    log_in(page, tenant, auditor)

    page.goto(f"{tenant}/admin/routing/replayrecord/{record}/change/")
    page.locator("#replay-rerun-link").click()
    expect(page.locator("h1")).to_have_text(f"Re-run of {record}")
    expect(page.locator("#rerun-summary")).to_contain_text("1 dropped")
    expect(page.locator("#rerun-sources tr.rerun-changed")).to_contain_text("not in the route now")
    expect(page.locator("#rerun-recorded-items tbody tr")).to_have_count(2)
    expect(page.locator("#rerun-rerun-items tbody tr")).to_have_count(1)
    dropped = page.locator("#rerun-diff tbody tr")
    expect(dropped).to_have_count(1)
    expect(dropped).to_contain_text("dropped")
    expect(dropped).to_contain_text("tone")
    expect(dropped).to_contain_text("sha256:")
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORT["width"]
    shot(page, "replay-rerun")


def test_an_operator_tries_an_unsaved_draft_on_the_last_requests(
    server: str, page: Page, admin_users: AdminUsers, acme_http: TenantApi, capturing: None
) -> None:
    route = unique("draft")
    acme_http.create_route(route, [RULES, TONE])
    for _ in range(2):
        acme_http.resolve(route, "Where is my parcel?")
    operator = admin_users.create("acme", role="operator")
    tenant = tenant_url(server, "acme")
    page.set_viewport_size(VIEWPORT)
    log_in(page, tenant, operator)

    page.goto(f"{tenant}/admin/routing/route/")
    page.get_by_role("link", name=route, exact=True).click()
    page.locator("input[name='sources-1-DELETE']").check()  # the tone source, not saved
    page.fill("#id_try_draft_last", "2")
    with page.context.expect_page() as opened:
        page.locator("#try-draft-button").click()
    trial = opened.value
    expect(trial.locator("#trial-summary")).to_contain_text("Requests re-run")
    expect(trial.locator("#trial-items-changed")).to_contain_text("2 (added, dropped or moved)")
    expect(trial.locator("#trial-failing")).to_have_text("none")
    expect(trial.locator("#trial-lines tbody tr")).to_have_count(2)
    assert int(trial.locator("#trial-tokens-saved").inner_text()) > 0
    shot(trial, "route-try-draft")
    # The route page still holds the draft, and the route is as it was saved.
    expect(page.locator("input[name='sources-1-DELETE']")).to_be_checked()
    assert [s["name"] for s in acme_http.route(route)["context"]["sources"]] == ["rules", "tone"]
