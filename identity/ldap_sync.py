"""The periodic LDAP sync: every account linked to a directory entry is looked up again by the
entry's stable id (not by name: a name can be renamed away or given to someone else); its
groups are re-applied, and an account whose entry the directory no longer has is disabled.

The sync never creates an account, never touches an account with a local password, and never
disables anyone on a directory error: an outage must not lock everyone out.
"""

from __future__ import annotations

import logging
from typing import Any

import ldap
from django.conf import settings
from django_auth_ldap.backend import _LDAPUser
from django_auth_ldap.config import LDAPSearch

from identity.accounts import clean_name, disable_account, provider_may_manage
from identity.backends import LDAP_SOURCE, LEGACY_PREFIX, PortalLDAPBackend
from identity.mapping import apply_groups
from identity.models import ExternalIdentity, MembershipAudit

log = logging.getLogger(__name__)


class DirectoryUnavailable(Exception):
    """The directory did not answer a search: nothing is concluded from silence."""


def ldap_sync() -> dict[str, int]:
    """One pass over the LDAP links; returns counts (synced, disabled, changes, skipped)."""
    counts = {"synced": 0, "disabled": 0, "changes": 0, "skipped": 0}
    if not getattr(settings, "AUTH_LDAP_SERVER_URI", ""):
        return counts
    backend = PortalLDAPBackend()
    links = ExternalIdentity.objects.filter(provider=LDAP_SOURCE).select_related("user")
    try:
        for identity in links:
            outcome, changes = _sync_one(backend, identity)
            counts[outcome] += 1
            counts["changes"] += changes
    except DirectoryUnavailable as exc:
        log.warning("LDAP sync stopped, the directory did not answer: %s", exc)
    return counts


def _sync_one(backend: PortalLDAPBackend, identity: ExternalIdentity) -> tuple[str, int]:
    user = identity.user
    if not provider_may_manage(user) or identity.subject.startswith(LEGACY_PREFIX):
        return "skipped", 0  # a local password; or a link re-keyed at its next sign-in
    entry = _entry_for(backend, identity.subject, user.get_username())
    if entry is None:
        if disable_account(user):
            MembershipAudit.objects.create(
                source=LDAP_SOURCE,
                user=user,
                action="account-disabled",
                detail="its entry is gone from the directory",
            )
            log.info("LDAP sync: %s is gone from the directory; disabled", identity.subject)
            return "disabled", 0
        return "skipped", 0
    _names_from(entry, user)
    return "synced", len(apply_groups(user, identity, sorted(entry.group_names), sync=True))


def _entry_for(backend: PortalLDAPBackend, subject: str, username: str) -> Any | None:
    """The directory entry behind ``subject`` (``<attribute>:<value>`` or ``dn:<DN>``), as
    django-auth-ldap's user object (its groups, its attributes), or None when it is gone."""
    probe = _LDAPUser(backend, username=username)
    kind, _, value = subject.partition(":")
    attrlist = ["*", settings.GPUPOOL_LDAP_ID_ATTRIBUTE]
    try:
        connection = probe.connection
        if kind == "dn":
            found = _search(connection, LDAPSearch(value, ldap.SCOPE_BASE, attrlist=attrlist))
        else:
            found = []
            for search in _user_searches():
                by_id = LDAPSearch(
                    search.base_dn, search.scope, f"({kind}={_assertion(kind, value)})", attrlist
                )
                found += _search(connection, by_id)
    except ldap.LDAPError as exc:
        raise DirectoryUnavailable(f"{type(exc).__name__}") from exc
    if len(found) != 1:
        return None
    probe._user_dn, probe._user_attrs = found[0]  # what its own search would have cached
    return probe


def _search(connection: Any, search: LDAPSearch) -> list[tuple[str, Any]]:
    try:
        return search.execute(connection)
    except ldap.NO_SUCH_OBJECT:
        return []


def _user_searches() -> list[LDAPSearch]:
    search = settings.AUTH_LDAP_USER_SEARCH
    return list(getattr(search, "searches", [search]))


def _assertion(kind: str, value: str) -> str:
    """The filter's assertion value: Active Directory's binary objectGUID byte by byte
    (stored as hex), any other id escaped as text."""
    if kind == "objectguid":
        return "".join(f"\\{value[i : i + 2]}" for i in range(0, len(value), 2))
    return ldap.filter.escape_filter_chars(value)


def _names_from(entry: Any, user: Any) -> None:
    """The directory's names for an account it made, as form input (the e-mail is left to
    sign-in, which checks who else has it)."""
    changed = []
    for field, attr in settings.AUTH_LDAP_USER_ATTR_MAP.items():
        values = (entry.attrs or {}).get(attr) or []
        value = clean_name(values[0]) if values else ""
        if value and getattr(user, field) != value:
            setattr(user, field, value)
            changed.append(field)
    if changed:
        user.save(update_fields=changed)
