"""The settings as a deployment starts them (a fresh interpreter each, ``django.setup()``):
``DJANGO_ENV=production`` refuses development defaults, naming each; with ``REDIS_URL`` the Celery
options that let a killed worker's task run again within a minute."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.live import ROOT

SETUP = "import django; django.setup(); print('started')"
GOOD = {
    "DJANGO_ENV": "production",
    "SECRET_KEY": "a-long-random-value-for-this-test-only-0123456789",
    "ALLOWED_HOSTS": "api.example.com,.example.com",
    "METRICS_TOKEN": "a-token-for-this-test-only",
    # Never connected to by django.setup(): the refusal must come before any database is chosen.
    "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
}


def started(code: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key not in env}
    environment.update({key: value for key, value in env.items() if value is not None})
    environment["DJANGO_SETTINGS_MODULE"] = "contextplatform.settings"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_production_starts_with_its_own_settings() -> None:
    result = started(SETUP, **GOOD, DEBUG=None)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "started"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"DEBUG": "1"}, "DEBUG is on"),
        ({"SECRET_KEY": None}, "SECRET_KEY is the development key"),
        (
            {"SECRET_KEY": "dev-insecure-change-me-in-production"},
            "SECRET_KEY is the development key",
        ),
        ({"ALLOWED_HOSTS": None}, "ALLOWED_HOSTS is not set"),
        ({"ALLOWED_HOSTS": " , "}, "ALLOWED_HOSTS is not set"),
        ({"METRICS_TOKEN": None}, "METRICS_TOKEN is not set"),
    ],
)
def test_production_refuses_each_development_default(
    change: dict[str, str | None], named: str
) -> None:
    result = started(SETUP, **{**GOOD, "DEBUG": None, **change})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert named in result.stderr
    assert "started" not in result.stdout


def test_production_names_every_problem_at_once() -> None:
    result = started(
        SETUP, DJANGO_ENV="production", DEBUG="true", SECRET_KEY=None, ALLOWED_HOSTS=None
    )
    assert result.returncode != 0
    for named in ("DEBUG is on", "SECRET_KEY is the development key", "ALLOWED_HOSTS is not set"):
        assert named in result.stderr


def test_development_keeps_its_defaults() -> None:
    environment = {
        **GOOD,
        "DJANGO_ENV": None,
        "SECRET_KEY": None,
        "ALLOWED_HOSTS": None,
        "DEBUG": "1",
    }
    result = started(SETUP, **environment)
    assert result.returncode == 0, result.stderr[-2000:]


def test_an_unknown_environment_is_refused() -> None:
    result = started(SETUP, **{**GOOD, "DJANGO_ENV": "prod"})
    assert result.returncode != 0 and "DJANGO_ENV must be" in result.stderr


def test_celery_hands_a_killed_workers_task_out_again_within_a_minute() -> None:
    code = (
        "import json; from contextplatform.celery import app; c = app.conf; print(json.dumps({"
        "'acks_late': c.task_acks_late, 'reject': c.task_reject_on_worker_lost,"
        "'prefetch': c.worker_prefetch_multiplier, 'transport': c.broker_transport_options}))"
    )
    result = started(code, **{**GOOD, "REDIS_URL": "redis://127.0.0.1:1/0", "DJANGO_ENV": None})
    assert result.returncode == 0, result.stderr[-2000:]
    conf = json.loads(result.stdout)
    assert conf["acks_late"] is True and conf["reject"] is True and conf["prefetch"] == 1
    transport = conf["transport"]
    # Redelivered after visibility_timeout, found by the next look (every interval times throttle).
    found_within = transport["visibility_timeout"] + (
        transport["unacked_restore_interval"] * transport["unacked_restore_throttle"]
    )
    assert found_within < 60


def test_the_cache_gives_up_on_a_redis_that_does_not_answer() -> None:
    """A Redis that accepts connections and never answers (a partition) costs a cache read the
    configured timeout (``REDIS_TIMEOUT_MS``, to connect and for each answer): the read raises
    redis' TimeoutError, which the rate limit and the retrieval cache treat as Redis down."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel accepts; nobody ever reads or answers
        port = silent.getsockname()[1]
        code = (
            "import django; django.setup(); from django.core.cache import cache\n"
            "pool = cache._cache._get_connection_pool(False).connection_kwargs\n"
            "print(pool['socket_connect_timeout'], pool['socket_timeout'])\n"
            "try:\n    cache.get('anything')\nexcept Exception as error:\n"
            "    print(type(error).__module__, type(error).__name__)\n"
        )
        result = started(
            code,
            **{
                **GOOD,
                "DJANGO_ENV": None,
                "REDIS_URL": f"redis://127.0.0.1:{port}/0",
                "REDIS_TIMEOUT_MS": "300",
            },
        )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["0.3", "0.3", "redis.exceptions", "TimeoutError"]
