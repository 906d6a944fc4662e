"""The database: SQLite under ``var/`` for the demo, PostgreSQL (psycopg 3) in tests and
production."""

from __future__ import annotations

from config.settings.environment import VAR_DIR, env, env_int

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
