"""Celery's broker and task defaults (``CELERY_*``, read by config/celery.py); each app's part
adds its periodic tasks to ``CELERY_BEAT_SCHEDULE``."""

from __future__ import annotations

from config.settings.environment import VAR_DIR, env

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
# config/celery.py applies Django's own rule (CONN_MAX_AGE, health checks) at task boundaries
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
