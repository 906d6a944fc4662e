"""REST for the caller's own API tokens: read only, so a script (the ``gpupool tokens``
command) can see which token it runs with and when each expires. Creating and revoking stay
on the ``/tokens/`` page: a leaked token must not be able to mint others."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.models import ApiToken

TOKEN = inline_serializer(
    "ApiToken",
    {
        "id": serializers.IntegerField(),
        "name": serializers.CharField(),
        "prefix": serializers.CharField(help_text="The token's public start (gpp_ and 8 more)"),
        "created_at": serializers.DateTimeField(),
        "expires_at": serializers.DateTimeField(),
        "last_used_at": serializers.DateTimeField(allow_null=True),
        "revoked_at": serializers.DateTimeField(allow_null=True),
        "current": serializers.BooleanField(help_text="The token this request came with"),
    },
    many=True,
)


class TokenListView(APIView):
    """Your API tokens, newest first (never their secret, which is stored only as a digest);
    ``current`` marks the one that authenticated this request."""

    @extend_schema(responses={200: TOKEN})
    def get(self, request: Request) -> Response:
        in_use = request.auth.pk if isinstance(request.auth, ApiToken) else None
        return Response(
            [
                {
                    "id": t.pk,
                    "name": t.name,
                    "prefix": t.prefix,
                    "created_at": t.created_at,
                    "expires_at": t.expires_at,
                    "last_used_at": t.last_used_at,
                    "revoked_at": t.revoked_at,
                    "current": t.pk == in_use,
                }
                for t in ApiToken.objects.filter(user=request.user).order_by("-created_at", "-id")
            ]
        )
