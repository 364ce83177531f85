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
    expect(page.locator("#live-events tbody tr")).to_have_count(0)

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
        shown = page.locator(f'#live-events tbody tr[data-source="{name}"] td:last-child')
        assert float(shown.first.inner_text()) == ms
