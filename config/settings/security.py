"""Security: strict transport and cookies when DEBUG is off, then the abuse bounds (trusted
proxies, login lockout, API token failures, Content-Security-Policy).

Read after the notifications part: django-axes joins ``INSTALLED_APPS`` after notifications and
its middleware goes last, as it requires.
"""

from __future__ import annotations

import datetime as dt
import re

from django.core.exceptions import ImproperlyConfigured

from config.settings.core import DEBUG, INSTALLED_APPS, MIDDLEWARE
from config.settings.environment import _networks_setting, env, env_bool, env_int

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
# Abuse bounds: trusted proxies, login lockout, API token failures, Content-Security-Policy
# ---------------------------------------------------------------------------------------------
# X-Forwarded-Proto and X-Forwarded-For are believed only from these peers (the portal's own
# reverse proxies) and dropped from every other request, first thing (portal/proxies.py).
GPUPOOL_TRUSTED_PROXIES = _networks_setting("GPUPOOL_TRUSTED_PROXIES", [])
MIDDLEWARE.insert(0, "portal.proxies.TrustedProxyMiddleware")

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
