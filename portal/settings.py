"""Settings for gpupool, read from the environment through one ``environ.Env``.

Embedded defaults (SQLite, kombu's filesystem broker, a local-memory cache) make ``make demo``
run on a machine with neither PostgreSQL nor Redis. Production sets ``DEBUG=false`` plus the
URLs of its services; then a missing ``SECRET_KEY`` is a loud failure, not a silent default.
Every variable is listed in the README. Per-team policy (quotas, weights) lives in the database.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import ipaddress
import os
import re
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


def _networks_setting(name: str, default: list[str]) -> list[str]:
    """A comma-separated list of addresses or CIDRs; a malformed one names the variable."""
    values = [v.strip() for v in env.list(name, default=default) if v.strip()]
    for value in values:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {value!r} is not a network ({exc})") from exc
    return values


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
    # /healthz and /readyz, answered before the host check and the HTTPS redirect (kubelets
    # probe the pod's address over plain HTTP): portal/health.py.
    "portal.health.HealthMiddleware",
    # The request id, user, job and cluster of every log line, and the access line.
    "portal.logs.RequestContextMiddleware",
    # Outermost: a database or Redis outage anywhere below is a 503 "try again", never a 500.
    "portal.outages.OutageMiddleware",
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
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django's backend, its per-request health check asked of the socket first, not of the
    # server (a SELECT 1 per request): portal/pgbackend/base.py.
    DATABASES["default"]["ENGINE"] = "portal.pgbackend"
    # A database host that does not answer (down, a failover) fails a request within seconds
    # (a 503, portal/outages.py) instead of holding it for the system's TCP timeout.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", env_int("DB_CONNECT_TIMEOUT", 5, minimum=1)
    )
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
if CACHES["default"]["BACKEND"].startswith("django_redis."):
    # Everything cached is a hint (throttle counts, cycle triggers, dashboard figures): while
    # Redis is down the cache answers "nothing stored" within a second instead of failing the
    # request (portal/outages.py), and requests go on.
    CACHES["default"].setdefault("OPTIONS", {}).update(
        {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1}
    )
    DJANGO_REDIS_IGNORE_EXCEPTIONS = True
    DJANGO_REDIS_LOG_IGNORED_EXCEPTIONS = False

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
SESSION_ENGINE = "portal.sessions"  # database sessions that refuse a malformed cookie's key

# ---------------------------------------------------------------------------------------------
# REST framework and OpenAPI
# ---------------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # DRF's three, with a JSON depth limit and no NUL in any string (portal/api/parsers.py)
    "DEFAULT_PARSER_CLASSES": [
        "portal.api.parsers.StrictJSONParser",
        "portal.api.parsers.StrictFormParser",
        "portal.api.parsers.StrictMultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.JobCursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "portal.api.schema.PortalAutoSchema",
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
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "portal.models.JobState",
        "ClusterStateEnum": "clusters.models.ClusterState",
    },
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
    # A broker host that does not answer fails a publish within seconds (the callers treat a
    # failed publish as "the reconcile will find it"), instead of the system's TCP timeout.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600, "socket_connect_timeout": 2}
# Workers and beat outlive a broker outage of any length: they reconnect until it is back,
# at start-up too (a worker restarted while Redis is down waits for it instead of exiting).
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
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
# Seconds a process remembers a token that authenticated (no look-up query on the next
# requests); a revocation in another process applies within them. 0: look up every request.
GPUPOOL_API_TOKEN_CACHE_SECONDS = env_int("GPUPOOL_API_TOKEN_CACHE_SECONDS", 5)
# Per-user submit rate (DRF rate syntax), counted in the default cache.
GPUPOOL_SUBMIT_RATE = env.str("SUBMIT_THROTTLE_RATE", default="600/min")
GPUPOOL_BATCH_MAX = env_int("GPUPOOL_BATCH_MAX", 1000, minimum=1)
# Queued (still waiting) jobs a submit may leave in one team, and of one member in one team,
# for a team whose policy leaves ``max_queued_jobs`` / ``max_queued_jobs_per_user`` empty; a
# policy's own value wins. Beyond them a submit is a 429 naming the limit. 0: no default limit.
GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM = env_int("GPUPOOL_MAX_QUEUED_JOBS_PER_TEAM", 5000)
GPUPOOL_MAX_QUEUED_JOBS_PER_USER = env_int("GPUPOOL_MAX_QUEUED_JOBS_PER_USER", 1000)
# The largest request body read (Django's own limit, 2.5 MiB by default): a larger one is a 413
# naming the limit. A 1,000-job batch of ordinary jobs takes about 0.5 MiB.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("GPUPOOL_MAX_REQUEST_BYTES", 2_621_440, minimum=1024)
GPUPOOL_GPU_CATALOG_CSV = env.str(
    "GPUPOOL_GPU_CATALOG_CSV",
    default=str(BASE_DIR / "scheduling" / "data" / "gpu-models.csv"),
)
# Bench-only endpoints (a bare INSERT to compare submit throughput against); never in production.
GPUPOOL_BENCH_ENDPOINTS = env_bool("GPUPOOL_BENCH_ENDPOINTS", False)
# Demo mode (set by ``manage.py run_demo``): the login page names the demo users and their
# password. Only with DEBUG, so a production portal never shows it.
GPUPOOL_DEMO = DEBUG and env_bool("GPUPOOL_DEMO", False)


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
# Where a pod finds its service account (token, ca.crt): clusters registered --in-cluster.
GPUPOOL_SERVICE_ACCOUNT_DIR = env.str(
    "GPUPOOL_SERVICE_ACCOUNT_DIR", default="/var/run/secrets/kubernetes.io/serviceaccount"
)
GPUPOOL_CLUSTER_TIMEOUT_SECONDS = env_int("GPUPOOL_CLUSTER_TIMEOUT_SECONDS", 10, minimum=1)
# Tasks one worker runs for one cluster at once (0: half the worker's slots), so a cluster
# that hangs never holds every slot: cycles and the other clusters keep the rest.
GPUPOOL_CLUSTER_TASK_SLOTS = env_int("GPUPOOL_CLUSTER_TASK_SLOTS", 0)
GPUPOOL_DISPATCH_MAX_ATTEMPTS = env_int("GPUPOOL_DISPATCH_MAX_ATTEMPTS", 8, minimum=1)
# First retry after about this long, doubling per attempt (with jitter), at most a minute.
GPUPOOL_DISPATCH_BACKOFF_MS = env_int("GPUPOOL_DISPATCH_BACKOFF_MS", 1000, minimum=1)
GPUPOOL_INVENTORY_INTERVAL = env_int("GPUPOOL_INVENTORY_INTERVAL", 60, minimum=1)
# How long a new GPU node may take to bring its GPUs up before the doctor calls it broken.
GPUPOOL_DOCTOR_NODE_GRACE_SECONDS = env_int("GPUPOOL_DOCTOR_NODE_GRACE_SECONDS", 600)
GPUPOOL_RECONCILE_INTERVAL = env_int("GPUPOOL_RECONCILE_INTERVAL", 30, minimum=1)
# A cluster unreachable this long gives back the jobs admitted to it whose Volcano Job was
# certainly never created there: requeued, they run elsewhere (clusters.status).
GPUPOOL_UNREACHABLE_REQUEUE_MINUTES = env_int("GPUPOOL_UNREACHABLE_REQUEUE_MINUTES", 10, minimum=1)
GPUPOOL_QUEUE_SYNC_INTERVAL = env_int("GPUPOOL_QUEUE_SYNC_INTERVAL", 300, minimum=1)
# Lost hand-offs (a worker killed mid-dispatch, messages gone with a Redis restart) are sent
# again this often; the reconcile above is the backstop (clusters/redrive.py).
GPUPOOL_REDRIVE_INTERVAL = env_int("GPUPOOL_REDRIVE_INTERVAL", 2, minimum=1)
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
        "clusters-redrive": {
            "task": "clusters.redrive",
            "schedule": float(GPUPOOL_REDRIVE_INTERVAL),
            "options": {"expires": float(GPUPOOL_REDRIVE_INTERVAL)},
        },
        "clusters-deadlines": {
            "task": "clusters.enforce_deadlines",
            "schedule": GPUPOOL_DEADLINES_INTERVAL,
            "options": {"expires": float(GPUPOOL_DEADLINES_INTERVAL)},
        },
    }
)

# LOG_FORMAT=json: one JSON object a line, with request_id, user, job_id and cluster where they
# apply (portal/logs.py); plain (the default) keeps the human-readable line.
LOG_FORMAT = env.str("LOG_FORMAT", default="plain")
if LOG_FORMAT not in {"plain", "json"}:
    raise ImproperlyConfigured(f"LOG_FORMAT must be plain or json, got {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "portal.logs.ContextFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["context"],
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}
# Where long-running processes without HTTP (the cluster watcher) touch their heartbeat for
# `manage.py probe`; an emptyDir on Kubernetes (the root filesystem is read-only there).
GPUPOOL_RUN_DIR = env.str("GPUPOOL_RUN_DIR", default=str(VAR_DIR / "run"))
# A Celery worker serves the histograms its processes observed on this port (0: it does not).
# On Kubernetes web and workers are separate pods, so the web's /metrics cannot read the
# workers' multiprocess files; Prometheus scrapes each worker here as well.
GPUPOOL_WORKER_METRICS_PORT = env_int("GPUPOOL_WORKER_METRICS_PORT", 0)

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
# Preemption people can live with (docs/scheduling.md): the defaults of teams whose policy
# names none, and the pool's budget of GPUs preempted per cycle (0 = no budget).
GPUPOOL_PREEMPTION_MIN_RUNTIME_MINUTES = env_int("GPUPOOL_PREEMPTION_MIN_RUNTIME_MINUTES", 0)
GPUPOOL_TERMINATION_GRACE_SECONDS = env_int("GPUPOOL_TERMINATION_GRACE_SECONDS", 30)
GPUPOOL_PREEMPTION_BUDGET_GPUS = env_int("GPUPOOL_PREEMPTION_BUDGET_GPUS", 0)
# Start estimates (scheduling.estimates): each cycle simulates the queue forward this far and
# for at most this many engine decisions; finished runs of the last days teach the runtimes.
GPUPOOL_ESTIMATE_HORIZON_HOURS = env_int("GPUPOOL_ESTIMATE_HORIZON_HOURS", 7 * 24, minimum=1)
GPUPOOL_ESTIMATE_MAX_STEPS = env_int("GPUPOOL_ESTIMATE_MAX_STEPS", 200, minimum=1)
GPUPOOL_ESTIMATE_HISTORY_DAYS = env_int("GPUPOOL_ESTIMATE_HISTORY_DAYS", 30, minimum=1)
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
# Without a token /metrics answers nobody, unless this is explicitly switched off: behind a
# reverse proxy on the same host every request comes from loopback, so the network check alone
# would let the world in.
GPUPOOL_METRICS_REQUIRE_TOKEN = env_bool("GPUPOOL_METRICS_REQUIRE_TOKEN", True)
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


# ---------------------------------------------------------------------------------------------
# notifications: email (SMTP from the environment), webhooks, the watch and the outbox
# ---------------------------------------------------------------------------------------------
INSTALLED_APPS.append("notifications")
# EMAIL_URL (django-environ: smtp://user:pass@host:587/?tls=True, smtp+ssl://…:465,
# consolemail://, dummymail://) wins; else EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER,
# EMAIL_HOST_PASSWORD (or _FILE), EMAIL_USE_TLS, EMAIL_USE_SSL. Neither: the console in DEBUG
# (the demo prints its mail), no mail at all otherwise until one is set.
if os.environ.get("EMAIL_URL"):
    globals().update(env.email_url("EMAIL_URL"))
elif os.environ.get("EMAIL_HOST"):
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_HOST = env.str("EMAIL_HOST")
    EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
    EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
    EMAIL_HOST_PASSWORD = env_secret("EMAIL_HOST_PASSWORD") or ""
    EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
    EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
else:
    EMAIL_BACKEND = (
        "django.core.mail.backends.console.EmailBackend"
        if DEBUG
        else "django.core.mail.backends.dummy.EmailBackend"
    )
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="gpupool <gpupool@localhost>")
# Webhook URLs pass the clusters' URL guard (clusters/urlcheck.py) when saved and before every
# send: https only, never a metadata, unusable, loopback or link-local address, and a private
# one (RFC 1918, CGNAT, unique-local …) only inside GPUPOOL_WEBHOOK_ALLOW_NETWORKS: a team
# admin must not reach the portal's internal network. The tests and the demo allow local http
# receivers.
GPUPOOL_WEBHOOK_ALLOW_LOCAL = env_bool("GPUPOOL_WEBHOOK_ALLOW_LOCAL", False)
GPUPOOL_WEBHOOK_ALLOW_HTTP = env_bool("GPUPOOL_WEBHOOK_ALLOW_HTTP", False)
GPUPOOL_WEBHOOK_ALLOW_NETWORKS = _networks_setting("GPUPOOL_WEBHOOK_ALLOW_NETWORKS", [])
# The old all-or-nothing switch, gone: failing loudly beats webhooks that stop arriving.
if env_bool("GPUPOOL_WEBHOOK_ALLOW_PRIVATE", False):
    raise ImproperlyConfigured(
        "GPUPOOL_WEBHOOK_ALLOW_PRIVATE is no longer supported (it let every team admin reach "
        "every private address): list the networks webhooks may reach in "
        "GPUPOOL_WEBHOOK_ALLOW_NETWORKS, e.g. 10.20.0.0/16,fd12:3456::/48"
    )
GPUPOOL_WEBHOOK_TIMEOUT_SECONDS = env_int("GPUPOOL_WEBHOOK_TIMEOUT_SECONDS", 10, minimum=1)
# A delivery is tried this many times, the n-th retry BACKOFF × 2^(n-1) seconds after the last.
GPUPOOL_NOTIFY_MAX_ATTEMPTS = env_int("GPUPOOL_NOTIFY_MAX_ATTEMPTS", 6, minimum=1)
GPUPOOL_NOTIFY_BACKOFF_SECONDS = env_int("GPUPOOL_NOTIFY_BACKOFF_SECONDS", 30, minimum=1)
# A worker holds a delivery this long while sending; past it, the sweep records it as
# "unknown" and never sends it again (at most once, docs/decisions.md). Longer than a send.
GPUPOOL_NOTIFY_LEASE_SECONDS = env_int("GPUPOOL_NOTIFY_LEASE_SECONDS", 120, minimum=1)
# "Close to its max runtime": this many minutes before it (at most a tenth of the runtime).
GPUPOOL_NOTIFY_RUNTIME_MARGIN_MINUTES = env_int("GPUPOOL_NOTIFY_RUNTIME_MARGIN_MINUTES", 15)
GPUPOOL_NOTIFY_SWEEP_INTERVAL = env_int("GPUPOOL_NOTIFY_SWEEP_INTERVAL", 30, minimum=1)
CELERY_BEAT_SCHEDULE.update(
    {
        "notifications-watch": {
            "task": "notifications.watch_jobs",
            "schedule": 60.0,
            "options": {"expires": 55.0},
        },
        "notifications-sweep": {
            "task": "notifications.sweep",
            "schedule": float(GPUPOOL_NOTIFY_SWEEP_INTERVAL),
            "options": {"expires": float(GPUPOOL_NOTIFY_SWEEP_INTERVAL)},
        },
    }
)


# ---------------------------------------------------------------------------------------------
# Abuse bounds: trusted proxies, login lockout, API token failures, Content-Security-Policy
# ---------------------------------------------------------------------------------------------
# X-Forwarded-Proto and X-Forwarded-For are believed only from these peers (the portal's own
# reverse proxies) and dropped from every other request, first thing (portal/proxies.py).
GPUPOOL_TRUSTED_PROXIES = _networks_setting("GPUPOOL_TRUSTED_PROXIES", [])
MIDDLEWARE.insert(0, "portal.proxies.TrustedProxyMiddleware")

# A team policy's max_priority names priorities as a submit does: one enum in the schema.
SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]["PriorityEnum"] = ["low", "normal", "high"]
# Two "kind" choice sets: a job's (training, inference) and its endpoint's.
SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]["EndpointKindEnum"] = ["clusterip", "ingress"]
SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]["JobKindEnum"] = "portal.models.JobKind"

# Login brute force (django-axes): failures counted per account and per client address, on
# /login/ and /admin/login/ alike; past the limit both are locked for the cool-off time,
# counted from the last failure. Platform admins unlock in the admin (Users → "Unlock"); an
# account's owner unlocks it with a link sent to its e-mail (/login/unlock/, identity/unlock.py).
INSTALLED_APPS.append("axes")
MIDDLEWARE.append("axes.middleware.AxesMiddleware")  # last, as django-axes requires
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # refuses a locked account or address first
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("GPUPOOL_LOGIN_FAILURE_LIMIT", 5, minimum=1)
GPUPOOL_LOGIN_LOCKOUT_MINUTES = env_int("GPUPOOL_LOGIN_LOCKOUT_MINUTES", 15, minimum=1)
AXES_COOLOFF_TIME = dt.timedelta(minutes=GPUPOOL_LOGIN_LOCKOUT_MINUTES)
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # each on its own, not the pair
AXES_USERNAME_CALLABLE = "portal.web.lockout.login_key"  # LARS and lars: one account, one count
GPUPOOL_UNLOCK_MAIL_INTERVAL_SECONDS = env_int(
    "GPUPOOL_UNLOCK_MAIL_INTERVAL_SECONDS", 300, minimum=1
)
AXES_CLIENT_IP_CALLABLE = "portal.proxies.client_address"
AXES_LOCKOUT_CALLABLE = "portal.web.lockout.login_locked_out"
AXES_DISABLE_ACCESS_LOG = True  # successful logins are not the lockout's business
AXES_VERBOSE = False  # no banner on every manage.py command; lockouts are still logged

# API token failures: per client address, this many per period (DRF rate syntax); beyond it
# every token attempt from there is a 429 with Retry-After until the period is over.
GPUPOOL_API_AUTH_FAILURE_RATE = env.str("GPUPOOL_API_AUTH_FAILURE_RATE", default="20/min")
if not re.fullmatch(r"\d+/(s|sec|second|m|min|minute|h|hour|d|day)", GPUPOOL_API_AUTH_FAILURE_RATE):
    raise ImproperlyConfigured(
        "GPUPOOL_API_AUTH_FAILURE_RATE must look like 20/min (per s, min, hour or day), got "
        f"{GPUPOOL_API_AUTH_FAILURE_RATE!r}"
    )

# Content-Security-Policy on every response (django-csp): scripts and styles only from the
# portal's own static files, nothing inline but style attributes (bar widths the server
# computes), no eval, no frames, forms post only here.
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1,
    "csp.middleware.CSPMiddleware",
)
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}


# ---------------------------------------------------------------------------------------------
# identity: OpenID Connect and LDAP sign-in, group → team/role rules (identity/, README)
# ---------------------------------------------------------------------------------------------
INSTALLED_APPS.append("identity")
TEMPLATES[0]["OPTIONS"]["context_processors"].append("identity.context_processors.team_admin")
# Local passwords: on for everyone by default (the demo); off, only these usernames may use
# one (break-glass platform admins for when the provider is down).
GPUPOOL_LOCAL_LOGIN = env_bool("GPUPOOL_LOCAL_LOGIN", True)
GPUPOOL_LOCAL_LOGIN_ADMINS = [u.strip() for u in env.list("GPUPOOL_LOCAL_LOGIN_ADMINS", default=[])]
AUTHENTICATION_BACKENDS[
    AUTHENTICATION_BACKENDS.index("django.contrib.auth.backends.ModelBackend")
] = "identity.backends.LocalBackend"
AUTHENTICATION_BACKENDS.append("identity.backends.ExternalSessionBackend")
GPUPOOL_OIDC_TIMEOUT_SECONDS = env_int("GPUPOOL_OIDC_TIMEOUT_SECONDS", 10, minimum=1)
GPUPOOL_OIDC_CLOCK_SKEW_SECONDS = env_int("GPUPOOL_OIDC_CLOCK_SKEW_SECONDS", 60)


def _oidc_providers() -> list[dict[str, object]]:
    """``GPUPOOL_OIDC_PROVIDERS=corp,lab`` and, per NAME, ``GPUPOOL_OIDC_<NAME>_ISSUER``,
    ``_CLIENT_ID``, ``_CLIENT_SECRET`` (or ``_CLIENT_SECRET_FILE``), and optional ``_LABEL``,
    ``_SCOPES``, ``_GROUPS_CLAIM``, ``_USERNAME_CLAIM``, ``_OFFLINE_ACCESS``. A missing one
    names the variable."""
    found: list[dict[str, object]] = []
    for name in [n.strip().lower() for n in env.list("GPUPOOL_OIDC_PROVIDERS", default=[])]:
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,30}", name):
            raise ImproperlyConfigured(f"GPUPOOL_OIDC_PROVIDERS: {name!r} is not a short slug")
        prefix = f"GPUPOOL_OIDC_{name.upper().replace('-', '_')}_"
        conf = {
            "name": name,
            "issuer": os.environ.get(prefix + "ISSUER", ""),
            "client_id": os.environ.get(prefix + "CLIENT_ID", ""),
            "client_secret": env_secret(prefix + "CLIENT_SECRET") or "",
        }
        for key, value in conf.items():
            if not value:
                raise ImproperlyConfigured(f"{prefix}{key.upper()} must be set for {name!r}")
        if not conf["issuer"].startswith(("https://", "http://")):
            raise ImproperlyConfigured(f"{prefix}ISSUER must be an http(s) URL")
        conf["label"] = os.environ.get(prefix + "LABEL", name)
        conf["scopes"] = os.environ.get(prefix + "SCOPES", "openid email profile groups")
        conf["groups_claim"] = os.environ.get(prefix + "GROUPS_CLAIM", "groups")
        conf["username_claim"] = os.environ.get(prefix + "USERNAME_CLAIM", "preferred_username")
        # Ask for a refresh token (where discovery offers offline_access): the OIDC sync needs it.
        conf["offline_access"] = env_bool(prefix + "OFFLINE_ACCESS", True)
        found.append(conf)
    return found


GPUPOOL_OIDC_PROVIDERS = _oidc_providers()
if GPUPOOL_OIDC_PROVIDERS:  # the OIDC sync: deleted / disabled accounts, group changes
    CELERY_BEAT_SCHEDULE["identity-oidc-sync"] = {
        "task": "identity.oidc_sync",
        "schedule": float(env_int("GPUPOOL_OIDC_SYNC_INTERVAL", 900, minimum=60)),
    }


def csp_with_providers(policy: dict, providers: list[dict[str, object]]) -> dict:
    """The policy with each provider's origin allowed as a form target: logging out posts to
    the portal, which redirects to the provider's end-session endpoint, and browsers hold a
    form's redirects to ``form-action`` too."""
    directives = {k: list(v) for k, v in policy["DIRECTIVES"].items()}
    for conf in providers:
        origin = "/".join(conf["issuer"].split("/", 3)[:3])
        if origin not in directives["form-action"]:
            directives["form-action"].append(origin)
    return {**policy, "DIRECTIVES": directives}


CONTENT_SECURITY_POLICY = csp_with_providers(CONTENT_SECURITY_POLICY, GPUPOOL_OIDC_PROVIDERS)

# LDAP / Active Directory (django-auth-ldap): on when GPUPOOL_LDAP_URI is set. A directory
# entry is linked to its portal account by this attribute's value (entryUUID; objectGUID on
# Active Directory), else by its DN, never by its name (identity/accounts.py).
GPUPOOL_LDAP_ID_ATTRIBUTE = env.str("GPUPOOL_LDAP_ID_ATTRIBUTE", default="entryUUID")
# A first external sign-in (LDAP or OIDC) whose name a portal account already has: "suffix"
# makes a new account (admin-2), "refuse" refuses it with a message to ask a platform admin.
GPUPOOL_EXTERNAL_NAME_COLLISION = env.str("GPUPOOL_EXTERNAL_NAME_COLLISION", default="suffix")
if GPUPOOL_EXTERNAL_NAME_COLLISION not in ("suffix", "refuse"):
    raise ImproperlyConfigured(
        "GPUPOOL_EXTERNAL_NAME_COLLISION must be suffix or refuse, got "
        f"{GPUPOOL_EXTERNAL_NAME_COLLISION!r}"
    )
AUTH_LDAP_SERVER_URI = env.str("GPUPOOL_LDAP_URI", default="")
if AUTH_LDAP_SERVER_URI:
    import ldap
    from django_auth_ldap.config import (
        ActiveDirectoryGroupType,
        GroupOfNamesType,
        LDAPSearch,
        PosixGroupType,
    )

    AUTH_LDAP_BIND_DN = env.str("GPUPOOL_LDAP_BIND_DN", default="")
    AUTH_LDAP_BIND_PASSWORD = env_secret("GPUPOOL_LDAP_BIND_PASSWORD") or ""
    AUTH_LDAP_START_TLS = env_bool("GPUPOOL_LDAP_START_TLS", False)
    # Every user attribute and the stable id: OpenLDAP returns an operational attribute such
    # as entryUUID only when it is named.
    AUTH_LDAP_USER_SEARCH = LDAPSearch(
        env.str("GPUPOOL_LDAP_USER_BASE"),
        ldap.SCOPE_SUBTREE,
        env.str("GPUPOOL_LDAP_USER_FILTER", default="(uid=%(user)s)"),
        attrlist=["*", GPUPOOL_LDAP_ID_ATTRIBUTE],
    )
    AUTH_LDAP_GROUP_SEARCH = LDAPSearch(
        env.str("GPUPOOL_LDAP_GROUP_BASE"), ldap.SCOPE_SUBTREE, "(objectClass=*)"
    )
    _group_types = {
        "groupOfNames": GroupOfNamesType,
        "posixGroup": PosixGroupType,
        "activeDirectory": ActiveDirectoryGroupType,
    }
    _group_type = env.str("GPUPOOL_LDAP_GROUP_TYPE", default="groupOfNames")
    if _group_type not in _group_types:
        raise ImproperlyConfigured(
            f"GPUPOOL_LDAP_GROUP_TYPE must be one of {', '.join(_group_types)}, got {_group_type!r}"
        )
    AUTH_LDAP_GROUP_TYPE = _group_types[_group_type]()
    # Names only: the e-mail goes through identity.accounts, which checks it and never takes an
    # address another account has.
    AUTH_LDAP_USER_ATTR_MAP = {"first_name": "givenName", "last_name": "sn"}
    AUTH_LDAP_FIND_GROUP_PERMS = False
    AUTH_LDAP_CONNECTION_OPTIONS = {
        ldap.OPT_NETWORK_TIMEOUT: env_int("GPUPOOL_LDAP_TIMEOUT_SECONDS", 5, minimum=1)
    }
    AUTHENTICATION_BACKENDS.append("identity.backends.PortalLDAPBackend")
    CELERY_BEAT_SCHEDULE["identity-ldap-sync"] = {
        "task": "identity.ldap_sync",
        "schedule": float(env_int("GPUPOOL_LDAP_SYNC_INTERVAL", 900, minimum=60)),
    }
