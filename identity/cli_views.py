"""The two ends of ``gpupool login``'s browser sign-in (:mod:`identity.cli_auth`): the page
that asks "Authorize the gpupool CLI on <host> as <user>?", and the API endpoint where the CLI
trades the one-time code for an API token."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_http_methods
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, permissions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from identity.cli_auth import (
    CODE_SECONDS,
    cli_request_parse,
    grant_issue,
    grant_redeem,
    token_name,
)
from portal.api.auth import token_failure_record
from portal.errors import ApplicationError
from portal.proxies import client_address

_FIELDS = ("port", "host", "state", "code_challenge", "code_challenge_method", "machine")


@never_cache
@require_http_methods(["GET", "POST"])
def cli_authorize(request: HttpRequest) -> HttpResponse:
    """GET: ask the signed-in user whether to let the CLI in (signing in first); POST (the
    form's CSRF-checked Authorize or Cancel): send the browser to the CLI's loopback listener
    with a one-time code, or with ``error=access_denied``.

    A malformed request is answered here, before any sign-in, with what is wrong."""
    source = request.POST if request.method == "POST" else request.GET
    try:
        asked = cli_request_parse({k: source.get(k, "") for k in _FIELDS})
    except ApplicationError as error:
        return render(request, "identity/cli_authorize.html", {"error": error}, status=400)
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
    if request.method == "POST":
        if request.POST.get("decision") != "authorize":
            return HttpResponseRedirect(asked.callback(error="access_denied"))
        return HttpResponseRedirect(grant_issue(user=request.user, request=asked))
    response = render(
        request,
        "identity/cli_authorize.html",
        {
            "asked": asked,
            "fields": {k: source.get(k, "") for k in _FIELDS if source.get(k)},
            "token_name": token_name(asked.machine),
            "token_days": settings.GPUPOOL_API_TOKEN_DAYS,
        },
    )
    # Browsers hold a form's redirect to form-action: this page's form may lead to the CLI's
    # listener, and only to it (the port and host were checked to be a loopback's).
    response._csp_update = {"form-action": [asked.origin]}  # type: ignore[attr-defined]
    return response


class CliTokenInput(serializers.Serializer):
    code = serializers.CharField(max_length=100, help_text="The code the callback carried")
    code_verifier = serializers.RegexField(
        r"^[A-Za-z0-9._~-]{43,128}$",
        help_text="The PKCE verifier whose S256 challenge the authorize page was given",
    )


CLI_TOKEN = inline_serializer(
    "CliToken",
    {
        "token": serializers.CharField(help_text="The new API token; shown this once"),
        "name": serializers.CharField(),
        "prefix": serializers.CharField(),
        "expires_at": serializers.DateTimeField(),
        "username": serializers.CharField(),
    },
)


@method_decorator(sensitive_post_parameters("code", "code_verifier"), name="dispatch")
class CliTokenView(APIView):
    """Trade a one-time code from the authorize page, with its PKCE verifier, for a new API
    token named for the CLI's host. No credentials: the code and verifier are them. A failed
    trade counts as a failed API token attempt from the caller's address (the same limit)."""

    authentication_classes: list[Any] = []
    permission_classes = [permissions.AllowAny]

    @extend_schema(
        request=CliTokenInput,
        responses={201: CLI_TOKEN},
        auth=[],
        description=f"A code is usable once, within {CODE_SECONDS} seconds of being issued.",
    )
    def post(self, request: Request) -> Response:
        data = CliTokenInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            token, raw = grant_redeem(
                code=data.validated_data["code"], verifier=data.validated_data["code_verifier"]
            )
        except ApplicationError:
            limited = token_failure_record(client_address(request))
            if limited is not None:
                raise exceptions.Throttled(wait=limited.wait, detail=limited.message) from None
            raise
        return Response(
            {
                "token": raw,
                "name": token.name,
                "prefix": token.prefix,
                "expires_at": token.expires_at,
                "username": token.user.get_username(),
            },
            status=status.HTTP_201_CREATED,
            # RFC 6749, 5.1: a response carrying a credential is never stored by a cache.
            headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
        )
