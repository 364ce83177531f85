"""The whole OpenAPI schema against a live server: uvicorn serving the ASGI app over real HTTP
on real PostgreSQL, every operation of the schema sent generated requests with the acme tenant's
key. No answer may be a server error, and each one's status, content type and body must be what
the schema documents (the error envelope under every error status included). The examples are
bounded and derandomized, so a run is the same run every time.

The operations come from the schema generated in this process, and the first test checks that it
is the document the live server serves at ``/api/schema/`` (schemathesis' schemas loaded from a
fixture do not run under this pytest). The last test runs schemathesis' own command line over the
whole served schema with every phase it has (boundary values of each parameter, fuzzing, and
stateful sequences that create a resource and then read it, such as a collection's documents),
on the data the earlier calls left: no answer may be a server error. The server commits what the calls write:
``tests/reliability/probes.py`` puts acme's schema back as it was when the module ends, so later
tests see the tenant they expect."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, settings

from tests.conftest import TENANT_KEYS
from tests.core.test_openapi_conformance import CHECKS, schema_document
from tests.live import live_server
from tests.reliability.probes import schema_left_as_found


@pytest.fixture(scope="module")
def live_url(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    # Without Redis: documents are ingested in the request (no task queued that a later test's
    # worker would find, its job long gone), and nothing depends on a Redis being there.
    with schema_left_as_found("acme", django_db_blocker), live_server({"REDIS_URL": ""}) as base:
        yield base


@pytest.fixture(scope="module")
def session(live_url: str) -> Iterator[requests.Session]:
    with requests.Session() as http:
        http.headers["Authorization"] = f"Bearer {TENANT_KEYS['acme']}"
        yield http


# The operations are generated from the schema at collection, before any server runs (pytest
# parametrizes then); the first test checks that it is the very document the live server serves.
DOCUMENT = schema_document()
schema = schemathesis.openapi.from_dict(DOCUMENT)


def test_the_live_server_serves_this_schema(live_url: str) -> None:
    served = requests.get(f"{live_url}/api/schema/", params={"format": "json"}, timeout=30)
    assert served.status_code == 200, served.text
    assert served.json() == DOCUMENT


@schema.parametrize()
@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_the_live_server_answers_every_operation_as_documented(
    case: Any, live_url: str, session: requests.Session
) -> None:
    case.call_and_validate(base_url=live_url, session=session, checks=CHECKS, timeout=30)


# Bounded and seeded, as above: about a minute over the whole schema.
CLI_EXAMPLES = 50
CLI_SEED = 1


# The whole schema; and a collection's operations on their own, so that its documents are read
# after fuzzed documents were written into a collection the same run created.
@pytest.mark.parametrize("paths", [".*", "/collections"], ids=["whole schema", "collections"])
def test_schemathesis_phases_find_no_server_error(
    live_url: str, tmp_path: Path, paths: str
) -> None:
    command = Path(sys.executable).parent / "st"
    run = subprocess.run(
        [
            str(command),
            "run",
            f"{live_url}/api/schema/?format=json",
            "--header",
            f"Authorization: Bearer {TENANT_KEYS['acme']}",
            "--include-path-regex",
            paths,
            "--checks",
            "not_a_server_error",
            "--max-examples",
            str(CLI_EXAMPLES),
            "--seed",
            str(CLI_SEED),
            "--workers",
            "1",
            "--continue-on-failure",
            "--request-timeout",
            "30",
            "--no-color",
        ],
        cwd=tmp_path,  # what the command line keeps of a run (its replays) stays out of the tree
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-4_000:]
