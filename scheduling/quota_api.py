"""REST for quotas (read for members, write for staff), cohort quotas and team policies, and
the what-if of changes to them before saving."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAdminUser, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.access import teams_visible_to
from portal.models import Priority, Team
from scheduling.models import (
    DEFAULT_COHORT_SLUG,
    Cohort,
    CohortQuota,
    GpuModel,
    Quota,
    TeamPolicy,
)
from scheduling.preview import (
    CLUSTER_STATES,
    KEEP,
    ClusterProposal,
    CohortQuotaProposal,
    Proposal,
    QuotaProposal,
    TeamProposal,
    cluster_names,
    preview_changes,
)
from scheduling.services import (
    MAX_QUOTA_GPUS,
    TEAM_POLICY_FIELDS,
    cohort_quota_set,
    cohort_quotas,
    gpus_in_use,
    pool_cohort,
    quota_lowering_warning,
    quota_set,
    team_policies_visible_to,
    team_policy_set,
)


class QuotaSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    gpu_model = serializers.SlugRelatedField(slug_field="key", queryset=GpuModel.objects.all())
    nominal = serializers.IntegerField(min_value=0, max_value=MAX_QUOTA_GPUS)
    borrowing_limit = serializers.IntegerField(
        min_value=0, max_value=MAX_QUOTA_GPUS, allow_null=True, required=False
    )
    lending_limit = serializers.IntegerField(
        min_value=0, max_value=MAX_QUOTA_GPUS, allow_null=True, required=False
    )

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
    nominal = serializers.IntegerField(
        min_value=0, max_value=MAX_QUOTA_GPUS, help_text="GPUs every member may borrow"
    )

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


class PriorityNameField(serializers.ChoiceField):
    """A priority by name (``low``, ``normal``, ``high``), as jobs are submitted (the same
    ``PriorityEnum`` in the schema, ``ENUM_NAME_OVERRIDES``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=[p.label for p in Priority], **kwargs)

    def to_internal_value(self, data: Any) -> int:
        name = super().to_internal_value(data)
        return next(p.value for p in Priority if p.label == name)

    def to_representation(self, value: Any) -> str:
        return Priority(value).label if value in Priority.values else str(value)


class TeamPolicySerializer(serializers.ModelSerializer):
    """A team's scheduling policy; in a POST every field but ``team`` is optional and only the
    fields given change."""

    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    weight = serializers.FloatField(min_value=0.01, max_value=1e6, required=False)
    cohort = serializers.SlugRelatedField(
        slug_field="slug", queryset=Cohort.objects.all(), allow_null=True, required=False
    )
    held = serializers.BooleanField(required=False)
    held_reason = serializers.CharField(max_length=200, allow_blank=True, required=False)
    max_queued_jobs = serializers.IntegerField(
        min_value=0, max_value=2**31 - 1, allow_null=True, required=False
    )
    max_queued_jobs_per_user = serializers.IntegerField(
        min_value=0, max_value=2**31 - 1, allow_null=True, required=False
    )
    max_priority = PriorityNameField(
        required=False,
        help_text="Highest priority the team's members may submit (low, normal or high)",
    )

    class Meta:
        model = TeamPolicy
        fields = ["team", *TEAM_POLICY_FIELDS]
        validators: list[Any] = []  # the team is an upsert key here, not a conflict


class TeamPolicyListView(APIView):
    """Scheduling policies: fair-share weight, cohort, hold, queue limit and the highest
    priority a team may submit. GET: your teams' (platform admins: every team's), defaults
    shown for a team without one. POST (platform admins): change the fields given (audited,
    like quotas)."""

    def get_permissions(self) -> list[Any]:
        return [IsAdminUser()] if self.request.method == "POST" else [IsAuthenticated()]

    @extend_schema(responses=TeamPolicySerializer(many=True))
    def get(self, request: Request) -> Response:
        policies = team_policies_visible_to(request.user)
        return Response(TeamPolicySerializer(policies, many=True).data)

    @extend_schema(request=TeamPolicySerializer, responses={200: TeamPolicySerializer})
    def post(self, request: Request) -> Response:
        data = TeamPolicySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        changes = dict(data.validated_data)
        team = changes.pop("team")
        policy = team_policy_set(team=team, by=request.user, **changes)
        return Response(TeamPolicySerializer(policy).data, status=status.HTTP_200_OK)


class TeamPolicyDetailView(APIView):
    @extend_schema(responses=TeamPolicySerializer)
    def get(self, request: Request, team: str) -> Response:
        found = team_policies_visible_to(request.user, slug=team)
        if not found:
            raise Http404
        return Response(TeamPolicySerializer(found[0]).data)


# ---------------------------------------------------------------------------------------------
# What-if: the next cycle under proposed changes (scheduling.preview)
# ---------------------------------------------------------------------------------------------
class QuotaProposalSerializer(serializers.Serializer):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    gpu_model = serializers.SlugRelatedField(
        slug_field="key", queryset=GpuModel.objects.filter(active=True)
    )
    nominal = serializers.IntegerField(
        min_value=0, max_value=MAX_QUOTA_GPUS, required=False, help_text="Absent: as it is"
    )
    borrowing_limit = serializers.IntegerField(
        min_value=0,
        max_value=MAX_QUOTA_GPUS,
        allow_null=True,
        required=False,
        help_text="null: no limit; absent: as it is",
    )
    lending_limit = serializers.IntegerField(
        min_value=0,
        max_value=MAX_QUOTA_GPUS,
        allow_null=True,
        required=False,
        help_text="null: lends all; absent: as it is",
    )


class TeamProposalSerializer(serializers.Serializer):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    weight = serializers.FloatField(min_value=0.01, max_value=1e6, required=False)
    cohort = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Cohort.objects.all(),
        allow_null=True,
        required=False,
        help_text="A cohort's slug; null: the default cohort (the pool's); absent: as it is",
    )


class CohortQuotaProposalSerializer(serializers.Serializer):
    cohort = CohortSlugField(slug_field="slug", queryset=Cohort.objects.all())
    gpu_model = serializers.SlugRelatedField(
        slug_field="key", queryset=GpuModel.objects.filter(active=True)
    )
    nominal = serializers.IntegerField(min_value=0, max_value=MAX_QUOTA_GPUS)


class ClusterProposalSerializer(serializers.Serializer):
    cluster = serializers.CharField(max_length=100, help_text="A registered cluster's name")
    state = serializers.ChoiceField(choices=list(CLUSTER_STATES))


class ProposalSerializer(serializers.Serializer):
    """Proposed changes, all applied together; every list may be empty or absent."""

    quotas = QuotaProposalSerializer(many=True, required=False)
    teams = TeamProposalSerializer(many=True, required=False)
    cohort_quotas = CohortQuotaProposalSerializer(many=True, required=False)
    clusters = ClusterProposalSerializer(many=True, required=False)

    def validate_clusters(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        known = set(cluster_names())
        unknown = sorted({c["cluster"] for c in value} - known)
        if unknown:
            raise serializers.ValidationError(f"No such cluster: {', '.join(unknown)}.")
        return value

    def proposal(self) -> Proposal:
        v = self.validated_data
        # An absent key keeps the field as it is now (KEEP); null is a value (no limit).
        return Proposal(
            quotas=tuple(
                QuotaProposal(
                    team=q["team"].slug,
                    model=q["gpu_model"].key,
                    nominal=q.get("nominal", KEEP),
                    borrowing_limit=q.get("borrowing_limit", KEEP),
                    lending_limit=q.get("lending_limit", KEEP),
                )
                for q in v.get("quotas", ())
            ),
            teams=tuple(
                TeamProposal(
                    team=t["team"].slug,
                    weight=t.get("weight", KEEP),
                    cohort=(t["cohort"].slug if t["cohort"] else None) if "cohort" in t else KEEP,
                )
                for t in v.get("teams", ())
            ),
            cohort_quotas=tuple(
                CohortQuotaProposal(
                    cohort=c["cohort"].slug, model=c["gpu_model"].key, nominal=c["nominal"]
                )
                for c in v.get("cohort_quotas", ())
            ),
            clusters=tuple(
                ClusterProposal(cluster=c["cluster"], state=c["state"])
                for c in v.get("clusters", ())
            ),
        )


class _Named(serializers.Serializer):
    job = serializers.UUIDField(help_text="The job's id")
    name = serializers.CharField()
    team = serializers.CharField()


class PreviewStartSerializer(_Named):
    gpu_model = serializers.CharField(source="model")
    cluster = serializers.CharField()
    gpus = serializers.IntegerField()
    new = serializers.BooleanField(help_text="False: it would start without the changes too")


class PreviewPreemptSerializer(PreviewStartSerializer):
    for_team = serializers.CharField(help_text="The team that reclaims")
    for_job = serializers.UUIDField(help_text="The job the GPUs are reclaimed for")
    message = serializers.CharField(help_text="What the victim's timeline would say")
    new = serializers.BooleanField(help_text="False: it would be preempted without the changes")


class PreviewBlockedSerializer(_Named):
    code = serializers.CharField(help_text="The reason code it would wait with")
    message = serializers.CharField()
    was = serializers.CharField(
        help_text="Without the changes: 'start', or the reason code it would wait with"
    )


class PreviewTeamSerializer(serializers.Serializer):
    team = serializers.CharField()
    jobs = serializers.IntegerField()
    gpus = serializers.IntegerField()


class PreviewGuaranteeSerializer(serializers.Serializer):
    gpu_model = serializers.CharField(source="model")
    nominal = serializers.IntegerField(help_text="Nominal quotas of all teams, as proposed")
    nominal_now = serializers.IntegerField()
    cohort_owned = serializers.IntegerField(help_text="GPUs cohorts own, as proposed")
    capacity = serializers.IntegerField(help_text="GPUs of clusters taking work, as proposed")
    capacity_now = serializers.IntegerField()
    over = serializers.IntegerField(help_text="Nominal quotas beyond that capacity")
    over_now = serializers.IntegerField()


class PreviewSerializer(serializers.Serializer):
    now = serializers.DateTimeField(help_text="The instant both decisions were made for")
    would_start = PreviewStartSerializer(many=True)
    would_preempt = PreviewPreemptSerializer(many=True)
    preempted_by_team = PreviewTeamSerializer(many=True)
    newly_blocked = PreviewBlockedSerializer(many=True)
    guarantees = PreviewGuaranteeSerializer(many=True)
    starts_now = serializers.IntegerField(help_text="Jobs the next cycle starts without changes")
    preempts_now = serializers.IntegerField(help_text="Jobs it preempts without changes")


class QuotaPreviewView(APIView):
    """Platform admins: what the next cycle would do differently with these quota, team
    weight, cohort and cluster-state changes, decided by the real engine on the current
    snapshot. Nothing is saved."""

    def get_permissions(self) -> list[Any]:
        # POST only; any other method answers 405 to a signed-in user, as the index expects.
        return [IsAdminUser()] if self.request.method == "POST" else [IsAuthenticated()]

    @extend_schema(request=ProposalSerializer, responses={200: PreviewSerializer})
    def post(self, request: Request) -> Response:
        data = ProposalSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        preview = preview_changes(data.proposal())
        return Response(PreviewSerializer(preview).data)
