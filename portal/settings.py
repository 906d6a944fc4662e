"""Settings for gpupool, read from the environment through one ``environ.Env``.

Embedded defaults (SQLite, kombu's filesystem broker, a local-memory cache) make ``make demo``
run on a machine with neither PostgreSQL nor Redis. Production sets ``DEBUG=false`` plus the
URLs of its services; then a missing ``SECRET_KEY`` is a loud failure, not a silent default.
Every variable is listed in the README. Per-team policy (quotas, weights) lives in the database.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import os
from pathlib import Path

import environ
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("GPUPOOL_VAR_DIR", BASE_DIR / "var"))

env = environ.Env()


def env_secret(name: str, default: str | None = None) -> str | None:
    """Read a secret from ``NAME`` or from the file named by ``NAME_FILE`` (Docker secrets)."""
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        try:
            return Path(file_path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_path!r} cannot be read: {exc}") from exc
    return os.environ.get(name, default)


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    """An integer setting; a malformed or out-of-range value names the variable."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_bool(name: str, default: bool) -> bool:
    """A boolean setting; anything but the usual spellings is an error naming the variable."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {raw!r}")


# ---------------------------------------------------------------------------------------------
# Core
# ---------------------------------------------------------------------------------------------
DEBUG = env_bool("DEBUG", True)

_secret_key = env_secret("SECRET_KEY")
if not _secret_key:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG=false")
    _secret_key = "django-insecure-demo-only-key-never-use-in-production-0123456789"
SECRET_KEY = _secret_key

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
SITE_URL = env.str("SITE_URL", default="http://127.0.0.1:8000")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "portal",
    "scheduling",
    "clusters",
    "dashboards",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "portal.middleware.RejectNulBytesMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

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
            ],
        },
    },
]

# ---------------------------------------------------------------------------------------------
# Database: SQLite by default, PostgreSQL (psycopg 3) in tests and production
# ---------------------------------------------------------------------------------------------
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'gpupool.sqlite3'}"),
}
DATABASES["default"].setdefault("CONN_MAX_AGE", env_int("DB_CONN_MAX_AGE", 60))
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The demo runs web, worker and beat on one SQLite file: wait for locks instead of failing.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# ---------------------------------------------------------------------------------------------
# Cache: local memory by default; Redis in production so throttles are shared by all workers
# ---------------------------------------------------------------------------------------------
CACHES = {"default": env.cache_url("CACHE_URL", default="locmemcache://gpupool")}
# Parallel test workers share one Redis: keep their keys apart.
CACHES["default"]["KEY_PREFIX"] = env.str("CACHE_KEY_PREFIX", default="gpupool") + os.environ.get(
    "PYTEST_XDIST_WORKER", ""
)

# ---------------------------------------------------------------------------------------------
# Auth, i18n, static
# ---------------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = DEBUG

# ---------------------------------------------------------------------------------------------
# Security: strict when DEBUG is off (``manage.py check --deploy`` passes), relaxable by env
# ---------------------------------------------------------------------------------------------
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True

# ---------------------------------------------------------------------------------------------
# REST framework and OpenAPI
# ---------------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.JobCursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.api.errors.api_exception_handler",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "gpupool API",
    "DESCRIPTION": "Submit and follow GPU jobs on a shared pool of Kubernetes clusters.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {"JobStateEnum": "portal.models.JobState"},
}

# ---------------------------------------------------------------------------------------------
# Celery: kombu's filesystem transport by default (no server needed), Redis in production
# ---------------------------------------------------------------------------------------------
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "broker"
    for _sub in ("out", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "out"),
        "data_folder_out": str(_broker_dir / "out"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TASK_IGNORE_RESULT = True
# Celery's Django fixup closes every database connection around each task unless this is set;
# portal/celery.py applies Django's own rule (CONN_MAX_AGE, health checks) at task boundaries
# instead, and the fixup only recycles a thread's connections every this many tasks.
CELERY_DB_REUSE_MAX = 1000
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "prune-api-tokens": {"task": "portal.prune_api_tokens", "schedule": 24 * 3600},
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# ---------------------------------------------------------------------------------------------
# gpupool
# ---------------------------------------------------------------------------------------------
# Upper bound on GPUs one replica may ask for until clusters report their largest node.
GPUPOOL_MAX_GPUS_PER_REPLICA = env_int("GPUPOOL_MAX_GPUS_PER_REPLICA", 8, minimum=1)
GPUPOOL_MAX_REPLICAS = env_int("GPUPOOL_MAX_REPLICAS", 512, minimum=1)
# Upper bound on a job's retry budget (Volcano maxRetry: gang restarts after evictions).
GPUPOOL_MAX_RETRY = env_int("GPUPOOL_MAX_RETRY", 10)
GPUPOOL_API_TOKEN_DAYS = env_int("GPUPOOL_API_TOKEN_DAYS", 90, minimum=1)
# Per-user submit rate (DRF rate syntax), counted in the default cache.
GPUPOOL_SUBMIT_RATE = env.str("SUBMIT_THROTTLE_RATE", default="600/min")
GPUPOOL_BATCH_MAX = env_int("GPUPOOL_BATCH_MAX", 1000, minimum=1)
GPUPOOL_GPU_CATALOG_CSV = env.str(
    "GPUPOOL_GPU_CATALOG_CSV",
    default=str(BASE_DIR / "scheduling" / "data" / "gpu-models.csv"),
)
# Bench-only endpoints (a bare INSERT to compare submit throughput against); never in production.
GPUPOOL_BENCH_ENDPOINTS = env_bool("GPUPOOL_BENCH_ENDPOINTS", False)


# ---------------------------------------------------------------------------------------------
# clusters: credentials at rest, URL checks, per-cluster request budgets, sync intervals
# ---------------------------------------------------------------------------------------------
def _cluster_secret_keys() -> list[str]:
    """Fernet keys for cluster credentials, newest first (comma-separated, or from a file).

    In DEBUG a key is derived from SECRET_KEY so ``make demo`` needs no setup; in production a
    missing key is a start-up error, never a silently generated one (a restart would then
    leave every stored credential unreadable).
    """
    raw = env_secret("GPUPOOL_SECRET_KEYS") or ""
    keys = [k.strip() for k in raw.split(",") if k.strip()]
    if not keys:
        if not DEBUG:
            raise ImproperlyConfigured(
                "GPUPOOL_SECRET_KEYS (or GPUPOOL_SECRET_KEYS_FILE) must be set when DEBUG=false: "
                "comma-separated Fernet keys, the current key first"
            )
        digest = hashlib.sha256(b"gpupool-cluster-credentials:" + SECRET_KEY.encode()).digest()
        return [base64.urlsafe_b64encode(digest).decode()]
    for index, key in enumerate(keys):
        try:
            ok = len(base64.urlsafe_b64decode(key.encode())) == 32
        except (ValueError, binascii.Error):
            ok = False
        if not ok:
            raise ImproperlyConfigured(
                f"GPUPOOL_SECRET_KEYS: key {index + 1} is not a Fernet key (32 url-safe base64 "
                "bytes; make one with: python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())')"
            )
    return keys


GPUPOOL_SECRET_KEYS = _cluster_secret_keys()
# kubesim in the demo and the tests listens on 127.0.0.1; production clusters never do.
GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS = env_bool("GPUPOOL_ALLOW_LOCAL_CLUSTER_URLS", DEBUG)
GPUPOOL_ALLOW_PRIVATE_CLUSTER_URLS = env_bool("GPUPOOL_ALLOW_PRIVATE_CLUSTER_URLS", True)
# Defaults for clusters that do not set their own (sized for one Volcano controller).
GPUPOOL_CLUSTER_REQUEST_RATE = env_int("GPUPOOL_CLUSTER_REQUEST_RATE", 50, minimum=1)
GPUPOOL_CLUSTER_CREATES_IN_FLIGHT = env_int("GPUPOOL_CLUSTER_CREATES_IN_FLIGHT", 16, minimum=1)
GPUPOOL_CLUSTER_TIMEOUT_SECONDS = env_int("GPUPOOL_CLUSTER_TIMEOUT_SECONDS", 10, minimum=1)
GPUPOOL_DISPATCH_MAX_ATTEMPTS = env_int("GPUPOOL_DISPATCH_MAX_ATTEMPTS", 8, minimum=1)
# First retry after about this long, doubling per attempt (with jitter), at most a minute.
GPUPOOL_DISPATCH_BACKOFF_MS = env_int("GPUPOOL_DISPATCH_BACKOFF_MS", 1000, minimum=1)
GPUPOOL_INVENTORY_INTERVAL = env_int("GPUPOOL_INVENTORY_INTERVAL", 60, minimum=1)
GPUPOOL_RECONCILE_INTERVAL = env_int("GPUPOOL_RECONCILE_INTERVAL", 30, minimum=1)
GPUPOOL_QUEUE_SYNC_INTERVAL = env_int("GPUPOOL_QUEUE_SYNC_INTERVAL", 300, minimum=1)
# No job holds GPUs past its bound (clusters/deadlines.py): a RUNNING job is stopped this long
# after its max runtime; pods that cannot pull their image or build their container fail the
# job after START_FAILURE; a gang with no replica on a node is requeued after UNSCHEDULABLE,
# at most UNSCHEDULABLE_REQUEUES times, then fails.
GPUPOOL_DEADLINES_INTERVAL = env_int("GPUPOOL_DEADLINES_INTERVAL", 15, minimum=1)
GPUPOOL_MAX_RUNTIME_GRACE_SECONDS = env_int("GPUPOOL_MAX_RUNTIME_GRACE_SECONDS", 120)
GPUPOOL_START_FAILURE_SECONDS = env_int("GPUPOOL_START_FAILURE_SECONDS", 300, minimum=1)
GPUPOOL_UNSCHEDULABLE_SECONDS = env_int("GPUPOOL_UNSCHEDULABLE_SECONDS", 600, minimum=1)
GPUPOOL_UNSCHEDULABLE_REQUEUES = env_int("GPUPOOL_UNSCHEDULABLE_REQUEUES", 2)
# Give the clusters app's tasks a queue of their own (dedicated dispatch workers in
# production; one queue per test session, so a test's worker never sees another's tasks).
GPUPOOL_CLUSTERS_QUEUE = env.str("GPUPOOL_CLUSTERS_QUEUE", default="")
if GPUPOOL_CLUSTERS_QUEUE:
    CELERY_TASK_ROUTES = {
        **globals().get("CELERY_TASK_ROUTES", {}),
        "clusters.*": {"queue": GPUPOOL_CLUSTERS_QUEUE},
    }
CELERY_BEAT_SCHEDULE.update(
    {
        "clusters-sync-inventory": {
            "task": "clusters.sync_all_inventories",
            "schedule": GPUPOOL_INVENTORY_INTERVAL,
        },
        "clusters-reconcile": {
            "task": "clusters.reconcile_all_clusters",
            "schedule": GPUPOOL_RECONCILE_INTERVAL,
        },
        "clusters-sync-queues": {
            "task": "clusters.sync_all_queues",
            "schedule": GPUPOOL_QUEUE_SYNC_INTERVAL,
        },
        "clusters-deadlines": {
            "task": "clusters.enforce_deadlines",
            "schedule": GPUPOOL_DEADLINES_INTERVAL,
            "options": {"expires": float(GPUPOOL_DEADLINES_INTERVAL)},
        },
    }
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}

# ---------------------------------------------------------------------------------------------
# Scheduling
# ---------------------------------------------------------------------------------------------
GPUPOOL_SCHEDULER_INTERVAL_SECONDS = env_int("GPUPOOL_SCHEDULER_INTERVAL_SECONDS", 5, minimum=1)
GPUPOOL_SCHEDULER_LOOKBACK = env_int("GPUPOOL_SCHEDULER_LOOKBACK", 1000, minimum=1)
# Triggered cycles (submit, finish, cancel) start at most this often: under a stream of submits
# back-to-back cycles would each reload every running job for a handful of new ones.
GPUPOOL_SCHEDULER_MIN_GAP_MS = env_int("GPUPOOL_SCHEDULER_MIN_GAP_MS", 300)
GPUPOOL_STARVATION_WAIT_MINUTES = env_int("GPUPOOL_STARVATION_WAIT_MINUTES", 120, minimum=1)
GPUPOOL_USAGE_HALF_LIFE_HOURS = env_int("GPUPOOL_USAGE_HALF_LIFE_HOURS", 7 * 24, minimum=1)
GPUPOOL_PREEMPTION = env_bool("GPUPOOL_PREEMPTION", True)
CELERY_BEAT_SCHEDULE.update(
    {
        "scheduling-cycle": {
            "task": "scheduling.run_cycle",
            "schedule": float(GPUPOOL_SCHEDULER_INTERVAL_SECONDS),
            "options": {"expires": float(GPUPOOL_SCHEDULER_INTERVAL_SECONDS)},
        },
        "scheduling-usage": {"task": "scheduling.account_usage", "schedule": 60.0},
    }
)


# ---------------------------------------------------------------------------------------------
# Dashboards: snapshots and their retention, wait-time window, cost, DCGM, /metrics
# ---------------------------------------------------------------------------------------------
def _env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    """A decimal setting; a malformed or negative value names the variable."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from exc
    if not value >= minimum:  # also refuses nan
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {raw!r}")
    return value


GPUPOOL_DASHBOARD_REFRESH_SECONDS = env_int("GPUPOOL_DASHBOARD_REFRESH_SECONDS", 15, minimum=1)
# Every other team's name and aggregate figures (GPUs, quota, shares, waits; never its jobs)
# on the pool overview and fair-share pages; false folds them into "other teams".
GPUPOOL_DASHBOARD_SHOW_OTHER_TEAMS = env_bool("GPUPOOL_DASHBOARD_SHOW_OTHER_TEAMS", True)
GPUPOOL_SNAPSHOT_MINUTE_RETENTION_DAYS = env_int(
    "GPUPOOL_SNAPSHOT_MINUTE_RETENTION_DAYS", 30, minimum=1
)
GPUPOOL_SNAPSHOT_HOUR_RETENTION_DAYS = env_int(
    "GPUPOOL_SNAPSHOT_HOUR_RETENTION_DAYS", 365, minimum=1
)
GPUPOOL_WAIT_WINDOW_HOURS = env_int("GPUPOOL_WAIT_WINDOW_HOURS", 24 * 7, minimum=1)
# Chargeback price of one cost-factor-1.0 GPU-hour; 0 = use each model's catalog price.
GPUPOOL_PRICE_PER_GPU_HOUR = _env_float("GPUPOOL_PRICE_PER_GPU_HOUR", 0.0)
GPUPOOL_COST_CURRENCY = env.str("GPUPOOL_COST_CURRENCY", default="USD")
# DCGM exporter metrics through each cluster's Prometheus (Cluster.prometheus_url).
GPUPOOL_PROMETHEUS_TIMEOUT_SECONDS = _env_float(
    "GPUPOOL_PROMETHEUS_TIMEOUT_SECONDS", 3.0, minimum=0.1
)
GPUPOOL_DCGM_INTERVAL = env_int("GPUPOOL_DCGM_INTERVAL", 60, minimum=10)
GPUPOOL_DCGM_IDLE_PERCENT = _env_float("GPUPOOL_DCGM_IDLE_PERCENT", 5.0)
GPUPOOL_DCGM_IDLE_MINUTES = env_int("GPUPOOL_DCGM_IDLE_MINUTES", 30, minimum=1)
GPUPOOL_DCGM_POD_LABELS = env.list("GPUPOOL_DCGM_POD_LABELS", default=["exported_pod", "pod"])
GPUPOOL_DCGM_NAMESPACE_LABELS = env.list(
    "GPUPOOL_DCGM_NAMESPACE_LABELS", default=["exported_namespace", "namespace"]
)
# /metrics: the caller's address must be in one of these networks, and when a token is set the
# request must carry it (Authorization: Bearer …). Both apply when both are set.
GPUPOOL_METRICS_TOKEN = env_secret("GPUPOOL_METRICS_TOKEN") or ""
GPUPOOL_METRICS_ALLOWED_NETWORKS = env.list(
    "GPUPOOL_METRICS_ALLOWED_NETWORKS", default=["127.0.0.0/8", "::1/128"]
)
for _network in GPUPOOL_METRICS_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_network.strip(), strict=False)
    except ValueError as _exc:
        raise ImproperlyConfigured(
            f"GPUPOOL_METRICS_ALLOWED_NETWORKS: {_network!r} is not a network ({_exc})"
        ) from _exc
CELERY_BEAT_SCHEDULE.update(
    {
        "dashboards-snapshot": {
            "task": "dashboards.snapshot",
            "schedule": crontab(),  # at the start of every minute: one snapshot per minute
            "options": {"expires": 55.0},
        },
        "dashboards-downsample": {"task": "dashboards.downsample", "schedule": 300.0},
        "dashboards-prune": {"task": "dashboards.prune", "schedule": 3600.0},
        "dashboards-dcgm": {
            "task": "dashboards.collect_gpu_metrics",
            "schedule": float(GPUPOOL_DCGM_INTERVAL),
            "options": {"expires": float(GPUPOOL_DCGM_INTERVAL)},
        },
    }
)
