"""REST for the scheduler: the queue, which models a requirement matches before submitting,
and when a job would start (quotas, cohort quotas and team policies: ``quota_api.py``)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import hooks
from portal.access import job_get_for_user, jobs_visible_to, team_for_submit
from portal.api.query import FlagField, WholeNumberField, query_params
from portal.api.schema import error
from portal.api.serializers import (
    BlockerSerializer,
    JobInputSerializer,
    StartEstimateSerializer,
    StartRangeSerializer,
)
from portal.jobs.blocker import blocker_of, estimate_dict, stored_start
from portal.jobs.resubmit import resolve_from_job
from portal.jobs.services import submit_limits
from portal.jobs.spec import parse_job_spec
from portal.models import Job, SelectionPolicy
from scheduling.catalog import catalog_entries
from scheduling.estimates import job_estimate, spec_estimate
from scheduling.matching import requirement_preview
from scheduling.services import (
    QUEUE_SORTS,
    hidden_ahead,
    queue_pending,
    visible_order_keys,
)
from scheduling.snapshot import pool_now


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
    queued_at = serializers.DateTimeField(
        source="state_changed_at",
        help_text="When it last entered the queue (submitted, or requeued after a preemption)",
    )
    blocker = serializers.SerializerMethodField()
    others_ahead = serializers.SerializerMethodField(
        help_text="How many of the jobs ahead in line belong to teams you cannot see (null "
        "while the job is not ranked)"
    )
    start_estimate = serializers.SerializerMethodField(
        help_text="The stored start estimate with its likely range (null: not estimated yet)"
    )

    @extend_schema_field(BlockerSerializer)
    def get_blocker(self, job: Job) -> dict[str, Any] | None:
        blocker = blocker_of(job)
        return blocker.as_dict() if blocker else None

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_others_ahead(self, job: Job) -> int | None:
        return None if job.queue_position is None else self.context["ahead"].get(job.pk, 0)

    @extend_schema_field(StartEstimateSerializer(allow_null=True))
    def get_start_estimate(self, job: Job) -> dict[str, Any] | None:
        if job.estimate_updated_at is None:
            return None
        now = self.context["now"]
        estimate = stored_start(job, self.context["ranges"], now)
        return estimate_dict(estimate, now)


class QueueQuery(serializers.Serializer):
    team = serializers.SlugField(required=False, help_text="Team slug")
    sort = serializers.ChoiceField(
        choices=sorted(QUEUE_SORTS),
        required=False,
        help_text="position (the line, default), waiting (longest waiting first), -waiting",
    )


class QueueView(APIView):
    """Queued jobs of your teams in the order the scheduler will consider them."""

    @extend_schema(parameters=[QueueQuery], responses=QueueEntrySerializer(many=True))
    def get(self, request: Request) -> Response:
        visible = jobs = jobs_visible_to(request.user)
        query = query_params(QueueQuery, request)
        if team := query.get("team"):
            jobs = jobs.filter(team__slug=team)
        pending = queue_pending(jobs=jobs, sort=query.get("sort", "position"))
        ahead: dict[int, int] = {}
        if pending and not request.user.is_staff:
            # Positions rank the whole queue; what the caller cannot see is counted, as the
            # web's queue says it.
            ahead = hidden_ahead(pending, visible_order_keys(visible))
        ranges = (hooks.estimate_ranges.ask([j.pk for j in pending]) or {}) if pending else {}
        context = {"ahead": ahead, "ranges": ranges, "now": timezone.now()}
        return Response(QueueEntrySerializer(pending, many=True, context=context).data)


class MatchInPoolSerializer(serializers.Serializer):
    model = serializers.CharField()
    tried_first = serializers.BooleanField(help_text="The first model the job would try")
    tried = serializers.BooleanField(help_text="False when fallback is off and it is not first")
    full_now = serializers.BooleanField(help_text="No enabled cluster has room for the gang now")
    fits_ever = serializers.BooleanField(help_text="Some cluster could hold the gang when empty")
    free_gpus = serializers.IntegerField()
    largest_free_block = serializers.IntegerField(help_text="Most free GPUs on one node")
    clusters = serializers.ListField(child=serializers.CharField())


class MatchSerializer(serializers.Serializer):
    matched = serializers.ListField(child=serializers.CharField(), help_text="In policy order")
    first_choice = serializers.CharField(allow_null=True, help_text="First in the catalog")
    rejected = serializers.ListField(child=serializers.DictField())
    pool = MatchInPoolSerializer(many=True, help_text="Matched models some cluster has, in order")
    absent = serializers.ListField(
        child=serializers.CharField(), help_text="Matched models no enabled cluster has"
    )
    slices_left_out = serializers.ListField(
        child=serializers.CharField(),
        help_text="MIG slices in the pool that a requirement without a model list does not use",
    )
    gang = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="replicas and gpus_per_replica (GiB per replica for a share)",
    )
    shared = serializers.BooleanField(
        help_text="A shared-GPU request: only shared pools are matched, counted in GiB"
    )
    allow_fallback = serializers.BooleanField()
    by_model_list = serializers.BooleanField()


class MatchQuery(serializers.Serializer):
    gpu_models = serializers.RegexField(
        r"^[-a-zA-Z0-9_.,]*$", required=False, help_text="Model keys in order, comma-separated"
    )
    min_gpu_memory_gib = WholeNumberField(min_value=0, required=False)
    requires_bf16 = FlagField(required=False)
    requires_fp8 = FlagField(required=False)
    min_fp16_tflops = serializers.FloatField(min_value=0, required=False)
    selection_policy = serializers.ChoiceField(choices=SelectionPolicy.choices, required=False)
    allow_fallback = FlagField(required=False, help_text="Default true")
    replicas = WholeNumberField(
        min_value=1, max_value=1_000_000, required=False, help_text="Gang size (default 1)"
    )
    gpus_per_replica = WholeNumberField(
        min_value=1, max_value=1_000_000, required=False, help_text="Default 1"
    )
    gpu_memory_gib = WholeNumberField(
        min_value=1,
        max_value=4096,
        required=False,
        help_text="A share of one device, GiB per replica: matches shared pools only",
    )


class GpuModelMatchView(APIView):
    """Which catalog models a GPU requirement matches, in the order its policy tries them."""

    @extend_schema(parameters=[MatchQuery], responses=MatchSerializer)
    def get(self, request: Request) -> Response:
        query = query_params(MatchQuery, request)
        fallback = query.pop("allow_fallback", True)
        return Response(requirement_preview(query, allow_fallback=fallback))


class EstimateSerializer(StartRangeSerializer):
    """An estimate, never a promise, of when a job starts, and where."""

    start_at = serializers.DateTimeField(
        allow_null=True, help_text="Estimated start (null: no estimate, `why` says why)"
    )
    starts = serializers.CharField(help_text='In words: "now", "in ~40m" (empty without one)')
    model = serializers.CharField(help_text="GPU model key it would get ('' without one)")
    model_name = serializers.CharField()
    cluster = serializers.CharField(help_text="Cluster it would get ('' without one)")
    why = serializers.CharField(
        help_text="What the estimate rests on and why it may move, or why there is none"
    )


class AlternativeSerializer(EstimateSerializer):
    label = serializers.CharField(help_text='E.g. "T4" or "2 replicas instead of 4"')
    only_model = serializers.CharField(
        help_text="The one model this alternative asks for ('' = any the job allows)"
    )
    replicas = serializers.IntegerField(help_text="Replicas this alternative asks for")
    sooner = serializers.BooleanField(
        help_text="Would start before the job as asked (these come first, soonest first)"
    )


class JobEstimateSerializer(serializers.Serializer):
    estimate = EstimateSerializer(allow_null=True)
    why = serializers.CharField(help_text="Why there is no estimate at all (empty otherwise)")
    expected_runtime_minutes = serializers.IntegerField(
        required=False, help_text="How long the job is expected to run once started"
    )
    runtime_basis = serializers.CharField(
        required=False, help_text="What the expected runtime was learned from"
    )
    alternatives = AlternativeSerializer(
        many=True,
        help_text="The estimate per candidate model some enabled cluster has, and with fewer "
        "replicas: the ones that would start sooner first",
    )
    computed_at = serializers.DateTimeField(required=False)


class JobEstimateView(APIView):
    """When a queued job of your team is estimated to start, on which model and cluster, and
    the estimate for each alternative it could ask for instead."""

    @extend_schema(responses={200: JobEstimateSerializer})
    def get(self, request: Request, job_id: str) -> Response:
        job = job_get_for_user(request.user, job_id)
        snapshot, config = pool_now()
        return Response(job_estimate(job, snapshot=snapshot, config=config))


class SpecEstimateView(APIView):
    """When a job not yet submitted would start if submitted now (the body of a submit), and
    per alternative. Nothing is stored."""

    @extend_schema(
        request=JobInputSerializer,
        responses={
            200: JobEstimateSerializer,
            404: error("No such team, or you are not in it; or no such job to clone"),
        },
    )
    def post(self, request: Request) -> Response:
        data, _ = resolve_from_job(user=request.user, data=request.data)
        spec = parse_job_spec(data, catalog=catalog_entries(), limits=submit_limits())
        team = team_for_submit(request.user, spec.team)
        snapshot, config = pool_now()
        return Response(spec_estimate(spec=spec, team=team, snapshot=snapshot, config=config))
