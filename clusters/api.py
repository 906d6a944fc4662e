"""REST API of the clusters app: thin views over the services and selectors.

Everyone logged in may list clusters and see their GPUs per model (safe fields only); platform
admins (staff) also see how each is configured, register clusters and test connections. No
response ever carries a credential: at most its hint.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.http import HttpResponse
from django.http.request import RawPostDataException
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    inline_serializer,
)
from rest_framework import permissions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters import selectors, serving, tasks
from clusters.connection_test import cluster_test
from clusters.logs import LOG_ATTEMPTS, LOG_TAIL_DEFAULT, LOG_TAIL_MAX, job_logs, log_since_parse
from clusters.models import Cluster, ClusterFinding, ClusterState, SharingMode
from clusters.registration import cluster_credentials_from_input, cluster_register
from portal.access import job_get_for_user
from portal.api.auth import ApiTokenAuthentication
from portal.api.query import FlagField, WholeNumberField, query_params
from portal.api.schema import error
from portal.errors import Forbidden, NotFound
from portal.models import Membership, Role

# ---------------------------------------------------------------------------------------------
# Serializers
# ---------------------------------------------------------------------------------------------


class FindingSerializer(serializers.ModelSerializer):
    """One finding of the cluster doctor: what is wrong, what it means for jobs, the fix."""

    class Meta:
        model = ClusterFinding
        fields = [
            "code",
            "severity",
            "title",
            "explanation",
            "fix",
            "nodes",
            "first_seen_at",
            "seen_at",
        ]
        read_only_fields = fields
        extra_kwargs = {"nodes": {"help_text": "The nodes it concerns (none: the cluster)"}}


class FindingAdminSerializer(FindingSerializer):
    """A finding as platform admins read it: with ``detail``, the raw error behind it
    (Prometheus's or the API server's own words, which can name hosts and private addresses,
    so never in what every user reads)."""

    class Meta(FindingSerializer.Meta):
        fields = [*FindingSerializer.Meta.fields, "detail"]
        read_only_fields = fields


class ClusterSerializer(serializers.ModelSerializer):
    """What every user may know about a cluster."""

    gpus = serializers.SerializerMethodField(help_text="Allocatable GPUs per model")
    reachable = serializers.BooleanField(
        read_only=True, help_text="False while the portal's calls do not reach the API server"
    )
    findings = FindingSerializer(
        many=True,
        read_only=True,
        help_text="What the cluster doctor found at its last check, most serious first",
    )

    class Meta:
        model = Cluster
        fields = [
            "name",
            "state",
            "gpus",
            "inventory_synced_at",
            "reachable",
            "unreachable_since",
            "doctor_checked_at",
            "findings",
        ]

    def get_gpus(self, cluster: Cluster) -> dict[str, int]:
        return dict(self.context.get("gpus", {}).get(cluster.pk, {}))


class ClusterAdminSerializer(ClusterSerializer):
    """What platform admins see as well (never the credentials, only their hint)."""

    findings = FindingAdminSerializer(
        many=True,
        read_only=True,
        help_text="What the cluster doctor found at its last check, most serious first, "
        "each with the raw error behind it",
    )

    class Meta:
        model = Cluster
        fields = [
            *ClusterSerializer.Meta.fields,
            "api_url",
            "namespace",
            "namespace_per_team",
            "scheduler_name",
            "gpu_label",
            "auth_method",
            "credential_hint",
            "credentials_updated_at",
            "prometheus_url",
            "request_rate",
            "creates_in_flight",
            "sharing_mode",
            "kubernetes_version",
            "last_test_at",
            "last_test_ok",
            "last_test_message",
            "inventory_error",
            "queues_synced_at",
            "queues_error",
            "reconciled_at",
            "reconcile_error",
            "unreachable_error",
        ]


class ClosedClusterSchema(OpenApiSerializerExtension):
    """The public view of a cluster allows no other field, so that an admin's answer (which
    has more) matches only ``ClusterAdmin`` and a member's only ``Cluster`` in ``ClusterView``."""

    target_class = ClusterSerializer

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        return {**schema, "additionalProperties": False}


def _cluster_view(*, many: bool = False) -> PolymorphicProxySerializer:
    """What ``GET`` answers: the admin view to platform admins, the public one to others."""
    return PolymorphicProxySerializer(
        component_name="ClusterView",
        serializers=[ClusterSerializer, ClusterAdminSerializer],
        resource_type_field_name=None,
        many=many,
    )


class ClusterInputSerializer(serializers.Serializer):
    """Register a cluster: a kubeconfig, or the API URL, a token and the CA (PEM)."""

    name = serializers.SlugField(max_length=63)
    kubeconfig = serializers.CharField(required=False, write_only=True, trim_whitespace=False)
    api_url = serializers.CharField(required=False)
    token = serializers.CharField(required=False, write_only=True)
    ca_pem = serializers.CharField(required=False, trim_whitespace=False)
    namespace = serializers.CharField(required=False, max_length=63)
    namespace_per_team = serializers.BooleanField(required=False)
    scheduler_name = serializers.CharField(required=False, max_length=63)
    gpu_label = serializers.CharField(required=False, max_length=253)
    prometheus_url = serializers.URLField(required=False, allow_blank=True)
    state = serializers.ChoiceField(choices=ClusterState.choices, required=False)
    request_rate = serializers.IntegerField(required=False, min_value=1, allow_null=True)
    creates_in_flight = serializers.IntegerField(required=False, min_value=1, allow_null=True)
    sharing_mode = serializers.ChoiceField(choices=SharingMode.choices, required=False)


REPORT = inline_serializer(
    "ConnectionReport",
    {
        "ok": serializers.BooleanField(),
        "summary": serializers.CharField(),
        "version": serializers.CharField(),
        "node_count": serializers.IntegerField(allow_null=True),
        "checks": serializers.ListField(child=serializers.DictField()),
    },
)
OPTION_FIELDS = (
    "namespace",
    "namespace_per_team",
    "scheduler_name",
    "gpu_label",
    "prometheus_url",
    "state",
    "request_rate",
    "creates_in_flight",
    "sharing_mode",
)


def _gpu_context(user: Any) -> dict[str, Any]:
    return {"gpus": {c.pk: gpus for c, gpus in selectors.clusters_with_gpu_summary(user)}}


def _serializer_for(user: Any) -> type[ClusterSerializer]:
    return ClusterAdminSerializer if user.is_staff else ClusterSerializer


def _get(name: str) -> Cluster:
    cluster = selectors.cluster_get(name=name)
    if cluster is None:
        raise NotFound("Cluster not found.")
    return cluster


def _sync_soon(cluster_pk: int) -> None:
    def enqueue() -> None:
        tasks.sync_inventory.delay(cluster_pk)
        tasks.sync_queues.delay(cluster_pk)

    transaction.on_commit(enqueue)


class IsStaff(permissions.BasePermission):
    message = "Only platform admins manage clusters."

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated and request.user.is_staff)


# ---------------------------------------------------------------------------------------------
# Views
# ---------------------------------------------------------------------------------------------


# A registration's token or kubeconfig never reaches an error report (the 500 mail to ADMINS,
# any error tracker): not from a form-encoded POST, and not from any local variable below the
# view (the validated data, the serializer, the parser's frames). ``dispatch`` is what receives
# Django's request.
@method_decorator(
    [sensitive_post_parameters("token", "kubeconfig"), sensitive_variables()], name="dispatch"
)
class ClusterListView(APIView):
    """Clusters and their GPUs per model; platform admins register new ones here."""

    def get_permissions(self) -> list[Any]:
        if self.request.method == "POST":
            return [permissions.IsAuthenticated(), IsStaff()]
        return [permissions.IsAuthenticated()]

    @extend_schema(responses={200: _cluster_view(many=True)})
    def get(self, request: Request) -> Response:
        clusters = selectors.clusters_visible_to(request.user).prefetch_related("findings")
        serializer = _serializer_for(request.user)(
            clusters, many=True, context=_gpu_context(request.user)
        )
        return Response(serializer.data)

    @extend_schema(request=ClusterInputSerializer, responses={201: ClusterAdminSerializer})
    def post(self, request: Request) -> Response:
        data = ClusterInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        credentials = cluster_credentials_from_input(
            kubeconfig=values.get("kubeconfig"),
            api_url=values.get("api_url"),
            token=values.get("token"),
            ca_pem=values.get("ca_pem"),
        )
        options = {k: values[k] for k in OPTION_FIELDS if k in values}
        cluster, _ = cluster_register(name=values["name"], credentials=credentials, **options)
        _sync_soon(cluster.pk)
        return Response(
            ClusterAdminSerializer(cluster, context=_gpu_context(request.user)).data,
            status=status.HTTP_201_CREATED,
        )


class ClusterDetailView(APIView):
    @extend_schema(responses={200: _cluster_view()})
    def get(self, request: Request, name: str) -> Response:
        cluster = _get(name)
        return Response(
            _serializer_for(request.user)(cluster, context=_gpu_context(request.user)).data
        )


class ClusterTestView(APIView):
    """Connect to the cluster and check everything the portal needs, in words."""

    permission_classes = [permissions.IsAuthenticated, IsStaff]

    @extend_schema(request=None, responses={200: REPORT})
    def post(self, request: Request, name: str) -> Response:
        report = cluster_test(cluster=_get(name))
        return Response(report.as_dict())


class ClusterSyncView(APIView):
    """Read the inventory and sync the queues now (in the background)."""

    permission_classes = [permissions.IsAuthenticated, IsStaff]

    @extend_schema(
        request=None,
        responses={202: inline_serializer("SyncRequested", {"message": serializers.CharField()})},
    )
    def post(self, request: Request, name: str) -> Response:
        cluster = _get(name)
        _sync_soon(cluster.pk)
        return Response({"message": "Sync requested."}, status=status.HTTP_202_ACCEPTED)


class LogsQuery(serializers.Serializer):
    replica = WholeNumberField(min_value=0, default=0, help_text="0-based replica (default 0)")
    tail = WholeNumberField(
        default=LOG_TAIL_DEFAULT,
        help_text=f"Last lines (default {LOG_TAIL_DEFAULT}, "
        f"at most {LOG_TAIL_MAX:,}; larger values are capped); with since, the "
        "lines after it instead",
    )
    attempt = serializers.ChoiceField(
        choices=list(LOG_ATTEMPTS),
        default="current",
        help_text="current (default), or previous: the run before the container last restarted",
    )
    since = serializers.CharField(
        required=False,
        max_length=64,
        help_text="A line's timestamp (next_since of the last read): only the lines after it; "
        "or a duration (10m, 2h): the lines of that last stretch",
    )
    timestamps = FlagField(default=False, help_text="Prefix each line with its RFC 3339 time")


class JobLogsView(APIView):
    """One replica's log (team members only; another team's job is a 404).

    To tail it, read again every few seconds with ``since`` set to the answer's
    ``next_since``: each read returns only the lines after it, while ``running`` says more
    may come (``docs/decisions.md``, "Logs are tailed by reading after a cursor").
    """

    @extend_schema(
        parameters=[LogsQuery],
        responses={
            200: inline_serializer(
                "JobLogs",
                {
                    "replica": serializers.IntegerField(),
                    "pod": serializers.CharField(),
                    "attempt": serializers.CharField(),
                    "available": serializers.BooleanField(),
                    "message": serializers.CharField(),
                    "text": serializers.CharField(),
                    "next_since": serializers.CharField(
                        help_text="The last line's timestamp: pass it as since to read on"
                    ),
                    "running": serializers.BooleanField(
                        help_text="The job has not ended: more lines may come"
                    ),
                },
            )
        },
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = job_get_for_user(request.user, job_id)
        query = query_params(LogsQuery, request)
        since = query.get("since")
        logs = job_logs(
            job=job,
            replica=query["replica"],
            tail=query["tail"],
            attempt=query["attempt"],
            since=log_since_parse(since) if since else None,
            timestamps=query["timestamps"],
        )
        return Response(
            {
                "replica": logs.replica,
                "pod": logs.pod,
                "attempt": logs.attempt,
                "available": logs.available,
                "message": logs.message,
                "text": logs.text,
                "next_since": logs.next_since,
                "running": logs.running,
            }
        )


PROXY_ERRORS = {
    409: error("The job serves nothing, or does not run now"),
    502: error("The job's cluster cannot be reached, or refused the portal"),
    503: error("The job's server is not ready: no replica passes its readiness probe"),
}
PROXY_ANSWER = OpenApiResponse(
    OpenApiTypes.BINARY, description="The job's server's own answer, whatever its status"
)


class JobProxyView(APIView):
    """An HTTP request relayed to an inference job's server, through its cluster's API server
    (``gpupool port-forward``): the server's answer comes back as it is (up to 16 MiB, whole,
    not streamed). Members and admins of the job's team only: another team's job is a 404,
    a viewer is refused (a call spends the team's GPUs).

    API tokens only, never the browser's session: the answer is the server's, whatever it is
    (HTML, scripts), and must never run as the portal's page; it is also sandboxed by its
    Content-Security-Policy."""

    authentication_classes = [ApiTokenAuthentication]

    def _relay(self, request: Request, job_id: str, path: str) -> HttpResponse:
        job = job_get_for_user(request.user, job_id)
        role = (
            Membership.objects.filter(user=request.user, team_id=job.team_id)
            .values_list("role", flat=True)
            .first()
        )
        if role is None:  # a platform admin sees every job, but only a member calls its server
            raise NotFound("Job not found.")
        if role == Role.VIEWER:
            raise Forbidden(
                f"A viewer of team {job.team.slug} may not call its jobs' servers; a team "
                "admin can make you a member."
            )
        try:
            body = request._request.body
        except RawPostDataException:  # already read as a form (a session request): none left
            body = b""
        answer = serving.job_proxy(
            job=job,
            method=request.method or "GET",
            path=path,
            query=[(k, v) for k, values in request.GET.lists() for v in values],
            body=body,
            content_type=request.META.get("CONTENT_TYPE", ""),
            accept=request.META.get("HTTP_ACCEPT", ""),
        )
        response = HttpResponse(
            answer.body,
            status=answer.status,
            content_type=answer.content_type or "application/octet-stream",
        )
        response["Cache-Control"] = "no-store"
        response["Content-Security-Policy"] = "sandbox; default-src 'none'"
        return response

    @extend_schema(responses={200: PROXY_ANSWER, **PROXY_ERRORS})
    def get(self, request: Request, job_id: str, path: str) -> HttpResponse:
        return self._relay(request, job_id, path)

    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: PROXY_ANSWER, **PROXY_ERRORS})
    def post(self, request: Request, job_id: str, path: str) -> HttpResponse:
        return self._relay(request, job_id, path)

    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: PROXY_ANSWER, **PROXY_ERRORS})
    def put(self, request: Request, job_id: str, path: str) -> HttpResponse:
        return self._relay(request, job_id, path)

    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: PROXY_ANSWER, **PROXY_ERRORS})
    def patch(self, request: Request, job_id: str, path: str) -> HttpResponse:
        return self._relay(request, job_id, path)

    @extend_schema(responses={200: PROXY_ANSWER, **PROXY_ERRORS})
    def delete(self, request: Request, job_id: str, path: str) -> HttpResponse:
        return self._relay(request, job_id, path)
