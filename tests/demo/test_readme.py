"""The README's demo walk-through, run as written: ``bootstrap_demo`` on the test database (committed,
the demo tenant dropped afterwards), a live server and the stand-in model, then every ``sh`` block
of "Try every capability on the demo" in one bash, in order, with ``$KEY`` as printed and the
server's address for ``http://127.0.0.1:8000``. What each section prints is checked, so a command
that stops working, or a capability the demo route loses, fails here."""

from __future__ import annotations

import io
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from django.core.management import call_command
from django.db import connection

from contextplatform.demo.standin import LABEL, running_standin
from tenants.models import Tenant

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Try every capability on the demo"
README_SERVER = "http://127.0.0.1:8000"
PROVIDER_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEMO_API_KEY", "DEMO_ROTATE")


def walkthrough_blocks() -> list[str]:
    """The ``sh`` blocks of the section, less the one that shows where the key goes."""
    text = (ROOT / "README.md").read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    blocks = re.findall(r"```sh\n(.*?)```", text[start:end], re.S)
    return [block for block in blocks if "export KEY=cp_..." not in block]


@pytest.fixture(scope="module")
def demo_server(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    from tests.live import live_server

    credentials = tmp_path_factory.mktemp("demo") / "demo-credentials.json"
    with running_standin() as standin, django_db_blocker.unblock():
        environ = {"DEMO_CREDENTIALS_FILE": str(credentials), "STANDIN_PORT": str(standin.port)}
        with mock.patch.dict(os.environ, environ):
            for name in PROVIDER_VARIABLES:
                os.environ.pop(name, None)
            printed = io.StringIO()
            try:
                call_command("bootstrap_demo", stdout=printed)
                connection.set_schema_to_public()
                key = re.search(r"^  export KEY=(\S+)$", printed.getvalue(), re.M)
                assert key, printed.getvalue()
                with live_server() as url:
                    yield url, key.group(1)
            finally:
                connection.set_schema_to_public()
                for tenant in Tenant.objects.filter(schema_name="demo"):
                    tenant.delete(force_drop=True)


def test_the_readme_walkthrough_runs_as_written(demo_server: tuple[str, str]) -> None:
    url, key = demo_server
    blocks = walkthrough_blocks()
    # gateway, resolve, knowledge, memory, compression, replay, re-run, evaluation
    assert len(blocks) == 8, blocks
    script = "set -euo pipefail\n" + "\n".join(blocks).replace(README_SERVER, url)
    assert README_SERVER not in script
    done = subprocess.run(
        ["bash", "-c", script],
        env={**os.environ, "KEY": key},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, (out, done.stderr)
    # The gateway: the stand-in answered from the injected context and the lazy search.
    assert LABEL in out and "(manuals) [Document: Aurora headphones" in out
    # Resolve: every source of the demo route, each ok.
    for source in ("guardrails", "profile", "history", "docs", "memories", "manuals"):
        assert re.search(rf"^{source} ok \d+$", out, re.M), (source, out)
    # Knowledge: the job finished, the route took the new source, the preview keeps its document.
    assert '"status":"done"' in out and "route patched: 200" in out
    assert re.search(r"^returns \[\('return-label', [0-9.]+, True\)\]$", out, re.M), out
    # Memory: the seeded memories listed, recalled into the request, and the handed-back turn
    # written.
    assert "User lives in Lisbon (moved there in March 2026)" in out
    assert "recalled: (2026-03-14) User lives in Lisbon" in out
    assert "recalled: (2026-10-02) User owns the Aurora headphones" in out
    assert '"memory_write":"queued"' in out
    assert "written: User lives in Porto (moved there in" in out
    # Compression: previewed with a recovery key, shrunk with order 4041 kept, recovered whole.
    assert '"recovery_keys":1' in out and '"mode":"recoverable"' in out
    assert "order 4041: Aurora headphones return label issued" in out
    assert "[... context omitted by route compression ...]" in out
    assert "80 lines recovered" in out
    # Lazy source and replay: offered as a tool, both tools served, the content captured.
    assert "lazy: [('manuals', 'skipped', {'lazy': True, 'tool': 'search_manuals'})]" in out
    assert "offered: ['search_manuals', 'vsr_context_retrieve']" in out
    assert "served: [('search_manuals', 'ok'), ('vsr_context_retrieve', 'served')]" in out
    assert "asked: What happened to my Aurora headphones return?" in out
    assert f"answered: {LABEL}" in out and "(vsr_context_retrieve) 2026-12-01 order 4000" in out
    # Re-run: the replayed record resolved again against the route as it is now, diffed.
    assert re.search(
        r"^added \d+ dropped \d+ moved \d+ tokens \{'recorded': \d+, 'rerun': \d+\}$", out, re.M
    ), out
    # Evaluation: the demo's cases listed, a run done on the route's latest version, beside the
    # run its last save started.
    assert "case: refund {'documents': ['refund-policy'], 'text_containing': ['30 days']}" in out
    assert re.search(r"^run: done version \d+ hit rate [0-9.]+$", out, re.M), out
    assert "('refund', True)" in out and re.search(r"^previous: [0-9.]+ warning: ", out, re.M)
