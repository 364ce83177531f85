"""The tenant admin's live dashboard draws the /ws/metrics/ stream while resolves run."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.conftest import AdminUsers, TenantApi, log_in, tenant_url, unique

RESOLVES = 3


def guardrails(name: str) -> dict[str, object]:
    return {"type": "skill_guardrails", "name": name, "texts": ["Be kind."]}


def refused_search(name: str) -> dict[str, object]:
    """A RAG source whose endpoint the outbound guard refuses (loopback): it fails every time."""
    endpoint = "http://127.0.0.1:9/search"
    return {
        "type": "rag",
        "name": name,
        "backend": "external_api",
        "backend_config": {"endpoint": endpoint},
    }


def test_the_dashboard_draws_each_source_outcome_as_resolves_run(
    server: str, page: Page, admin_users: AdminUsers, acme_http: TenantApi
) -> None:
    user = admin_users.create("acme")  # any active staff user of the tenant; no model permission
    rules, search, route = unique("rules"), unique("search"), unique("dash")
    acme_http.create_route(route, [guardrails(rules), refused_search(search)])

    log_in(page, tenant_url(server, "acme"), user)
    page.click("#live-dashboard-link a")
    expect(page).to_have_url(f"{tenant_url(server, 'acme')}/admin/live/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    expect(page.locator("#live-events tbody tr").filter(has_text=route)).to_have_count(0)

    reports = [acme_http.resolve(route) for _ in range(RESOLVES)]
    assert [s["status"] for s in reports[-1]["sources"]] == ["ok", "failed"]

    events = page.locator("#live-events tbody tr").filter(has_text=route)
    expect(events).to_have_count(2 * RESOLVES)
    expect(page.locator("#live-events tbody tr.live-failed").filter(has_text=route)).to_have_count(
        RESOLVES
    )
    expect(events.first).to_contain_text(
        "failed"
    )  # newest first: the last outcome of the last resolve

    kept = page.locator(f'#live-sources tr[data-source="{rules}"]')
    expect(kept.locator(".live-events-count")).to_have_text(str(RESOLVES))
    expect(kept.locator(".live-failures")).to_have_text("0")
    expect(kept.locator(".live-failures")).not_to_have_class("live-failures live-failing")
    expect(kept.locator(".live-items")).to_have_text(str(RESOLVES))
    expect(kept.locator(".live-kept")).to_have_text(str(RESOLVES))

    failing = page.locator(f'#live-sources tr[data-source="{search}"]')
    expect(failing.locator(".live-failures")).to_have_text(str(RESOLVES))
    expect(failing.locator(".live-failures")).to_have_class("live-failures live-failing")
    expect(failing.locator(".live-kept")).to_have_text("0")

    chart = page.locator("#live-latency")
    expect(chart.locator(f'g[data-source="{rules}"] circle')).to_have_count(RESOLVES)
    expect(chart.locator(f'g[data-source="{search}"] circle')).to_have_count(RESOLVES)
    expect(page.locator("#live-legend")).to_contain_text(rules)

    # The latencies shown are the ones the resolve reported.
    last_ms = {s["name"]: s["ms"] for s in reports[-1]["sources"]}
    for name, ms in last_ms.items():
        shown = page.locator(f'#live-events tbody tr[data-source="{name}"] td.live-ms')
        assert float(shown.first.inner_text()) == ms


def test_the_dashboard_opens_with_the_latest_resolves_and_says_why_a_source_failed(
    server: str, page: Page, admin_users: AdminUsers, acme_http: TenantApi
) -> None:
    """Resolves that ran before the page was opened are drawn at once, from the replay records,
    with the route of each source and the error of the one that failed."""
    user = admin_users.create("acme")
    rules, search, route = unique("rules"), unique("search"), unique("history")
    acme_http.create_route(route, [guardrails(rules), refused_search(search)])
    reports = [acme_http.resolve(route) for _ in range(2)]
    error = next(s["error"] for s in reports[-1]["sources"] if s["name"] == search)
    assert error

    log_in(page, tenant_url(server, "acme"), user)
    page.goto(f"{tenant_url(server, 'acme')}/admin/live/")
    events = page.locator("#live-events tbody tr.live-history").filter(has_text=route)
    expect(events).to_have_count(4)  # before any new traffic
    failed = page.locator(f'#live-events tbody tr.live-failed[data-source="{search}"]')
    expect(failed.first.locator("td.live-error")).to_have_text(error)

    failing = page.locator(f'#live-sources tr[data-source="{search}"]')
    expect(failing.locator("td.live-route")).to_have_text(route)
    expect(failing.locator(".live-failures")).to_have_text("2")
    expect(failing.locator("td.live-error")).to_have_text(error)
    expect(page.locator(f'#live-latency g[data-source="{rules}"] circle')).to_have_count(2)

    # The stream adds to the history, and its failures carry their error too.
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    acme_http.resolve(route)
    live = page.locator(f'#live-events tbody tr.live-failed[data-source="{search}"]')
    expect(live).to_have_count(3)
    expect(live.first).not_to_have_class("live-failed live-history")
    expect(live.first.locator("td.live-error")).to_have_text(error)
    expect(failing.locator(".live-failures")).to_have_text("3")
