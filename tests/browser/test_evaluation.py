"""An operator writes a route's evaluation cases, runs them, then saves the route without the
source a case needs: the route's page warns that the save made it worse, and the Evaluation page
shows the latest run beside the previous one, case by case."""

from __future__ import annotations

import json

from playwright.sync_api import Page, expect

from tests.browser.conftest import AdminUsers, TenantApi, log_in, tenant_url, unique
from tests.browser.test_admin_look import VIEWPORT, shot

POLICY = "Refunds are accepted within 30 days of delivery."
TONE = "Answer politely and briefly."


def test_a_save_that_drops_a_needed_source_is_flagged(
    server: str, page: Page, admin_users: AdminUsers, acme_http: TenantApi
) -> None:
    page.set_viewport_size(VIEWPORT)
    route, policy, tone = unique("evaluated"), unique("policy"), unique("tone")
    acme_http.create_route(
        route,
        [
            {"type": "skill_guardrails", "name": policy, "priority": 100, "texts": [POLICY]},
            {"type": "skill_guardrails", "name": tone, "priority": 50, "texts": [TONE]},
        ],
    )
    cases = [
        {
            "id": "refund-window",
            "query": "Can I return it?",
            "expect": {"text_containing": ["30 days"]},
        },
        {"id": "tone", "query": "Hello", "expect": {"text_containing": ["politely"]}},
    ]
    operator = admin_users.create("acme", role="operator")
    tenant = tenant_url(server, "acme")
    log_in(page, tenant, operator)

    page.goto(f"{tenant}/admin/routing/route/")
    page.get_by_role("link", name=route, exact=True).click()
    change_url = page.url
    page.get_by_role("link", name="Evaluation").click()
    expect(page.locator("#content-main")).to_contain_text("No run yet")
    page.fill("#id_cases", json.dumps(cases, indent=2))
    page.click("input[name=save]")
    expect(page.locator(".messagelist .success")).to_contain_text("2 evaluation case(s) saved")
    page.click("input[name=run]")
    expect(page.locator(".messagelist .success")).to_contain_text("Evaluation run")
    metrics = page.locator(".evaluation-metrics")
    expect(metrics.locator("tr", has_text="hit_rate")).to_contain_text("1.0")
    expect(page.locator(".evaluation-cases tr.evaluation-hit")).to_have_count(2)

    # The policy source deleted in the route's own form: the save runs the cases again.
    page.goto(change_url)
    row = page.locator("tr.form-row").filter(has=page.locator(f'input[value="{policy}"]'))
    row.locator("input[name$='-DELETE']").check()
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist .success")).to_be_visible()
    warning = page.locator(".evaluation-warning")
    expect(warning).to_contain_text("the last save")
    expect(warning).to_contain_text("hit rate fell from 100% to 50%")
    shot(page, "route-evaluation-warning")

    page.get_by_role("link", name="See the evaluation").click()
    expect(page.locator(".evaluation-warning")).to_contain_text("hit rate fell")
    hit_rate = page.locator(".evaluation-metrics tr", has_text="hit_rate")
    expect(hit_rate).to_contain_text("0.5")
    expect(hit_rate).to_contain_text("1.0")  # the previous run, beside it
    missed = page.locator(".evaluation-cases tr.evaluation-miss")
    expect(missed).to_have_count(1)
    expect(missed).to_contain_text("refund-window")
    expect(missed).to_contain_text("text_containing: 30 days")
    shot(page, "route-evaluation", full_page=True)
