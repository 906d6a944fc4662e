"""Authentication backends: local passwords (switchable off but for named break-glass admins),
the session backend of external sign-ins, and LDAP with the group rules applied."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.dispatch import receiver
from django.http import HttpRequest
from django_auth_ldap.backend import LDAPBackend, populate_user
from ldap import dn as ldap_dn

from identity.accounts import SignInRefused, account_for, clean_name, provider_may_manage
from identity.mapping import apply_groups
from identity.models import ExternalIdentity

log = logging.getLogger(__name__)

LDAP_SOURCE = "ldap"
LEGACY_PREFIX = "legacy:"


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
    """django-auth-ldap (bind, user search, group lookup) plus the linking rule of
    ``identity.accounts`` and the group → team/role rules.

    django-auth-ldap finds the Django user by username; here the directory entry's stable id
    (``ldap_subject``) finds it through the stored link instead, so a directory entry named
    ``admin`` can never open the local ``admin``."""

    def get_or_build_user(self, username: str, ldap_user: Any) -> tuple[Any, bool]:
        subject = ldap_subject(ldap_user)
        _rekey_legacy_link(subject, username)
        try:
            user, _ = account_for(
                LDAP_SOURCE,
                subject,
                username=username,
                email=_first(ldap_user.attrs, "mail"),
                full_name=_full_name(ldap_user.attrs),
            )
        except SignInRefused as exc:
            log.warning("LDAP sign-in of %s refused: %s", username, exc)
            request = getattr(ldap_user, "_request", None)
            if request is not None:  # the login page says why, not "wrong password"
                request.sign_in_refused = str(exc)
            raise ldap_user.AuthenticationFailed(str(exc)) from exc
        return user, False  # saved already: account_for made it, linked, with no password

    def authenticate_ldap_user(self, ldap_user: Any, password: str) -> Any:
        user = super().authenticate_ldap_user(ldap_user, password)
        if user is not None:
            ldap_groups_apply(user, ldap_user, sync=False)
        return user

    def get_user(self, user_id: int) -> Any:
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None


@receiver(populate_user)
def _names_as_form_input(sender: Any, user: Any, ldap_user: Any, **kwargs: Any) -> None:
    """The directory's names (``AUTH_LDAP_USER_ATTR_MAP``) are kept as a form would keep them:
    no control characters, no longer than the field. The e-mail is not in that map: it goes
    through ``account_for``, which never takes another account's address."""
    for field in ("first_name", "last_name"):
        setattr(user, field, clean_name(getattr(user, field, "")))


def _first(attrs: Any, name: str) -> str:
    values = (attrs or {}).get(name) or []
    return str(values[0]) if values else ""


def _full_name(attrs: Any) -> str:
    return " ".join(v for v in (_first(attrs, "givenName"), _first(attrs, "sn")) if v)


def ldap_subject(ldap_user: Any) -> str:
    """The directory entry's stable id, as the link stores it: ``entryuuid:<uuid>`` (the
    attribute ``GPUPOOL_LDAP_ID_ATTRIBUTE`` names; ``objectGUID`` on Active Directory, as hex),
    else ``dn:<normalised DN>`` for a directory that offers no such attribute."""
    attr = settings.GPUPOOL_LDAP_ID_ATTRIBUTE
    values = (ldap_user.attrs or {}).get(attr) if attr else None
    if values:
        value = values[0]
        text = value.hex() if isinstance(value, bytes) else str(value)
        return f"{attr.lower()}:{text.strip().lower()}"
    return f"dn:{normalised_dn(ldap_user.dn)}"


def normalised_dn(dn: str) -> str:
    return ldap_dn.dn2str(ldap_dn.str2dn(dn)).lower()


def _rekey_legacy_link(subject: str, username: str) -> None:
    """Move a link made before links held stable ids (``legacy:<username>``, migration 0003)
    to ``subject``, once, at that person's next sign-in. Links to accounts with a local password
    were dropped by the migration, so this reaches only accounts LDAP itself made."""
    if ExternalIdentity.objects.filter(provider=LDAP_SOURCE, subject=subject).exists():
        return
    legacy = (
        ExternalIdentity.objects.select_related("user")
        .filter(provider=LDAP_SOURCE, subject=f"{LEGACY_PREFIX}{username.lower()}")
        .first()
    )
    if legacy is not None and provider_may_manage(legacy.user):
        legacy.subject = subject
        legacy.save(update_fields=["subject"])


def ldap_groups_apply(user: Any, ldap_user: Any, *, sync: bool) -> list[str]:
    """Apply the rules to the directory's groups for ``user``, through its LDAP link."""
    identity = ExternalIdentity.objects.get(provider=LDAP_SOURCE, subject=ldap_subject(ldap_user))
    return apply_groups(user, identity, sorted(ldap_user.group_names), sync=sync)
