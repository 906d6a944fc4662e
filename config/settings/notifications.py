"""The notifications app: email (SMTP from the environment), webhooks, the watch and the outbox."""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

from config.settings.celery import CELERY_BEAT_SCHEDULE
from config.settings.core import DEBUG, INSTALLED_APPS
from config.settings.environment import _networks_setting, env, env_bool, env_int, env_secret

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
