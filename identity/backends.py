"""Authentication backends: local passwords (switchable off but for named break-glass admins),
the session backend of external sign-ins, and LDAP with the group rules applied."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest
from django_auth_ldap.backend import LDAPBackend

from identity.mapping import apply_groups
from identity.models import ExternalIdentity

LDAP_SOURCE = "ldap"


def local_login_allowed(username: str | None) -> bool:
    """Local passwords work for everyone unless ``GPUPOOL_LOCAL_LOGIN`` is off; then only for
    the usernames in ``GPUPOOL_LOCAL_LOGIN_ADMINS`` (break-glass when the provider is down)."""
    if settings.GPUPOOL_LOCAL_LOGIN:
        return True
    return bool(username) and username in settings.GPUPOOL_LOCAL_LOGIN_ADMINS


class LocalBackend(ModelBackend):
    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        if not local_login_allowed(username):
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class ExternalSessionBackend(ModelBackend):
    """Holds the sessions of OpenID Connect sign-ins: never checks a password itself, and
    (ModelBackend's ``get_user``) drops a session as soon as its account is disabled."""

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> None:
        return None


class PortalLDAPBackend(LDAPBackend):
    """django-auth-ldap (bind, user search, group lookup) plus the group → team/role rules."""

    def authenticate_ldap_user(self, ldap_user: Any, password: str) -> Any:
        user = super().authenticate_ldap_user(ldap_user, password)
        if user is not None:
            ldap_groups_apply(user, ldap_user, sync=False)
        return user

    def get_user(self, user_id: int) -> Any:
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None


def ldap_groups_apply(user: Any, ldap_user: Any, *, sync: bool) -> list[str]:
    """Record the LDAP identity and apply the rules to the directory's groups for ``user``."""
    identity, _ = ExternalIdentity.objects.get_or_create(
        provider=LDAP_SOURCE, subject=user.get_username(), defaults={"user": user}
    )
    return apply_groups(user, identity, sorted(ldap_user.group_names), sync=sync)
