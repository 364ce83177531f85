"""An operator compares a route's arms: the route page links its Variants, the table shows main
and each variant over the chosen window with the applications' feedback, and saving the route
page keeps the variants the API wrote. Leaves a screenshot at 1,280 x 800 in var/screenshots/."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser.conftest import AdminUsers, TenantApi, log_in, tenant_url, unique

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"


def test_an_operator_compares_a_routes_arms(
    server: str, page: Page, admin_users: AdminUsers, acme_http: TenantApi
) -> None:
    route, rules, tone = unique("arms"), unique("rules"), unique("tone")
    guard = {"type": "skill_guardrails", "name": rules, "texts": ["Be kind."]}
    brief = {"type": "skill_guardrails", "name": tone, "texts": ["Be brief."]}
    variants = [{"name": "brief", "weight": 0.5, "context": {"sources": [guard, brief]}}]
    acme_http.create_route(route, [guard], variants=variants)
    arms: dict[str, int] = {}
    for index in range(24):
        body = {
            "route": route,
            "user": f"shopper-{index}",
            "request": {"messages": [{"role": "user", "content": "Where is my order?"}]},
        }
        answer = acme_http.client.post("/api/v1/resolve", json=body)
        assert answer.status_code == 200, answer.text
        arm = answer.headers["x-context-variant"]
        arms[arm] = arms.get(arm, 0) + 1
        score = 1 if arm == "brief" or index % 3 else -1
        given = acme_http.client.post(
            f"/api/v1/resolve/{answer.json()['id']}/feedback", json={"score": score}
        )
        assert given.status_code == 201, given.text
    assert set(arms) == {"main", "brief"}

    operator = admin_users.create("acme", role="operator")
    tenant = tenant_url(server, "acme")
    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(page, tenant, operator)
    page.goto(f"{tenant}/admin/routing/route/")
    page.get_by_role("link", name=route, exact=True).click()
    change_url = page.url
    page.get_by_role("link", name="Variants").click()

    rows = page.locator("tr.arm-row")
    expect(rows).to_have_count(2)
    main, brief_row = rows.nth(0), rows.nth(1)
    expect(main.locator("td").nth(0)).to_have_text("main")
    expect(main.locator("td").nth(2)).to_have_text(str(arms["main"]))
    expect(brief_row.locator("td").nth(0)).to_have_text("brief")
    expect(brief_row.locator("td").nth(1)).to_have_text("50%")
    expect(brief_row.locator("td").nth(2)).to_have_text(str(arms["brief"]))
    expect(brief_row.locator("td").nth(9)).to_have_text("1")  # every brief answer liked
    expect(brief_row.locator("td").nth(10)).to_have_text("—")  # no evaluation set
    expect(page.locator(".arms-window a.selected")).to_have_text("7 days")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "route-variants.png"))

    page.get_by_role("link", name="1 day").click()
    expect(page.locator(".arms-window a.selected")).to_have_text("1 day")
    expect(rows.nth(1).locator("td").nth(2)).to_have_text(str(arms["brief"]))

    # The route page does not edit variants; saving it keeps them.
    page.goto(change_url)
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist .success")).to_be_visible()
    assert acme_http.route(route)["variants"] == variants
