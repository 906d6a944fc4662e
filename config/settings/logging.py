"""What the processes report: log lines (plain or JSON), the watcher's heartbeat folder, the
workers' metrics port."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from config.settings.environment import VAR_DIR, env, env_int

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
