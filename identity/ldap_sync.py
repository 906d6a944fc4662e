"""The periodic LDAP sync: every account that signed in through LDAP is looked up again; its
groups are re-applied, and an account the directory no longer returns is disabled."""

from __future__ import annotations

import logging

from django.conf import settings

from identity.accounts import disable_account
from identity.backends import LDAP_SOURCE, PortalLDAPBackend, ldap_groups_apply
from identity.models import ExternalIdentity, MembershipAudit

log = logging.getLogger(__name__)


def ldap_sync() -> dict[str, int]:
    """One pass over the LDAP identities; returns counts (synced, disabled, changes)."""
    counts = {"synced": 0, "disabled": 0, "changes": 0}
    if not getattr(settings, "AUTH_LDAP_SERVER_URI", ""):
        return counts
    backend = PortalLDAPBackend()
    for identity in ExternalIdentity.objects.filter(provider=LDAP_SOURCE).select_related("user"):
        user = identity.user
        found = backend.populate_user(identity.subject)
        if found is None:
            if disable_account(user):
                counts["disabled"] += 1
                MembershipAudit.objects.create(
                    source=LDAP_SOURCE,
                    user=user,
                    action="account-disabled",
                    detail="not found in the directory",
                )
                log.info("LDAP sync: %s is gone from the directory; disabled", identity.subject)
            continue
        counts["changes"] += len(ldap_groups_apply(found, found.ldap_user, sync=True))
        counts["synced"] += 1
    return counts
