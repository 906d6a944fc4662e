"""The identity app: local, OpenID Connect and LDAP sign-in, group → team/role rules
(identity/, docs/signing-in.md). Read last: it adds its backends to those of the security part
and widens its Content-Security-Policy to each provider's origin."""

from __future__ import annotations

import os
import re

from django.core.exceptions import ImproperlyConfigured

from config.settings.celery import CELERY_BEAT_SCHEDULE
from config.settings.core import INSTALLED_APPS, TEMPLATES
from config.settings.environment import env, env_bool, env_int, env_secret
from config.settings.security import AUTHENTICATION_BACKENDS, CONTENT_SECURITY_POLICY

# ---------------------------------------------------------------------------------------------
# identity: OpenID Connect and LDAP sign-in, group → team/role rules (identity/, docs/signing-in.md)
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
