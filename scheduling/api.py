"""REST for the scheduler: the queue, quotas (read for members, write for staff), and which
models a requirement matches before submitting."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAdminUser, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.access import jobs_visible_to, teams_visible_to
from portal.jobs.spec import SpecError
from portal.models import Team
from scheduling.matching import requirement_preview
from scheduling.models import DEFAULT_COHORT_SLUG, Cohort, CohortQuota, GpuModel, Quota
from scheduling.services import (
    cohort_quota_set,
    cohort_quotas,
    gpus_in_use,
    pool_cohort,
    queue_pending,
    quota_lowering_warning,
    quota_set,
)


class QueueEntrySerializer(serializers.Serializer):
    id = serializers.UUIDField(source="public_id")
    name = serializers.CharField()
    team = serializers.CharField(source="team.slug")
    owner = serializers.CharField(source="owner.username")
    replicas = serializers.IntegerField()
    gpus_per_replica = serializers.IntegerField()
    priority = serializers.IntegerField()
    submitted_at = serializers.DateTimeField()
    position = serializers.IntegerField(source="queue_position", allow_null=True)
    pending_reason_code = serializers.CharField()
    pending_reason = serializers.CharField()


class QueueView(APIView):
    """Queued jobs of your teams in the order the scheduler will consider them."""

    @extend_schema(
        parameters=[OpenApiParameter("team", str, description="Team slug")],
        responses=QueueEntrySerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        jobs = jobs_visible_to(request.user)
        if team := request.query_params.get("team"):
            jobs = jobs.filter(team__slug=team)
        return Response(QueueEntrySerializer(queue_pending(jobs=jobs), many=True).data)


class QuotaSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    gpu_model = serializers.SlugRelatedField(slug_field="key", queryset=GpuModel.objects.all())
    nominal = serializers.IntegerField(min_value=0)
    borrowing_limit = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    lending_limit = serializers.IntegerField(min_value=0, allow_null=True, required=False)

    class Meta:
        model = Quota
        fields = ["team", "gpu_model", "nominal", "borrowing_limit", "lending_limit", "updated_at"]
        read_only_fields = ["updated_at"]
        validators: list[Any] = []  # (team, gpu_model) is an upsert key here, not a conflict


class QuotaSavedSerializer(QuotaSerializer):
    gpus_in_use = serializers.IntegerField(help_text="GPUs the team's jobs hold on this model now")
    warning = serializers.CharField(
        help_text="Non-empty when the nominal is below the GPUs in use: what happens to them"
    )

    class Meta(QuotaSerializer.Meta):
        fields = [*QuotaSerializer.Meta.fields, "gpus_in_use", "warning"]


class QuotaListView(APIView):
    """GET: quotas of your teams (platform admins: all). POST (staff): create or change one."""

    def get_permissions(self) -> list[Any]:
        return [IsAdminUser()] if self.request.method == "POST" else [IsAuthenticated()]

    @extend_schema(responses=QuotaSerializer(many=True))
    def get(self, request: Request) -> Response:
        quotas = Quota.objects.filter(team__in=teams_visible_to(request.user)).select_related(
            "team", "gpu_model"
        )
        return Response(QuotaSerializer(quotas, many=True).data)

    @extend_schema(request=QuotaSerializer, responses={200: QuotaSavedSerializer})
    def post(self, request: Request) -> Response:
        data = QuotaSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        quota = quota_set(
            team=v["team"],
            model=v["gpu_model"],
            nominal=v["nominal"],
            borrowing_limit=v.get("borrowing_limit"),
            lending_limit=v.get("lending_limit"),
            by=request.user,
        )
        in_use = gpus_in_use(team=v["team"], model=v["gpu_model"])
        body = {
            **QuotaSerializer(quota).data,
            "gpus_in_use": in_use,
            "warning": quota_lowering_warning(
                team=v["team"], model=v["gpu_model"], nominal=quota.nominal, in_use=in_use
            ),
        }
        return Response(body, status=status.HTTP_200_OK)


class QuotaDetailView(APIView):
    @extend_schema(responses=QuotaSerializer)
    def get(self, request: Request, team: str, model: str) -> Response:
        quota = get_object_or_404(
            Quota.objects.filter(team__in=teams_visible_to(request.user)),
            team__slug=team,
            gpu_model__key=model,
        )
        return Response(QuotaSerializer(quota).data)


class CohortSlugField(serializers.SlugRelatedField):
    """A cohort by slug; ``default`` (the pool: every team that names no cohort) exists once
    asked for."""

    def to_internal_value(self, data: Any) -> Cohort:
        if data == DEFAULT_COHORT_SLUG:
            return pool_cohort()
        return super().to_internal_value(data)  # type: ignore[no-any-return]


class CohortQuotaSerializer(serializers.ModelSerializer):
    cohort = CohortSlugField(slug_field="slug", queryset=Cohort.objects.all())
    gpu_model = serializers.SlugRelatedField(slug_field="key", queryset=GpuModel.objects.all())
    nominal = serializers.IntegerField(min_value=0, help_text="GPUs every member may borrow")

    class Meta:
        model = CohortQuota
        fields = ["cohort", "gpu_model", "nominal", "updated_at"]
        read_only_fields = ["updated_at"]
        validators: list[Any] = []  # (cohort, gpu_model) is an upsert key here, not a conflict


class CohortQuotaListView(APIView):
    """GPUs owned by cohorts, borrowable by every member and always reclaimable. GET: every
    signed-in user (pool-level figures). POST (platform admins): create or change one; the
    cohort ``default`` is the pool's own capacity."""

    def get_permissions(self) -> list[Any]:
        return [IsAdminUser()] if self.request.method == "POST" else [IsAuthenticated()]

    @extend_schema(responses=CohortQuotaSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(CohortQuotaSerializer(cohort_quotas(), many=True).data)

    @extend_schema(request=CohortQuotaSerializer, responses={200: CohortQuotaSerializer})
    def post(self, request: Request) -> Response:
        data = CohortQuotaSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        quota = cohort_quota_set(
            cohort=v["cohort"], model=v["gpu_model"], nominal=v["nominal"], by=request.user
        )
        return Response(CohortQuotaSerializer(quota).data, status=status.HTTP_200_OK)


class CohortQuotaDetailView(APIView):
    @extend_schema(responses=CohortQuotaSerializer)
    def get(self, request: Request, cohort: str, model: str) -> Response:
        quota = get_object_or_404(
            CohortQuota.objects.select_related("cohort", "gpu_model"),
            cohort__slug=cohort,
            gpu_model__key=model,
        )
        return Response(CohortQuotaSerializer(quota).data)


class MatchSerializer(serializers.Serializer):
    matched = serializers.ListField(child=serializers.CharField(), help_text="In policy order")
    first_choice = serializers.CharField(allow_null=True)
    rejected = serializers.ListField(child=serializers.DictField())


class GpuModelMatchView(APIView):
    """Which catalog models a GPU requirement matches, in the order its policy tries them."""

    @extend_schema(
        parameters=[
            OpenApiParameter("gpu_models", str, description="Comma-separated keys"),
            OpenApiParameter("min_gpu_memory_gib", int),
            OpenApiParameter("requires_bf16", bool),
            OpenApiParameter("requires_fp8", bool),
            OpenApiParameter("min_fp16_tflops", float),
            OpenApiParameter("selection_policy", str, enum=["cheapest", "fastest", "ordered"]),
        ],
        responses=MatchSerializer,
    )
    def get(self, request: Request) -> Response:
        try:
            preview = requirement_preview(request.query_params)
        except SpecError as exc:
            return Response(
                {"message": exc.message, "extra": {"fields": exc.fields}},
                status=status.HTTP_400_BAD_REQUEST,
            )
        return Response(preview)
