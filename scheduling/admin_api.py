"""REST for platform admins' catalog edits (issue 32): offer a whole card as a shared pool, as
the portal's ``/catalog/<key>/share/`` page does. Everyone else gets a 403."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling.admin_edits import shared_pool_impact, shared_pool_offer
from scheduling.models import GpuModel


class SharedPoolRequestSerializer(serializers.Serializer):
    cost_factor = serializers.FloatField(
        min_value=0.001,
        max_value=1000,
        required=False,
        allow_null=True,
        help_text="Per GiB-hour; left out: the card's cost factor / its memory in GiB",
    )


class SharedPoolSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="The pool's catalog key, e.g. a100-80gb-shared")
    card = serializers.CharField(source="shares.key", help_text="The card it shares")
    unit = serializers.SerializerMethodField(help_text="What its capacity and quotas count")
    memory_gib = serializers.IntegerField(help_text="Memory of one device, GiB")
    cost_factor = serializers.FloatField(help_text="Per GiB-hour")
    resource_name = serializers.CharField()
    active = serializers.BooleanField()
    created = serializers.SerializerMethodField(help_text="False: the card was offered already")
    effects = serializers.SerializerMethodField(help_text="What offering it does, in words")

    def get_unit(self, pool: GpuModel) -> str:
        return "GiB"

    def get_created(self, pool: GpuModel) -> bool:
        return bool(self.context.get("created"))

    def get_effects(self, pool: GpuModel) -> list[str]:
        return list(self.context.get("effects", ()))


class SharedPoolView(APIView):
    """Offer a whole card as a shared pool: jobs then ask for GiB of one of its devices
    (Volcano vGPU or HAMi). 201 with the new pool, or 200 with the card's existing one.
    Platform admins only."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        request=SharedPoolRequestSerializer,
        responses={200: SharedPoolSerializer, 201: SharedPoolSerializer},
    )
    def post(self, request: Request, key: str) -> Response:
        card = get_object_or_404(GpuModel, key=key)
        body = SharedPoolRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        cost: Any = body.validated_data.get("cost_factor")
        effects = [e.text for e in shared_pool_impact(card, cost)]
        pool, created = shared_pool_offer(card=card, by=request.user, cost_factor=cost)
        data = SharedPoolSerializer(pool, context={"created": created, "effects": effects}).data
        return Response(data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)
