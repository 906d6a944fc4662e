"""Sign-in pages: the login page with its "Sign in with …" buttons, the OpenID Connect
redirect and callback (Authlib: state, nonce and PKCE kept in the session, the ID token's
signature and claims checked against the provider's discovery and JWKS), and logout, which
ends the provider's session too when it offers an end-session endpoint."""

from __future__ import annotations

import logging
from typing import Any

import requests
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.base_client import OAuthError
from django.conf import settings
from django.contrib import auth
from django.contrib.auth import views as auth_views
from django.core.exceptions import NON_FIELD_ERRORS
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from joserfc.errors import JoseError

from identity.accounts import SignInRefused, account_for
from identity.backends import local_login_allowed
from identity.mapping import apply_groups, groups_of
from identity.oidc_sync import refresh_token_keep
from identity.providers import (
    OidcProvider,
    client_for,
    provider_named,
    providers,
    sign_in_params,
)
from portal.demo import DEMO_PASSWORD, demo_user_roles

log = logging.getLogger(__name__)

SESSION_NEXT = "identity_next"
SESSION_OIDC = "identity_oidc"
EXTERNAL_BACKEND = "identity.backends.ExternalSessionBackend"


class LoginView(auth_views.LoginView):
    """Django's login form plus one button per provider; the password form stays for the
    demo and for break-glass admins (``GPUPOOL_LOCAL_LOGIN``)."""

    template_name = "auth/login.html"

    def form_invalid(self, form: Any) -> HttpResponse:
        """The directory's password was right, but the linking rule refused the sign-in (a
        name collision the admin chose to refuse): say so instead of "wrong password"."""
        refused = getattr(self.request, "sign_in_refused", None)
        if refused:
            form.errors[NON_FIELD_ERRORS] = form.error_class([refused])
        return super().form_invalid(form)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sso_providers"] = providers()
        context["local_login_open"] = local_login_allowed(None)
        if settings.GPUPOOL_DEMO:
            context["demo_users"] = demo_user_roles()
            context["demo_password"] = DEMO_PASSWORD
        return context


def _safe_next(request: HttpRequest, candidate: str | None) -> str:
    if candidate and url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return candidate
    return resolve_url(settings.LOGIN_REDIRECT_URL)


@require_GET
def oidc_login(request: HttpRequest, name: str) -> HttpResponse:
    """Send the browser to the provider (authorization code, PKCE S256, fresh state + nonce)."""
    provider = provider_named(name)
    request.session[SESSION_NEXT] = _safe_next(request, request.GET.get("next"))
    redirect_uri = request.build_absolute_uri(reverse("oidc-callback", args=[provider.name]))
    client = client_for(provider)
    try:
        return client.authorize_redirect(request, redirect_uri, **sign_in_params(provider, client))
    except (requests.RequestException, AuthlibBaseError, ValueError) as exc:
        return _failed(request, provider, "the provider cannot be reached", exc)


def _failed(request: HttpRequest, provider: OidcProvider, why: str, exc: Exception) -> HttpResponse:
    # The exception's class and text only: Authlib's errors never carry the client secret.
    log.warning("sign-in with %s failed: %s (%s: %s)", provider.name, why, type(exc).__name__, exc)
    return render(
        request,
        "identity/sign_in_failed.html",
        {"provider": provider, "why": why},
        status=400 if "provider cannot" not in why else 502,
    )


@require_GET
def oidc_callback(request: HttpRequest, name: str) -> HttpResponse:
    """Check state, trade the code (with the PKCE verifier), validate the ID token (signature
    from JWKS, issuer, audience, expiry, nonce), then sign the account in and apply groups."""
    provider = provider_named(name)
    client = client_for(provider)
    try:
        token = client.authorize_access_token(
            request, leeway=settings.GPUPOOL_OIDC_CLOCK_SKEW_SECONDS
        )
    except OAuthError as exc:
        return _failed(request, provider, "the provider refused or the request was stale", exc)
    except (JoseError, AuthlibBaseError, ValueError) as exc:
        return _failed(request, provider, "the ID token did not validate", exc)
    except requests.RequestException as exc:
        return _failed(request, provider, "the provider cannot be reached", exc)
    claims = token.get("userinfo")
    if not claims or not claims.get("sub"):
        return _failed(request, provider, "no ID token came back", ValueError("no id_token"))
    try:
        user, identity = account_for(
            provider.source,
            str(claims["sub"]),
            username=str(claims.get(provider.username_claim) or claims["sub"]),
            email=str(claims.get("email") or ""),
            full_name=str(claims.get("name") or ""),
        )
    except SignInRefused as exc:
        return _failed(request, provider, str(exc).rstrip("."), exc)
    refresh_token_keep(identity, token)  # saved with the groups just below
    apply_groups(user, identity, groups_of(claims, provider.groups_claim))
    next_url = request.session.get(SESSION_NEXT) or resolve_url(settings.LOGIN_REDIRECT_URL)
    auth.login(request, user, backend=EXTERNAL_BACKEND)
    request.session[SESSION_OIDC] = {"provider": provider.name, "id_token": token["id_token"]}
    return HttpResponseRedirect(next_url)


@require_POST
def logout_view(request: HttpRequest) -> HttpResponse:
    """End the portal session; after an OpenID Connect sign-in, the provider's too."""
    signed_in_with = request.session.get(SESSION_OIDC)
    auth.logout(request)
    after = request.build_absolute_uri(resolve_url(settings.LOGOUT_REDIRECT_URL))
    if signed_in_with:
        provider = next((p for p in providers() if p.name == signed_in_with["provider"]), None)
        if provider is not None:
            client = client_for(provider)
            try:
                if client.load_server_metadata().get("end_session_endpoint"):
                    return client.logout_redirect(
                        request,
                        post_logout_redirect_uri=after,
                        id_token_hint=signed_in_with["id_token"],
                        client_id=provider.client_id,
                    )
            except (requests.RequestException, AuthlibBaseError, ValueError) as exc:
                log.warning("end-session at %s skipped: %s", provider.name, exc)
    return HttpResponseRedirect(after)
