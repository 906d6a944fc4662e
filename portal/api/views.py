"""REST API views: thin wrappers that parse, call a service or selector, and serialize."""

from __future__ import annotations

import functools
from typing import Any

from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.serializer_helpers import ReturnDict
from rest_framework.views import APIView

from portal.access import job_get_for_user, jobs_visible_to, team_roles_of, teams_visible_to
from portal.api.filters import JobFilter
from portal.api.pagination import EventCursorPagination
from portal.api.serializers import (
    BatchInputSerializer,
    GpuModelSerializer,
    JobEventSerializer,
    JobInputSerializer,
    JobSerializer,
    TeamSerializer,
)
from portal.api.throttles import SubmitThrottle
from portal.jobs.services import job_cancel, job_submit, job_submit_batch
from portal.models import Job, Team
from scheduling.models import GpuModel

IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    location=OpenApiParameter.HEADER,
    required=False,
    description="Repeat a submission safely: the same key from the same user returns the "
    "original job(s), never new ones.",
)
ERROR = inline_serializer(
    "Error",
    {
        "message": serializers.CharField(),
        "extra": inline_serializer(
            "ErrorExtra",
            {
                "fields": serializers.DictField(
                    child=serializers.ListField(child=serializers.CharField())
                )
            },
        ),
    },
)


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
    return jobs_visible_to(request.user).select_related("team", "owner", "cluster", "gpu_model")


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

    def get_throttles(self) -> list[Any]:
        return [SubmitThrottle()] if self.request.method == "POST" else super().get_throttles()

    @extend_schema(
        request=JobInputSerializer,
        parameters=[IDEMPOTENCY_HEADER],
        responses={
            201: JobSerializer,
            200: OpenApiResponse(JobSerializer, description="Replay of an earlier Idempotency-Key"),
            400: ERROR,
            403: ERROR,
            404: ERROR,
            409: ERROR,
        },
    )
    def post(self, request: Request) -> Response:
        result = job_submit(
            user=request.user,
            data=request.data,
            idempotency_key=request.headers.get("Idempotency-Key"),
        )
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(job_data(result.job), status=code)


class JobBatchView(APIView):
    """Submit up to 1,000 jobs at once; one invalid job rejects the whole batch."""

    throttle_classes = [SubmitThrottle]

    @extend_schema(
        request=BatchInputSerializer,
        parameters=[IDEMPOTENCY_HEADER],
        responses={
            201: JobSerializer(many=True),
            200: JobSerializer(many=True),
            400: ERROR,
            409: ERROR,
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
    @extend_schema(responses={200: JobSerializer, 404: ERROR})
    def get(self, request: Request, job_id: str) -> Response:
        return Response(job_data(job_get_for_user(request.user, job_id)))


class JobCancelView(APIView):
    @extend_schema(request=None, responses={202: JobSerializer, 403: ERROR, 404: ERROR, 409: ERROR})
    def post(self, request: Request, job_id: str) -> Response:
        job = job_cancel(job=job_get_for_user(request.user, job_id), by=request.user)
        return Response(job_data(job), status=status.HTTP_202_ACCEPTED)


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
