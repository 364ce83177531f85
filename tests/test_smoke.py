def test_healthz(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_resolve_minimal(acme_api):
    route = {
        "name": "r1",
        "context": {"sources": [{"type": "skill_guardrails", "texts": ["Be kind."]}]},
    }
    assert acme_api.post("/api/v1/routes", route).status_code == 201
    response = acme_api.post(
        "/api/v1/resolve",
        {"route": "r1", "request": {"messages": [{"role": "user", "content": "hi"}]}},
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["sources"][0]["status"] == "ok"
    assert body["items"][0]["kept"] is True
