"""The periodic OpenID Connect sync: the LDAP sync's counterpart for accounts that sign in
through a provider. An OIDC sign-in is a one-off, so without this an account deleted or
disabled at the provider kept its API tokens until someone noticed.

At sign-in the portal asks for ``offline_access`` (where the provider's discovery offers it)
and keeps the refresh token, sealed with ``clusters.secrets.text_seal`` (the cluster
credentials' keys). Each pass trades every active OIDC user's refresh token at the provider:

- the provider refuses it (``invalid_grant``: account deleted or disabled, consent revoked):
  the account is disabled, so its sessions and API tokens stop working (``disable_account``,
  as the LDAP sync does), and the audit says why;
- it answers: the groups claim of the new ID token (else of userinfo) goes through the group
  rules exactly as at sign-in, and a rotated refresh token replaces the stored one;
- anything else (provider down, our client refused, keys rotated away): logged, left alone;
  an outage must never lock everyone out.

A user who signed in without a refresh token (the provider offers no offline_access, or it is
switched off) is left alone and logged: only their next sign-in can see a change.
"""

from __future__ import annotations

import logging
from typing import Any

import requests
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.base_client import OAuthError
from django.conf import settings
from joserfc.errors import JoseError

from clusters.secrets import CredentialsUnreadable, text_open, text_seal
from identity.accounts import disable_account, provider_may_manage
from identity.mapping import apply_groups, groups_of
from identity.models import ExternalIdentity, MembershipAudit
from identity.providers import OidcProvider, client_for, providers

log = logging.getLogger(__name__)

# What a provider answers when a refresh token is no good any more (RFC 6749 §5.2): the
# account behind it is gone or disabled, or the grant was revoked. Anything else is ours.
REFUSED = "invalid_grant"


def refresh_token_keep(identity: ExternalIdentity, token: dict[str, Any]) -> None:
    """Seal the token response's refresh token onto ``identity`` (the caller saves it). A
    response without one keeps the old: a provider need not rotate."""
    refresh = token.get("refresh_token")
    if refresh:
        identity.refresh_token_sealed = text_seal(str(refresh))


def oidc_sync() -> dict[str, int]:
    """One pass over every active OpenID Connect identity of every configured provider;
    returns counts (synced, disabled, changes, skipped: no refresh token, failed)."""
    counts = {"synced": 0, "disabled": 0, "changes": 0, "skipped": 0, "failed": 0}
    for provider in providers():
        identities = ExternalIdentity.objects.filter(
            provider=provider.source, user__is_active=True
        ).select_related("user")
        for identity in identities:
            outcome, changes = _sync_one(provider, identity)
            counts[outcome] += 1
            counts["changes"] += changes
    return counts


def _sync_one(provider: OidcProvider, identity: ExternalIdentity) -> tuple[str, int]:
    who = f"{identity.subject} at {provider.name}"
    if not provider_may_manage(identity.user):
        log.warning("OIDC sync: %s is linked to an account with a local password; left alone", who)
        return "skipped", 0
    if not identity.refresh_token_sealed:
        log.info("OIDC sync: %s has no refresh token (no offline_access); left alone", who)
        return "skipped", 0
    try:
        refresh = text_open(identity.refresh_token_sealed, what=f"the refresh token of {who}")
    except CredentialsUnreadable as exc:
        log.warning("OIDC sync: %s", exc)
        return "failed", 0
    client = client_for(provider)
    try:
        token = client.fetch_access_token(grant_type="refresh_token", refresh_token=refresh)
    except OAuthError as exc:
        if exc.error == REFUSED:
            _disable(provider, identity, exc)
            return "disabled", 0
        log.warning("OIDC sync: %s refused: %s", who, exc.error)
        return "failed", 0
    except (requests.RequestException, AuthlibBaseError, ValueError) as exc:
        log.warning("OIDC sync: %s not reached (%s)", who, type(exc).__name__)
        return "failed", 0
    claims = _claims(provider, client, token)
    if claims is None or str(claims.get("sub")) != identity.subject:
        log.warning("OIDC sync: %s: no claims for this subject came back; left alone", who)
        return "failed", 0
    refresh_token_keep(identity, token)  # a rotated one; saved by apply_groups
    changes = apply_groups(
        identity.user, identity, groups_of(claims, provider.groups_claim), sync=True
    )
    return "synced", len(changes)


def _claims(provider: OidcProvider, client: Any, token: dict[str, Any]) -> dict[str, Any] | None:
    """The refreshed ID token's claims (signature, issuer, audience and expiry checked); the
    userinfo endpoint's when no ID token came back or it carries no groups claim."""
    leeway = settings.GPUPOOL_OIDC_CLOCK_SKEW_SECONDS
    try:
        claims = (
            client.parse_id_token(token, nonce=None, leeway=leeway) if "id_token" in token else None
        )
        if claims is None or provider.groups_claim not in claims:
            info = client.userinfo(token=token)
            claims = {**(claims or {}), **info} if claims else dict(info)
    except (requests.RequestException, AuthlibBaseError, JoseError, ValueError) as exc:
        log.warning("OIDC sync: claims of %s unreadable (%s)", provider.name, type(exc).__name__)
        return None
    return dict(claims)


def _disable(provider: OidcProvider, identity: ExternalIdentity, exc: OAuthError) -> None:
    """Switch the account off (sessions and API tokens at once) and say why in the audit."""
    user = identity.user
    disable_account(user)
    identity.refresh_token_sealed = ""
    identity.save(update_fields=["refresh_token_sealed"])
    MembershipAudit.objects.create(
        source=provider.source,
        user=user,
        action="account-disabled",
        detail=f"the provider refused the refresh token ({REFUSED}: {exc.description or ''})"[:300],
    )
    log.info(
        "OIDC sync: %s at %s refused by the provider; disabled", identity.subject, provider.name
    )
