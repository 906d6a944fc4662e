"""REST API views: thin wrappers that parse, call a service or selector, and serialize."""

from __future__ import annotations

import functools
from typing import Any

from django.conf import settings
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import generics, serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.serializer_helpers import ReturnDict
from rest_framework.views import APIView

from portal.access import (
    job_get_for_user,
    jobs_visible_to,
    others_ahead,
    team_roles_of,
    teams_visible_to,
)
from portal.api.body import request_object
from portal.api.filters import JobFilter
from portal.api.pagination import EventCursorPagination
from portal.api.schema import error
from portal.api.serializers import (
    AttemptDetailSerializer,
    AttemptSerializer,
    BatchInputSerializer,
    BatchResultSerializer,
    CancelInputSerializer,
    GpuModelSerializer,
    JobDetailSerializer,
    JobEventSerializer,
    JobInputSerializer,
    JobSerializer,
    TeamSerializer,
)
from portal.api.throttles import SubmitThrottle
from portal.catalog import GpuModel
from portal.errors import NotFound
from portal.jobs.attempts import AttemptView, job_attempt, job_attempts
from portal.jobs.blocker import estimate_dict, start_estimate
from portal.jobs.resubmit import resolve_from_job, resubmit_note
from portal.jobs.services import job_cancel, job_submit, job_submit_batch
from portal.jobs.waits import queue_positions_fill
from portal.models import Job, Team

IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    type={"type": "string", "minLength": 1, "maxLength": 200},
    location=OpenApiParameter.HEADER,
    required=False,
    description="Repeat a submission safely: the same key from the same user returns the "
    "original job(s), never new ones.",
)
_JOB_EXAMPLE = {
    "team": "vision",
    "name": "resnet50",
    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
    "command": ["torchrun", "train.py"],
    "replicas": 2,
    "gpus_per_replica": 4,
    "min_gpu_memory_gib": 40,
    "requires_bf16": True,
}
SUBMIT_EXAMPLES = [OpenApiExample("A training gang", value=_JOB_EXAMPLE, request_only=True)]
QUEUE_FULL_OR_THROTTLED = (
    "The team's or your queue of waiting jobs is full (the message names the limit and how "
    "many are queued; nothing was stored), or too many submits or failed token attempts "
    "(retry after the Retry-After header's seconds)"
)
BATCH_EXAMPLES = [
    OpenApiExample(
        "Two jobs",
        value={"jobs": [_JOB_EXAMPLE, {**_JOB_EXAMPLE, "name": "resnet101", "replicas": 1}]},
        request_only=True,
    )
]


@functools.cache
def _shared_job_serializer() -> JobSerializer:
    return JobSerializer()


def job_data(job: Job) -> ReturnDict:
    """``JobSerializer(job).data``, without rebuilding the serializer's fields every time.

    A ModelSerializer builds its ~40 fields from the model on first use of each instance,
    which costs more than the rest of a submit; the fields hold no per-request state (the job
    serializer uses no context), so one instance per process serializes every single job.
    The result still carries a serializer of its own, as the browsable API expects.
    """
    data = _shared_job_serializer().to_representation(job)
    return ReturnDict(data, serializer=JobSerializer(job))


def _job_queryset(request: Request) -> Any:
    # ``volcano``: the cluster's record, from which a RUNNING job's status (RESTARTING) is read.
    return jobs_visible_to(request.user).select_related(
        "team", "owner", "cluster", "gpu_model", "wait__notes", "volcano"
    )


class JobListCreateView(generics.ListAPIView):
    """List the jobs of your teams, newest first; submit a job."""

    serializer_class = JobSerializer
    filterset_class = JobFilter

    def get_queryset(self) -> Any:
        jobs = _job_queryset(self.request)
        slug = self.request.query_params.get("team")
        if slug:
            # JobFilter matches the slug through a join, which leaves PostgreSQL guessing the
            # team and, at a million jobs, walking the primary key for ?team=…&state=… (1.5 s
            # in the bench); the id as a value lets it use the (team, state, -id) index. Only
            # narrows: the filter still applies, and so does jobs_visible_to.
            team_ids = Team.objects.filter(slug=slug).values_list("pk", flat=True)
            jobs = jobs.filter(team_id__in=list(team_ids))
        return jobs

    def paginate_queryset(self, queryset: Any) -> list[Any] | None:
        page = super().paginate_queryset(queryset)
        if page is not None:
            queue_positions_fill(page)  # one query for the page's places in line
        return page

    def get_throttles(self) -> list[Any]:
        return [SubmitThrottle()] if self.request.method == "POST" else super().get_throttles()

    @extend_schema(
        request=JobInputSerializer,
        parameters=[IDEMPOTENCY_HEADER],
        examples=SUBMIT_EXAMPLES,
        responses={
            201: JobSerializer,
            200: OpenApiResponse(JobSerializer, description="Replay of an earlier Idempotency-Key"),
            404: error("No such team, or you are not in it; or no such job to resubmit"),
            409: error("The Idempotency-Key was used for a different request"),
            429: error(QUEUE_FULL_OR_THROTTLED),
        },
    )
    def post(self, request: Request) -> Response:
        data, source = resolve_from_job(user=request.user, data=request.data)
        result = job_submit(
            user=request.user,
            data=data,
            idempotency_key=request.headers.get("Idempotency-Key"),
        )
        if result.created and source is not None:
            resubmit_note(job=result.job, source=source)
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(job_data(result.job), status=code)


class JobBatchView(APIView):
    """Submit up to 1,000 jobs at once; one invalid job rejects the whole batch."""

    throttle_classes = [SubmitThrottle]

    @extend_schema(
        request=BatchInputSerializer,
        parameters=[IDEMPOTENCY_HEADER],
        examples=BATCH_EXAMPLES,
        responses={
            201: BatchResultSerializer,
            200: OpenApiResponse(
                BatchResultSerializer, description="Replay of an earlier Idempotency-Key"
            ),
            404: error("No such team, or you are not in it"),
            409: error("The Idempotency-Key was used for a different batch"),
            429: error(QUEUE_FULL_OR_THROTTLED),
        },
    )
    def post(self, request: Request) -> Response:
        items = request.data.get("jobs") if isinstance(request.data, dict) else None
        jobs, created = job_submit_batch(
            user=request.user, items=items, idempotency_key=request.headers.get("Idempotency-Key")
        )
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(
            {"jobs": [{"id": str(j.public_id), "state": j.state} for j in jobs]}, status=code
        )


class JobDetailView(APIView):
    @extend_schema(responses={200: JobDetailSerializer})
    def get(self, request: Request, job_id: str) -> Response:
        """One job; a queued one leads with its blocker and carries a start estimate."""
        job = job_get_for_user(request.user, job_id)
        data = job_data(job)
        data["start_estimate"] = estimate_dict(start_estimate(job, timezone.now()))
        data["others_ahead"] = others_ahead(request.user, job)
        return Response(data)


class JobCancelView(APIView):
    """Cancel a job, optionally saying why (the owner reads it on the job and its timeline)."""

    @extend_schema(
        request=CancelInputSerializer,
        responses={202: JobSerializer, 409: error("The job has already finished")},
    )
    def post(self, request: Request, job_id: str) -> Response:
        job = job_get_for_user(request.user, job_id)
        body = request_object(request)
        job = job_cancel(job=job, by=request.user, reason=body.get("reason"))
        return Response(job_data(job), status=status.HTTP_202_ACCEPTED)


def _attempt_data(attempt: AttemptView, *, with_logs: bool) -> dict[str, Any]:
    data = {
        "number": attempt.number,
        "current": attempt.current,
        "cluster": attempt.cluster,
        "gpu_model": attempt.gpu_model,
        "node_plan": attempt.node_plan,
        "placement": attempt.placement,
        "volcano_job_name": attempt.volcano_job_name,
        "admitted_at": attempt.admitted_at,
        "started_at": attempt.started_at,
        "ended_at": attempt.ended_at,
        "end_reason": attempt.end_reason,
        "end_message": attempt.end_message,
    }
    if with_logs:
        data["logs"] = [
            {
                "replica": log.replica,
                "pod": log.pod,
                "text": log.text,
                "message": log.message,
                "captured_at": log.captured_at,
            }
            for log in attempt.logs
        ]
        return dict(AttemptDetailSerializer(data).data)
    return dict(AttemptSerializer(data).data)


class JobAttemptsView(APIView):
    """A job's attempts, oldest first: each admission, with its placement and how it ended
    (preempted or requeued); the last is the current run once it is placed."""

    @extend_schema(responses={200: AttemptSerializer(many=True)})
    def get(self, request: Request, job_id: str) -> Response:
        job = job_get_for_user(request.user, job_id)
        return Response([_attempt_data(a, with_logs=False) for a in job_attempts(job)])


class JobAttemptDetailView(APIView):
    """One attempt, with the last lines of each replica's log kept when its pods were deleted
    (the current run's live log is ``jobs/{id}/logs/``)."""

    @extend_schema(responses={200: AttemptDetailSerializer})
    def get(self, request: Request, job_id: str, number: int) -> Response:
        job = job_get_for_user(request.user, job_id)
        attempt = job_attempt(job, number)
        if attempt is None:
            raise NotFound("No such attempt.", fields={"number": ["No attempt with this number."]})
        return Response(_attempt_data(attempt, with_logs=True))


class JobEventsView(generics.ListAPIView):
    """A job's timeline, oldest first."""

    serializer_class = JobEventSerializer
    pagination_class = EventCursorPagination
    filter_backends: list[Any] = []

    def get_queryset(self) -> Any:
        job = job_get_for_user(self.request.user, self.kwargs["job_id"])
        return job.events.select_related("actor")


class GpuModelListView(generics.ListAPIView):
    serializer_class = GpuModelSerializer
    pagination_class = None
    filter_backends: list[Any] = []
    queryset = GpuModel.objects.all()


class TeamListView(generics.ListAPIView):
    """Your teams and your role in each (platform admins see every team)."""

    serializer_class = TeamSerializer
    pagination_class = None
    filter_backends: list[Any] = []

    def get_queryset(self) -> Any:
        return teams_visible_to(self.request.user).distinct()

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "roles": team_roles_of(self.request.user)}


# The collections the index lists, as (key, URL name, what it is). Details ({id}/…) are reached
# from their collection, so only collections are here; a route added to an app's api_urls.py
# belongs here too (tests/portal/test_api_index.py checks that every one listed answers).
API_COLLECTIONS: tuple[tuple[str, str, str], ...] = (
    ("jobs", "api-jobs", "your teams' jobs; POST submits one"),
    ("jobs_batch", "api-jobs-batch", "POST submits up to GPUPOOL_BATCH_MAX jobs, all or nothing"),
    (
        "jobs_estimate",
        "api-jobs-estimate",
        "POST a job's body: when it would start, per model and with fewer replicas",
    ),
    ("templates", "api-template-list", "job templates: built-in, your teams', your own"),
    ("notifications", "api-notifications", "your jobs' state changes"),
    ("notifications_read", "api-notifications-read", "POST marks notifications read"),
    (
        "notification_preferences",
        "api-notification-preferences",
        "which events also come by email; the waiting threshold",
    ),
    ("notification_deliveries", "api-notification-deliveries", "your email delivery log"),
    ("tokens", "api-tokens", "your API tokens (never their secret)"),
    (
        "cli_token",
        "api-cli-token",
        "POST a gpupool login code and its PKCE verifier: a new API token for the CLI",
    ),
    ("clusters", "api-clusters", "registered clusters and their GPU nodes by model"),
    ("gpu_models", "api-gpu-models", "the GPU model catalog"),
    ("gpu_models_match", "api-gpu-match", "the models a requirement matches in the pool"),
    ("teams", "api-teams", "your teams and your role in each"),
    ("queue", "api-queue", "queued jobs in scheduler order"),
    ("queue_stats", "api-queue-stats", "queued demand and wait percentiles per model"),
    ("quotas", "api-quotas", "team quotas per GPU model"),
    (
        "quotas_preview",
        "api-quotas-preview",
        "platform admins: what the next cycle would do with proposed quota or policy changes",
    ),
    ("cohort_quotas", "api-cohort-quotas", "GPUs owned by a cohort"),
    ("team_policies", "api-team-policies", "weight, cohort, hold and limits per team"),
    ("pool", "api-pool", "the pool now, per cluster and model"),
    ("pool_history", "api-pool-history", "the pool over time"),
    ("fair_share", "api-fair-share", "every team's fair share"),
    (
        "estimates_calibration",
        "api-estimate-calibration",
        "platform admins: first start estimates against actual starts, by wait",
    ),
)


class ApiLinkSerializer(serializers.Serializer):
    url = serializers.URLField()
    description = serializers.CharField()


class ApiIndexSerializer(serializers.Serializer):
    name = serializers.CharField()
    version = serializers.CharField()
    schema = serializers.URLField(help_text="the OpenAPI schema of every operation")
    docs = serializers.URLField(help_text="the same schema as a page to read and try")
    collections = serializers.DictField(child=ApiLinkSerializer())


class ApiIndexView(APIView):
    """``GET /api/v1/``: where everything is, so a client (or a person with curl) starts here
    instead of at a 404. Open to anyone, as the schema and its docs are: it names routes, never
    data."""

    permission_classes = [AllowAny]

    @extend_schema(responses={200: ApiIndexSerializer}, operation_id="api_index")
    def get(self, request: Request) -> Response:
        def url(name: str) -> str:
            return request.build_absolute_uri(reverse(name))

        return Response(
            {
                "name": settings.SPECTACULAR_SETTINGS["TITLE"],
                "version": settings.SPECTACULAR_SETTINGS["VERSION"],
                "schema": url("api-schema"),
                "docs": url("api-docs"),
                "collections": {
                    key: {"url": url(name), "description": what}
                    for key, name, what in API_COLLECTIONS
                },
            }
        )
