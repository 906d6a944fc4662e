"""OpenID Connect providers from settings, each an Authlib client (discovery, JWKS, PKCE)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from authlib.integrations.django_client import OAuth
from django.conf import settings
from django.http import Http404


@dataclass(frozen=True)
class OidcProvider:
    name: str
    label: str
    issuer: str
    client_id: str
    client_secret: str
    scopes: str
    groups_claim: str
    username_claim: str
    offline_access: bool = True  # ask for a refresh token (for the sync) where offered

    @property
    def source(self) -> str:
        """How memberships and identities name this provider."""
        return f"oidc:{self.name}"

    def __repr__(self) -> str:  # never the secret, in a log line or an error page
        return f"OidcProvider({self.name!r}, issuer={self.issuer!r})"


def providers() -> list[OidcProvider]:
    """Every configured provider, in the order the login page lists them."""
    return [OidcProvider(**conf) for conf in settings.GPUPOOL_OIDC_PROVIDERS]


def provider_named(name: str) -> OidcProvider:
    for provider in providers():
        if provider.name == name:
            return provider
    raise Http404("No such sign-in provider.")


def sign_in_params(provider: OidcProvider, client: Any) -> dict[str, str]:
    """The authorization request's scope: the configured scopes, plus ``offline_access`` when
    the provider's discovery offers it and it is wanted (the refresh token it brings lets the
    sync see a deleted account). OpenID Connect Core §11 asks for ``prompt=consent`` with it,
    and providers that follow it (oidc-provider, Google) drop offline_access without."""
    scopes = provider.scopes.split()
    offered = client.load_server_metadata().get("scopes_supported") or []
    if provider.offline_access and "offline_access" in offered:
        if "offline_access" not in scopes:
            scopes.append("offline_access")
        return {"scope": " ".join(scopes), "prompt": "consent"}
    return {"scope": provider.scopes}


@lru_cache(maxsize=16)
def client_for(provider: OidcProvider) -> Any:
    """The provider's Authlib client; one per configuration, so discovery and the key set are
    fetched once (and the key set again when a token names a key it does not hold)."""
    oauth = OAuth()
    return oauth.register(
        name=provider.name,
        client_id=provider.client_id,
        client_secret=provider.client_secret,
        server_metadata_url=provider.issuer.rstrip("/") + "/.well-known/openid-configuration",
        client_kwargs={
            "scope": provider.scopes,
            "code_challenge_method": "S256",
            "timeout": settings.GPUPOOL_OIDC_TIMEOUT_SECONDS,
        },
    )
