"""``make run``'s demo: ``bootstrap_demo`` creates the tenant, its route, documents, memories,
admin users and demo deployment (the local stand-in model, or OpenAI / Anthropic when their key is
set), prints a working key and password, keeps both across starts (in a file of their own,
replaced when asked), and prints the gateway call as curl and as Python with the official client;
end to end, that Python against a live server and the stand-in answers from the context the
gateway injected."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django_tenants.utils import schema_context

from contextplatform.demo.defaults import (
    DEMO_DEPLOYMENT,
    DEMO_MEMORIES,
    DEMO_QUESTION,
    DEMO_RESOLVE_BODY,
    DEMO_SAMPLE_QUESTIONS,
    DEMO_SESSION,
    DEMO_USER,
    SUPPORT_ROUTE,
    demo_deployment,
    openai_snippet,
)
from contextplatform.demo.standin import LABEL, running_standin
from contextplatform.deployments.models import Deployment
from contextplatform.deployments.selectors import upstream_of
from memory.models import Memory
from tenants.models import ApiKey, Tenant
from tenants.roles import ROLES
from tests.conftest import TENANT_KEYS, ApiClient
from tests.live import live_server
from tests.loopback import LOOPBACK, outbound_allowlist

DEMO_HOST = "demo.localhost"
PROVIDER_VARIABLES = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "DEMO_MODEL",
    "STANDIN_PORT",
    "PORT",
    "DEMO_API_KEY",
    "DEMO_ADMIN_PASSWORD",
    "DEMO_ROTATE",
)
OPENAI_SECRET = "sk-demo-openai-" + "5" * 32
ANTHROPIC_SECRET = "sk-ant-demo-" + "6" * 32
GUARDRAIL = SUPPORT_ROUTE["context"]["sources"][0]["texts"][0]


@pytest.fixture(autouse=True)
def no_provider_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test starts as a machine with no provider key (the stand-in's case), no chosen demo
    secrets, and its own credentials file (never the checkout's)."""
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DEMO_CREDENTIALS_FILE", str(tmp_path / "demo-credentials.json"))


@dataclass(frozen=True)
class Bootstrapped:
    key: str
    password: str
    text: str

    def snippet(self) -> str:
        """The Python printed after the curl: every line up to the API docs' line."""
        lines = self.text.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("or with the official"))
        end = next(i for i, line in enumerate(lines) if line.startswith("API docs:"))
        return "\n".join(lines[start + 1 : end])

    def gateway_curl(self) -> list[str]:
        lines = self.text.splitlines()
        calls = [line for line in lines if "curl -s" in line and "/api/v1/" not in line]
        assert len(calls) == 1, self.text
        return shlex.split(calls[0])


def bootstrapped(*args: str) -> Bootstrapped:
    out = io.StringIO()
    call_command("bootstrap_demo", *args, stdout=out)
    connection.set_schema_to_public()
    text = out.getvalue()
    key = re.search(
        r"API key \(all scopes, kept in \S+; DEMO_ROTATE=1 make run [^)]*\): (\S+)", text
    )
    password = re.search(r"password \(kept like the key\): (\S+)", text)
    assert key and password, text
    assert f"http://{DEMO_HOST}:" in text and "/admin/live/" in text
    return Bootstrapped(key=key.group(1), password=password.group(1), text=text)


def bootstrap(*args: str) -> tuple[str, str]:
    done = bootstrapped(*args)
    return done.key, done.password


def demo_deployment_row() -> Deployment:
    with schema_context("demo"):
        from contextplatform.routes.models import Route

        route = Route.objects.get(name="support")
        assert route.spec().model.upstream == DEMO_DEPLOYMENT
        return Deployment.objects.get(name=DEMO_DEPLOYMENT)


def admin_login(username: str, password: str) -> Client:
    client = Client(HTTP_HOST=DEMO_HOST)
    client.post("/admin/login/", {"username": username, "password": password, "next": "/admin/"})
    return client


@pytest.mark.django_db(transaction=False)
def test_the_demo_serves_its_route_and_admin_and_renews_its_secrets(db: Any) -> None:
    key, password = bootstrap()

    response = ApiClient(key).post("/api/v1/resolve", DEMO_RESOLVE_BODY)
    assert response.status_code == 200, response.content
    report = response.json()
    by_name = {source["name"]: source for source in report["sources"]}
    assert set(by_name) == {"guardrails", "profile", "history", "docs", "memories", "manuals"}
    assert all(source["status"] == "ok" for source in by_name.values()), by_name
    assert by_name["docs"]["items"] >= 1  # the demo collection was ingested and is recalled
    system = report["request"]["messages"][0]
    assert system["role"] == "system" and "refund" in system["content"].lower()
    # The route writes no match block: the defaults keep the right article for every sample.
    rags = [source for source in SUPPORT_ROUTE["context"]["sources"] if source["type"] == "rag"]
    assert [rag["name"] for rag in rags] == ["docs", "manuals"]
    assert all("match" not in rag for rag in rags)
    for question, article in DEMO_SAMPLE_QUESTIONS.items():
        body = {
            **DEMO_RESOLVE_BODY,
            "request": {"messages": [{"role": "user", "content": question}]},
        }
        answered = ApiClient(key).post("/api/v1/resolve", body).json()
        docs = next(s for s in answered["sources"] if s["name"] == "docs")
        kept = [c["document_id"] for c in docs["candidates"] if c["kept"]]
        assert article in kept, (question, docs["candidates"])
        if docs["notes"].get("cache") != "hit":  # the first question was asked above
            calibration = docs["notes"]["judge_calibration"][0]["from"]
            assert calibration.startswith("collection support-kb")

    for role in ROLES:
        assert admin_login(role, password).get("/admin/").status_code == 200
    operator = admin_login("operator", password)
    assert operator.get("/admin/routing/route/").status_code == 200
    assert operator.get("/admin/live/").status_code == 200
    assert admin_login("auditor", password).get("/admin/routing/route/add/").status_code == 403

    # A second start keeps the key and the password: scripts of the first run keep working.
    assert bootstrap() == (key, password)
    assert ApiClient(key).post("/api/v1/resolve", DEMO_RESOLVE_BODY).status_code == 200
    assert admin_login("operator", password).get("/admin/").status_code == 200
    # Asked to rotate, it replaces both; the old ones stop working.
    new_key, new_password = bootstrap("--rotate")
    assert new_key != key and new_password != password
    assert ApiClient(key).post("/api/v1/resolve", DEMO_RESOLVE_BODY).status_code == 401
    assert ApiClient(new_key).post("/api/v1/resolve", DEMO_RESOLVE_BODY).status_code == 200
    assert admin_login("operator", password).get("/admin/").status_code == 302
    assert admin_login("operator", new_password).get("/admin/").status_code == 200
    with schema_context("demo"):
        from contextplatform.routes.models import Route

        assert list(Route.objects.values_list("name", flat=True)) == ["support"]


@pytest.mark.django_db(transaction=False)
def test_the_demo_deployment_is_the_stand_in_without_a_provider_key(db: Any) -> None:
    done = bootstrapped()

    deployment = demo_deployment_row()
    assert deployment.protocol == "openai"
    assert deployment.base_url == "http://127.0.0.1:8001/v1"
    assert deployment.may_judge is False and not deployment.api_key_set
    # The gateway's outbound guard refuses loopback unless the tenant allows it: the stand-in's
    # port only, not the whole host.
    assert Tenant.objects.get(schema_name="demo").outbound_allowlist == ["127.0.0.1:8001"]
    assert "local stand-in model at http://127.0.0.1:8001/v1" in done.text

    curl = done.gateway_curl()
    assert curl[2] == "http://127.0.0.1:8000/v1/chat/completions"
    assert f"Authorization: Bearer {done.key}" in curl
    assert {"x-user-id: u_123", "x-session-id: s_9"} <= set(curl)
    snippet = done.snippet()
    assert len(snippet.splitlines()) == 5
    compile(snippet, "<openai snippet>", "exec")
    assert snippet.startswith("from openai import OpenAI")
    assert "base_url='http://127.0.0.1:8000/v1'" in snippet and repr(done.key) in snippet
    assert "model='support'" in snippet and "'x-session-id': 's_9'" in snippet


@pytest.mark.django_db(transaction=False)
def test_a_demo_tenant_of_an_earlier_start_is_narrowed_to_the_stand_ins_port(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrapped()
    demo = Tenant.objects.filter(schema_name="demo")
    demo.update(outbound_allowlist=[LOOPBACK])  # what earlier versions granted: the whole host
    monkeypatch.setenv("STANDIN_PORT", "8118")
    bootstrapped()
    assert demo.get().outbound_allowlist == ["127.0.0.1:8118"]
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:1234/v1")  # a local server
    bootstrapped()
    assert demo.get().outbound_allowlist == ["localhost:1234"]
    monkeypatch.delenv("OPENAI_BASE_URL")
    bootstrapped()
    assert demo.get().outbound_allowlist == []  # a public provider needs none


@pytest.mark.django_db(transaction=False)
def test_a_provider_key_makes_the_demo_deployment_that_provider(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_SECRET)
    monkeypatch.setenv("DEMO_MODEL", "gpt-4.1-mini")
    done = bootstrapped()
    deployment = demo_deployment_row()
    assert (deployment.protocol, deployment.base_url, deployment.model) == (
        "openai",
        "https://api.openai.com/v1",
        "gpt-4.1-mini",
    )
    assert deployment.may_judge is True
    assert OPENAI_SECRET not in deployment.api_key_encrypted  # a Fernet token, not the key
    assert upstream_of(deployment).api_key == OPENAI_SECRET
    assert OPENAI_SECRET not in done.text and "key from OPENAI_API_KEY" in done.text
    compile(done.snippet(), "<openai snippet>", "exec")
    assert done.gateway_curl()[2].endswith("/v1/chat/completions")

    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("DEMO_MODEL")
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_SECRET)
    done = bootstrapped()
    deployment = demo_deployment_row()
    assert (deployment.protocol, deployment.base_url) == ("anthropic", "https://api.anthropic.com")
    assert upstream_of(deployment).api_key == ANTHROPIC_SECRET
    assert ANTHROPIC_SECRET not in done.text and OPENAI_SECRET not in done.text
    curl = done.gateway_curl()
    assert curl[2] == "http://127.0.0.1:8000/v1/messages" and f"x-api-key: {done.key}" in curl
    snippet = done.snippet()
    assert snippet.startswith("from anthropic import Anthropic")
    assert len(snippet.splitlines()) == 5
    compile(snippet, "<anthropic snippet>", "exec")

    # Back to no key: the stand-in again, and the stored provider key is gone.
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    bootstrapped()
    deployment = demo_deployment_row()
    assert deployment.base_url.startswith("http://127.0.0.1:") and not deployment.api_key_set


@pytest.fixture
def acme_gateway(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """A live server whose tenant ``acme`` may reach loopback (where the stand-in listens)."""
    with django_db_blocker.unblock(), outbound_allowlist("acme", [LOOPBACK]), live_server() as url:
        yield url


def test_the_printed_snippet_gets_the_stand_ins_answer_through_the_gateway(
    acme_gateway: str,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    key = TENANT_KEYS["acme"]
    with (
        running_standin() as standin,
        httpx.Client(
            base_url=acme_gateway, timeout=30, headers={"Authorization": f"Bearer {key}"}
        ) as api,
    ):
        deployment = {
            **demo_deployment({"STANDIN_PORT": str(standin.port)}),
            "name": f"demo-standin-{suffix}",
        }
        route = {
            "name": f"demo-support-{suffix}",
            "model": {"upstream": deployment["name"]},
            # The demo route's guardrails (its RAG source needs the demo tenant's collection).
            "context": {
                "sources": [SUPPORT_ROUTE["context"]["sources"][0]],
                "injection": SUPPORT_ROUTE["context"]["injection"],
            },
        }
        created = api.post("/api/v1/deployments", json=deployment)
        assert created.status_code == 201, created.text
        created = api.post("/api/v1/routes", json=route)
        assert created.status_code == 201, created.text
        try:
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(openai_snippet(acme_gateway, key, route["name"]), {})
            answer = printed.getvalue()

            assert answer.startswith(LABEL), answer
            assert f"(guardrails) {GUARDRAIL}" in answer  # the context the gateway injected
            assert DEMO_QUESTION in answer
            session = api.get("/api/v1/sessions/s_9/messages", params={"user": "u_123"})
            assert session.status_code == 200, session.text
            assert session.json()["data"][-1]["content"] == answer.strip()
        finally:
            api.delete(f"/api/v1/routes/{route['name']}")
            api.delete(f"/api/v1/deployments/{deployment['name']}")


def demo_memories() -> list[str]:
    with schema_context("demo"):
        return sorted(Memory.objects.filter(user_id=DEMO_USER).values_list("content", flat=True))


@pytest.mark.django_db(transaction=False)
def test_restarts_keep_the_secrets_and_never_duplicate_the_memories(db: Any) -> None:
    key, password = bootstrap()
    seeded = demo_memories()
    assert seeded == sorted(memory["content"] for memory in DEMO_MEMORIES)
    assert bootstrap() == (key, password)
    assert bootstrap() == (key, password)
    assert demo_memories() == seeded
    live = ApiKey.objects.filter(tenant__schema_name="demo", revoked_at__isnull=True)
    assert [k.name for k in live] == ["initial", "make-run"]  # one demo key, not one per start

    stored = Path(os.environ["DEMO_CREDENTIALS_FILE"])
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    ((database, entry),) = json.loads(stored.read_text()).items()
    assert (entry["api_key"], entry["admin_password"]) == (key, password)
    # A key the database no longer has (a database wiped on its own) is replaced, not trusted.
    lost = "cp_" + "x" * 40
    stored.write_text(json.dumps({database: {**entry, "api_key": lost}}))
    replaced, kept_password = bootstrap()
    assert replaced not in (key, lost) and kept_password == password
    assert ApiClient(replaced).post("/api/v1/resolve", DEMO_RESOLVE_BODY).status_code == 200
    assert ApiClient(key).post("/api/v1/resolve", DEMO_RESOLVE_BODY).status_code == 401


@pytest.mark.django_db(transaction=False)
def test_chosen_secrets_are_honoured_and_rotation_replaces_the_kept_ones(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen_key, chosen_password = "cp_chosen-demo-key-" + "7" * 24, "chosen-Demo-password-42"
    monkeypatch.setenv("DEMO_API_KEY", chosen_key)
    monkeypatch.setenv("DEMO_ADMIN_PASSWORD", chosen_password)
    assert bootstrap() == (chosen_key, chosen_password)
    assert ApiClient(chosen_key).post("/api/v1/resolve", DEMO_RESOLVE_BODY).status_code == 200
    assert admin_login("operator", chosen_password).get("/admin/").status_code == 200
    monkeypatch.delenv("DEMO_API_KEY")
    monkeypatch.delenv("DEMO_ADMIN_PASSWORD")
    assert bootstrap() == (chosen_key, chosen_password)  # kept once chosen

    monkeypatch.setenv("DEMO_ROTATE", "1")
    rotated_key, rotated_password = bootstrap()
    assert rotated_key != chosen_key and rotated_password != chosen_password
    assert ApiClient(chosen_key).post("/api/v1/resolve", DEMO_RESOLVE_BODY).status_code == 401
    # A revoked key chosen again is refused, not brought back.
    monkeypatch.delenv("DEMO_ROTATE")
    monkeypatch.setenv("DEMO_API_KEY", chosen_key)
    with pytest.raises(CommandError, match="revoked"):
        bootstrap()
    monkeypatch.setenv("DEMO_API_KEY", "short")
    with pytest.raises(CommandError, match="DEMO_API_KEY"):
        bootstrap()


@pytest.mark.django_db(transaction=False)
def test_the_demo_route_recalls_writes_compresses_and_records_content(db: Any) -> None:
    key, _ = bootstrap()
    api = ApiClient(key)
    assert Tenant.objects.get(schema_name="demo").capture_content is True

    question = "Please send the replacement headphones to my home address"
    body = {
        "route": "support",
        "user": DEMO_USER,
        "request": {"messages": [{"role": "user", "content": question}]},
    }
    report = api.post("/api/v1/resolve", body).json()
    memories = next(s for s in report["sources"] if s["name"] == "memories")
    assert memories["status"] == "ok" and memories["kept"] >= 1, memories
    system = report["request"]["messages"][0]["content"]
    assert "User lives in Lisbon" in system and "Aurora headphones" in system

    # The replay record keeps the request, the rewritten request and, once handed back, the answer.
    turn = {
        "route": "support",
        "user": DEMO_USER,
        "session": DEMO_SESSION,
        "request": {
            "messages": [
                {
                    "role": "user",
                    "content": "I moved to Porto last week. Is my warranty still valid?",
                }
            ]
        },
    }
    resolved = api.post("/api/v1/resolve", turn).json()
    answer = {"choices": [{"message": {"role": "assistant", "content": "Yes, it is."}}]}
    handed = api.post(f"/api/v1/resolve/{resolved['id']}/response", {"response": answer})
    assert handed.status_code == 202 and handed.json()["memory_write"] == "queued"
    written = api.get(f"/api/v1/users/{DEMO_USER}/memories", {"q": "Porto"}).json()["data"]
    assert any("Porto" in m["content"] for m in written), written
    record = api.get(f"/api/v1/replay/{resolved['id']}").json()
    assert record["request"]["messages"][-1]["content"].startswith("I moved to Porto")
    assert record["rewritten_request"] is not None and record["response"] == answer

    # The compress block: recoverable tool outputs, accepted by the compression preview.
    log = "\n".join(f"order {4000 + i}: shipped to Lisbon by DHL, in transit" for i in range(80))
    request_body = {
        "messages": [
            {"role": "user", "content": "What happened to my return?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "order_log", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": log},
        ]
    }
    preview = api.post(
        "/api/v1/plugins/context/compression/preview",
        {"route": "support", "request_body": request_body},
    )
    assert preview.status_code == 200, preview.content
    plan = preview.json()
    assert plan["applied"] is True and plan["recovery_keys"] == 1
    assert [b["mode"] for b in plan["blocks"]] == ["recoverable"]
    compressed = api.post(
        "/api/v1/resolve", {"route": "support", "user": DEMO_USER, "request": request_body}
    ).json()
    tools = {t["function"]["name"]: t for t in compressed["request"]["tools"]}
    (recovery_key,) = tools["vsr_context_retrieve"]["function"]["parameters"]["properties"]["key"][
        "enum"
    ]
    original = api.post(
        "/api/v1/storage/context-recovery/retrieve",
        {
            "request_id": compressed["id"],
            "key": recovery_key,
            "route": "support",
            "user": DEMO_USER,
        },
    )
    assert original.status_code == 200 and original.json()["content"] == log


@pytest.mark.django_db(transaction=False)
def test_the_demo_routes_evaluation_cases_pass_on_the_demo(
    db: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from contextplatform.demo.defaults import DEMO_EVAL_CASES
    from contextplatform.evals.models import EvalCase, EvalRun

    with django_capture_on_commit_callbacks(execute=True):
        key, _ = bootstrap()
    with schema_context("demo"):
        runs = list(EvalRun.objects.filter(route__name="support"))
    assert len(runs) == 1 and runs[0].status == "done", [r.error for r in runs]
    api = ApiClient(key)
    run = api.get(f"/api/v1/eval-runs/{runs[0].pk}").json()
    missed = [case for case in run["cases"] if not case["hit"]]
    assert run["metrics"]["hit_rate"] == 1.0, missed
    assert run["metrics"]["cases"] == len(DEMO_EVAL_CASES)
    assert api.get("/api/v1/routes/support/evals").json()["cases"] == DEMO_EVAL_CASES
    # A restart writes the cases once and runs the route once per save, never a duplicate.
    with django_capture_on_commit_callbacks(execute=True):
        bootstrap()
    with schema_context("demo"):
        assert EvalCase.objects.filter(route__name="support").count() == len(DEMO_EVAL_CASES)
        again = EvalRun.objects.filter(route__name="support").order_by("created_at")
        assert [r.triggered_by for r in again] == ["save", "save"]
        assert again.last().metrics["hit_rate"] == 1.0
