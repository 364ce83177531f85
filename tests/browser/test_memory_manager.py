"""A memory manager looks one user's memories up in the tenant's admin."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.conftest import AdminUsers, TenantApi, log_in, tenant_url, unique


def test_a_memory_manager_finds_one_users_memories(
    server: str, page: Page, admin_users: AdminUsers, acme_http: TenantApi
) -> None:
    user, other = unique("customer"), unique("customer")
    notes = {user: ["Prefers email over phone calls.", "Lives in Lyon."], other: ["Has a dog."]}
    for owner, contents in notes.items():
        for content in contents:
            response = acme_http.client.post(
                f"/api/v1/users/{owner}/memories", json={"content": content}
            )
            assert response.status_code == 201, response.text
    manager = admin_users.create("acme", role="memory_manager")
    tenant = tenant_url(server, "acme")
    page.set_viewport_size({"width": 1280, "height": 900})
    log_in(page, tenant, manager)
    try:
        page.get_by_role("link", name="Memories", exact=True).first.click()
        expect(page.locator("h1")).to_have_text("Select memory to change")

        page.get_by_label("user id").fill(user)
        page.get_by_label("user id").press("Enter")
        rows = page.locator("#result_list tbody tr")
        expect(rows).to_have_count(2)
        expect(rows.filter(has_text="Lives in Lyon.")).to_have_count(1)
        expect(page.locator("#result_list")).not_to_contain_text("Has a dog.")

        page.fill("#searchbar", "email")
        page.press("#searchbar", "Enter")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("Prefers email over phone calls.")
        expect(page.get_by_label("user id")).to_have_value(user)  # the search keeps the filter
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    finally:
        for owner in notes:
            acme_http.client.delete(f"/api/v1/users/{owner}/memories")
