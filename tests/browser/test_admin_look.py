"""The admin looks like the product's on every page it serves: the product's and the tenant's name,
the favicon, a home page at / (the admin's "View site"), a route page showing each source's own
fields, a replay list that reads at 1,280 px, a live chart with labelled axes and a time window,
and a wrong-host login that says where the account signs in.

Each test leaves a screenshot at 1,280 x 800 in var/screenshots/ (git-ignored) to look at."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import AdminUsers, TenantApi, log_in, tenant_url, unique

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
VIEWPORT = {"width": 1280, "height": 800}
PRODUCT = "Context Platform"


def shot(page: Page, name: str, *, full_page: bool = False) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


@pytest.fixture
def wide(page: Page) -> Page:
    page.set_viewport_size(VIEWPORT)
    return page


@pytest.fixture
def deployment(acme_http: TenantApi) -> Iterator[str]:
    name = unique("llm")
    body = {
        "name": name,
        "protocol": "openai",
        "base_url": "https://llm.example.com/v1",
        "model": "gpt-4o-mini",
    }
    response = acme_http.client.post("/api/v1/deployments", json=body)
    assert response.status_code == 201, response.text
    yield name
    acme_http.client.delete(f"/api/v1/deployments/{name}")


def test_the_login_names_the_product_and_the_tenant_and_links_the_favicon(
    server: str, wide: Page
) -> None:
    tenant = tenant_url(server, "acme")
    wide.goto(f"{tenant}/admin/login/")
    expect(wide.locator("#site-name")).to_contain_text(PRODUCT)
    tenant_name = wide.locator("#admin-of").inner_text()
    assert tenant_name and tenant_name != "platform"
    expect(wide).to_have_title(f"Log in | {PRODUCT} · {tenant_name}")
    expect(wide.locator("body")).not_to_contain_text("Django administration")
    icon = wide.locator('link[rel="icon"]').get_attribute("href")
    assert icon and icon.endswith(".svg")
    assert httpx.get(f"{server}{icon}").status_code == 200  # static files: the same on every host
    shot(wide, "login_tenant")

    wide.goto(f"{server}/admin/login/")
    expect(wide.locator("#site-name")).to_contain_text(PRODUCT)
    expect(wide.locator("#admin-of")).to_have_text("platform")
    shot(wide, "login_platform")


def test_the_index_names_the_tenant_and_view_site_leads_home(
    server: str, wide: Page, admin_users: AdminUsers
) -> None:
    tenant = tenant_url(server, "acme")
    log_in(wide, tenant, admin_users.create("acme", role="operator"))
    expect(wide.locator("#site-name")).to_contain_text(PRODUCT)
    expect(wide.locator("body")).not_to_contain_text("Django")
    shot(wide, "index_tenant")

    wide.click("#user-tools a:text('View site')")
    expect(wide).to_have_url(f"{tenant}/")
    expect(wide.locator("h1")).to_contain_text(PRODUCT)
    expect(wide.locator("#home-admin")).to_have_attribute("href", "/admin/")
    expect(wide.locator("#home-api-docs")).to_have_attribute("href", "/api/docs/")
    expect(wide.locator("#home-live")).to_have_attribute("href", "/admin/live/")
    shot(wide, "home_tenant")


def test_home_answers_on_the_platform_host_too(server: str, wide: Page) -> None:
    response = wide.goto(f"{server}/")
    assert response is not None and response.status == 200
    expect(wide.locator("#admin-of")).to_contain_text("platform")
    expect(wide.locator("#home-live")).to_have_count(0)  # no dashboard on the platform host
    shot(wide, "home_platform")


def visible_fields(page: Page, row: str) -> set[str]:
    """The source row's fields shown (by their cell's class)."""
    return set(
        page.locator(f"{row} > td").evaluate_all(
            "(cells) => cells.filter((c) => c.offsetParent !== null)"
            ".map((c) => [...c.classList].find((n) => n.startsWith('field-')))"
        )
    )


def test_a_source_row_shows_only_its_type_s_fields_and_the_upstream_is_a_choice(
    server: str, wide: Page, admin_users: AdminUsers, deployment: str
) -> None:
    tenant = tenant_url(server, "acme")
    log_in(wide, tenant, admin_users.create("acme", role="operator"))
    wide.goto(f"{tenant}/admin/routing/route/add/")
    options = wide.locator("#id_upstream option").all_inner_texts()
    assert deployment in options and "none" in options
    expect(wide.locator(".field-model_name .help")).to_contain_text("upstream deployment's own")

    row = "#sources-0"
    typed = {"field-texts", "field-backend", "field-backend_target", "field-connectors"}
    assert not visible_fields(wide, row) & typed  # no type chosen: the common fields only
    wide.select_option(f"{row} select[name$='-type']", "skill_guardrails")
    shown = visible_fields(wide, row)
    assert "field-texts" in shown and "field-backend" not in shown

    wide.select_option(f"{row} select[name$='-type']", "rag")
    shown = visible_fields(wide, row)
    assert {"field-backend", "field-backend_target", "field-judge_note"} <= shown
    assert "field-texts" not in shown and "field-backend_server" not in shown
    expect(wide.locator(f"{row} td.field-judge_note")).to_contain_text("one extra call")
    wide.select_option(f"{row} select[name$='-backend']", "qdrant")
    assert {"field-backend_server", "field-backend_secret"} <= visible_fields(wide, row)
    wide.locator("#sources-heading").scroll_into_view_if_needed()
    shot(wide, "route_add_rag")

    wide.select_option(f"{row} select[name$='-type']", "realtime_apis")
    shown = visible_fields(wide, row)
    assert "field-connectors" in shown and "field-backend" not in shown


def test_a_route_of_four_sources_fits_a_few_screens(
    server: str, wide: Page, admin_users: AdminUsers, acme_http: TenantApi, deployment: str
) -> None:
    name = unique("four")
    acme_http.create_route(
        name,
        [
            {"type": "skill_guardrails", "name": "rules", "texts": ["Be kind."]},
            {"type": "recent_messages", "name": "history", "last_n_turns": 4},
            {"type": "skill_guardrails", "name": "tone", "texts": ["Answer briefly."]},
            {
                "type": "rag",
                "name": "search",
                "backend": "external_api",
                "backend_config": {"endpoint": "http://127.0.0.1:9/search"},
            },
        ],
        model={"name": "gpt-4o-mini", "upstream": deployment},
    )
    tenant = tenant_url(server, "acme")
    log_in(wide, tenant, admin_users.create("acme", role="operator"))
    wide.goto(f"{tenant}/admin/routing/route/?q={name}")
    wide.click(f"#result_list a:text('{name}')")
    expect(wide.locator("#id_upstream")).to_have_value(deployment)
    assert "field-texts" in visible_fields(wide, "#sources-0")
    assert "field-texts" not in visible_fields(wide, "#sources-1")
    assert "field-backend" in visible_fields(wide, "#sources-3")
    assert "field-backend_target" not in visible_fields(wide, "#sources-3")  # external_api
    wide.locator("#sources-heading").scroll_into_view_if_needed()
    shot(wide, "route_change_sources")
    shot(wide, "route_change_full", full_page=True)
    height = wide.evaluate("document.documentElement.scrollHeight")
    assert height < 3200, f"the route page is {height} px tall"


def test_the_replay_list_shows_sessions_and_ids_on_one_line(
    server: str, wide: Page, admin_users: AdminUsers, acme_http: TenantApi
) -> None:
    route = unique("replayed")
    acme_http.create_route(route, [{"type": "skill_guardrails", "name": "r", "texts": ["Hi."]}])
    body = {
        "route": route,
        "user": "u1",
        "session": "s_look_1",
        "request": {"messages": [{"role": "user", "content": "hi"}]},
    }
    assert acme_http.client.post("/api/v1/resolve", json=body).status_code == 200
    tenant = tenant_url(server, "acme")
    log_in(wide, tenant, admin_users.create("acme", role="auditor"))
    wide.goto(f"{tenant}/admin/routing/replayrecord/?route={route}")
    expect(wide.locator("#result_list thead")).to_contain_text("Session")
    row = wide.locator("#result_list tbody tr").first
    expect(row.locator("td.field-session")).to_contain_text("s_look_1")
    one_line = row.locator("td.field-status").evaluate("(c) => c.clientHeight")
    for cell in ("th.field-id", "td.field-session", "td.field-created", "td.field-route"):
        height = row.locator(cell).evaluate("(c) => c.clientHeight")
        assert height <= one_line, f"{cell} is {height} px tall, a line is {one_line}"
    full_id = row.locator("th.field-id a").inner_text()  # cut short on screen, whole as text
    assert full_id.startswith("rsv_") and len(full_id) > 20
    shot(wide, "replay_list")
    fits = wide.locator(".results").evaluate("(box) => box.scrollWidth <= box.clientWidth")
    assert fits, "the replay list scrolls sideways at 1,280 px"
    assert wide.evaluate("document.documentElement.scrollWidth") <= 1280


def test_the_live_chart_labels_its_axes_and_colours_each_source(
    server: str, wide: Page, admin_users: AdminUsers, acme_http: TenantApi
) -> None:
    route = unique("chart")
    names = [unique("s") for _ in range(3)]
    acme_http.create_route(
        route, [{"type": "skill_guardrails", "name": n, "texts": ["Be kind."]} for n in names]
    )
    for _ in range(3):
        acme_http.resolve(route)
    tenant = tenant_url(server, "acme")
    log_in(wide, tenant, admin_users.create("acme"))
    wide.goto(f"{tenant}/admin/live/")
    expect(wide.locator("#live-x-title")).to_have_text("time")
    expect(wide.locator("#live-y-title")).to_have_text("latency (ms)")
    expect(wide.locator("#live-window")).to_have_value("900")
    groups = wide.locator(f'#live-latency g[data-route="{route}"]')
    expect(groups).to_have_count(3)
    colours = {groups.nth(i).get_attribute("data-color") for i in range(3)}
    assert len(colours) == 3
    wide.select_option("#live-window", "60")
    expect(groups.first.locator("circle")).to_have_count(3)
    shot(wide, "live_dashboard")


def test_the_right_password_on_the_wrong_host_names_the_tenant_s_host(
    server: str, wide: Page, admin_users: AdminUsers
) -> None:
    user = admin_users.create("acme", role="operator")
    wide.goto(f"{server}/admin/login/")
    wide.fill("#id_username", user.username)
    wide.fill("#id_password", user.password)
    wide.click("input[type=submit]")
    error = wide.locator(".errornote")
    expect(error).to_contain_text("belongs to another host's admin")
    expect(error).to_contain_text("acme.localhost")
    expect(error).not_to_contain_text("correct username and password")
    shot(wide, "login_wrong_host")
